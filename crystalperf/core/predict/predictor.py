"""What-if prediction (paper §5): new task times from the resource models, a replay of the tasks on
the new slots (``simulation``), then a re-traversal of the DAG for the job's new runtime.

Every prediction carries a low/high band (``band``) and, for honesty, two baselines computed in the same call:
linear scaling by the changed resource, and task replay without resource vectors (what Sparklens does).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from crystalperf.core.predict.band import (
    ASSUMED_BANDWIDTH_RANGE,
    BAND_QUANTILES,
    MONTE_CARLO_BUDGET,
    MONTE_CARLO_FULL_WORK,
    MONTE_CARLO_MIN_RUNS,
    MONTE_CARLO_OPERATIONS,
    MONTE_CARLO_RUNS,
    Draw,
    quantile,
    with_rerun,
)
from crystalperf.core.predict.base import (
    DEFAULT_GPU_SPEEDUP,
    ROUND_TRIPS_NOTE,
    STATABLE_KEYS,
    Baseline,
    Changes,
    ResourceModel,
)
from crystalperf.core.predict.ceilings import CORES
from crystalperf.core.predict.compute import ComputeModel, warmup_evidence
from crystalperf.core.predict.engine import Simulator
from crystalperf.core.predict.io import IOModel
from crystalperf.core.profile.dag import ExecutionProfile, unit_profiles
from crystalperf.core.units import format_size

# Fewer first-wave tasks than this say little of a warm-up: the band spans none to the factor they give.
WARMUP_EVIDENCE_TASKS = 4
# Predictions within this of the traced runtime are "no change", not "slower".
SLOWER_TOLERANCE = 0.01


@dataclass
class Estimate:
    runtime_s: float
    low_s: float | None = None
    high_s: float | None = None
    # The band from the model's inputs alone, without a rerun's spread (band.RERUN_SPREAD): a gain over the traced run
    # is the model's to show, as both runs would spread alike.
    model_low_s: float | None = None
    model_high_s: float | None = None

    @property
    def fast_end_s(self) -> float:
        """The band's fast end; the point estimate where there is no band."""
        return self.low_s if self.low_s is not None else self.runtime_s

    @property
    def slow_end_s(self) -> float:
        """The band's slow end; the point estimate where there is no band."""
        return self.high_s if self.high_s is not None else self.runtime_s


@dataclass
class Prediction:
    changes: Changes
    crystalperf: Estimate
    linear: Estimate
    replay: Estimate
    baseline_runtime_s: float
    notes: list[str] = field(default_factory=list)
    # the ceilings that bound the point estimate: seconds each added, and how many times more of its resource
    # the most bound operation would need (``crystalperf.core.predict.ceilings``)
    ceilings: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.baseline_runtime_s / self.crystalperf.runtime_s if self.crystalperf.runtime_s > 0 else float("inf")

    def as_dict(self) -> dict[str, object]:
        def est(e: Estimate) -> dict[str, object]:
            d: dict[str, object] = {"runtime_s": round(e.runtime_s, 6)}
            if e.low_s is not None:
                d["low_s"] = round(e.low_s, 6)
                d["high_s"] = round(e.slow_end_s, 6)
            return d

        shown: dict[str, object] = {
            "changes": {k: v for k, v in self.changes.values.items()},
            "description": self.changes.describe(),
            "baseline_runtime_s": round(self.baseline_runtime_s, 6),
            "crystalperf": est(self.crystalperf),
            "linear": est(self.linear),
            "replay": est(self.replay),
            "speedup": round(self.speedup, 4),
            "notes": self.notes,
        }
        if self.changes.added:
            # ``rtt=+10ms`` is {"rtt": 0.01} in "changes": these keys' values add to the traced run's
            shown["added"] = sorted(self.changes.added)
        if self.changes.baselines:
            shown["stated_baselines"] = dict(self.changes.baselines)
        if self.ceilings:
            shown["ceilings"] = {kind: {"added_s": round(added, 6), "needs_factor": round(needed, 4)}
                                 for kind, (added, needed) in self.ceilings.items()}
        return shown

class Predictor(Simulator):
    """Predicts the runtime of a traced job under resource changes: the simulation's point estimate, its band,
    the two baselines beside it, and the notes that explain it."""

    def __init__(self, profile: ExecutionProfile, models: Sequence[ResourceModel] | None = None) -> None:
        super().__init__(profile, models)
        # Replays without vectors depend on the slots and the compute model's changes only.
        self._replays: dict[tuple[object, ...], float] = {}
        self._runs: tuple[int, float] | None = None

    def linear_factor(self, changes: Changes) -> float:
        b = self.baseline.stated(changes)
        factor = b.slots / self.new_slots(changes)
        if "cpu_speed" in changes:
            factor /= changes.number("cpu_speed", 1.0)
        if "cpu_share" in changes:
            factor /= changes.number("cpu_share", 1.0)
        if "device" in changes and changes.get("device") != b.device:
            speedup = changes.number("gpu_speedup", DEFAULT_GPU_SPEEDUP)
            factor *= 1 / speedup if changes.get("device") == "gpu" else speedup
        if "network" in changes:
            factor *= b.network_bandwidth / changes.number("network", b.network_bandwidth)
        if "disk" in changes:
            factor *= b.disk_bandwidth / changes.number("disk", b.disk_bandwidth)
        if "memory" in changes and b.memory_bytes:
            factor *= b.memory_bytes / changes.number("memory", b.memory_bytes)
        return factor

    def predict(self, changes: Changes, *, band: bool = True, seed: int = 0) -> Prediction:
        baseline = self.baseline.stated(changes)
        # a bandwidth assumption matters to the scenarios that change that bandwidth
        notes = [a for a in baseline.assumptions
                 if not any(a.startswith(f"{key} bandwidth") and key not in changes for key in STATABLE_KEYS)]
        model_notes = self.prepare(changes)
        # the streaming throughput model, where it answers this scenario
        stream = self._stream_cpu if self._stream_cpu and self._stream_cpu.predict(changes) is not None else None
        if stream is not None and ("network" in changes or "rtt" in changes):
            # the streaming model answers the link's change: the I/O model's sharing of it over tasks is not used
            model_notes = [n for n in model_notes if not n.startswith(("network: ", ROUND_TRIPS_NOTE))]
            window = stream.window_note(changes)
            if window:
                model_notes.append(window)
        if stream is not None and "memory" in changes:
            # the streaming model answers a heap change: the spill model's reading of memory is not used
            model_notes = [n for n in model_notes if not n.startswith("memory")]
        if stream is not None:
            model_notes += [n for n in (stream.collector_note(changes), stream.heap_note(changes)) if n]
        notes += baseline.notes_for(changes) + model_notes
        outside_s = self.outside_change(changes)
        if outside_s and self.outside is not None:
            notes.append(f"outside the operations: the job's processes read {format_size(self.outside.read_bytes)} "
                         f"from the storage device in the {self.outside.seconds:.2f} s between them (start-up, "
                         f"the driver's own work); the new bandwidth changes that time by {outside_s:+.2f} s")
        start_up_ends = self.start_up_ends(changes)
        if start_up_ends != (0.0, 0.0) and self.start_up is not None:
            notes.append(self.start_up.note(int(changes.number("executors", baseline.executors))))
        if self.baseline.slots != self.new_slots(changes):
            notes.append(f"task slots {self.baseline.slots} -> {self.new_slots(changes)}"
                         + (f" (first-wave warm-up factor {self.warmup:.2f})" if self.warmup != 1.0 else ""))
            spread = self.spread.note(self.new_slots(changes)) if self.spread and "parallelism" in changes else None
            touch = self.ceilings.first_touch if self.ceilings.useful or stream is not None else None
            touched = touch.note(self.ceilings.side_by_side(changes, self.new_slots(changes))) if touch else None
            notes += [n for n in (spread, touched) if n]
        point = self.simulate(changes, record_point=True)
        bound: dict[str, tuple[float, float]] = {}
        if self._floors is not None:
            notes += self.ceilings.notes(self._floors, self.runtime)
            bound = {kind: (added, self._floors.needed.get(kind, 1.0)) for kind, added in self._floors.added.items()}
        if stream is not None:
            notes.append(stream.note())
        estimate = Estimate(point)
        if band:
            rng = random.Random(seed)
            runs, share = self._monte_carlo_runs()
            draws = []
            point_floors = self._floors
            for number in range(runs):
                warm = rng.choice(self.warmup_factors) if self.warmup_factors else None
                if point_floors is not None:
                    self._floors = self.ceilings.drawn(point_floors, rng)
                drawn = self.simulate(changes, draw=Draw.seeded(rng.random(), warm, share, number))
                # Redrawing a share of the operations shows that share of the variance: scaled back to all.
                draws.append(point + (drawn - point) / math.sqrt(share))
            self._floors = point_floors
            # A bandwidth the trace did not give is a guess: the band spans what the traced run could have had.
            for key in STATABLE_KEYS:
                if key in changes and baseline.origins.get(key) == "assumed":
                    for factor in ASSUMED_BANDWIDTH_RANGE:
                        guess = replace(changes, baselines={**changes.baselines, key: baseline.bandwidth(key) * factor})
                        draws.append(self.simulate(guess))
                    notes.append(f"the band spans a traced {key} bandwidth {1 / ASSUMED_BANDWIDTH_RANGE[0]:g}x "
                                 f"lower to {ASSUMED_BANDWIDTH_RANGE[1]:g}x higher than assumed")
            # A warm-up factor of a few first-wave tasks is a few tasks' start-up (JIT, caches, connections): the band
            # spans no warm-up to that factor.
            evidence = warmup_evidence(self.profile, self.baseline.slots)
            if (self.warmup > 1.0 and self.new_slots(changes) != baseline.slots
                    and evidence < WARMUP_EVIDENCE_TASKS):
                draws.append(self.simulate(changes, draw=Draw(warmup=1.0)))
                notes.append(f"the first-wave warm-up factor {self.warmup:.2f} comes from {evidence} first-wave "
                             f"task{'s' if evidence != 1 else ''}: the band spans no warm-up to it")
            # A floor on the cores keeps them as busy as the busiest second of the traced run; an operation may get
            # no nearer to that than it did itself: the band spans both.
            if self._floors is not None and CORES in self._floors.added:
                point_floors = self._floors
                self._floors = self.ceilings.floors(changes, baseline, self.new_slots(changes), pessimistic=True)
                draws.append(self.simulate(changes))
                self._floors = point_floors
            # A model whose reading of the trace bounds a quantity without fixing it spans its states.
            for model in self.models:
                variants = getattr(model, "band_variants", None)
                if variants is not None:
                    draws.extend(self.simulate(changes) for _ in variants())
            # The throughput model's point lets extra work fill the traced seconds its limits did not set: the band
            # spans those seconds kept and gone.
            if stream is not None and (unexplained := stream.band(changes)) is not None:
                draws.extend(unexplained)
                notes.append(f"the band spans the {unexplained[1] - unexplained[0]:.2f} s of the traced run beyond "
                             "its CPU limit (start-up, the first records, the last output) kept and gone")
            # The start-up's band spans its other end.
            if start_up_ends[1] != start_up_ends[0]:
                draws.append(point + start_up_ends[1] - start_up_ends[0])
            monte_carlo, guesses = draws[:runs], draws[runs:]
            estimate.model_low_s = min([point, quantile(monte_carlo, BAND_QUANTILES[0]), *guesses])
            estimate.model_high_s = max([point, quantile(monte_carlo, BAND_QUANTILES[1]), *guesses])
            # and where a rerun under the changes would land
            estimate.low_s, estimate.high_s = with_rerun(point, estimate.model_low_s, estimate.model_high_s)
        self._explain_slower(changes, baseline, estimate, notes)
        linear = Estimate(self.runtime * self.linear_factor(changes))
        # Without vectors only the slots and the compute model's changes (and the stated baselines it reads)
        # matter: scenarios that share them share the replay.
        replay_key = (self.new_slots(changes), "parallelism" in changes,
                      tuple(sorted((k, str(v)) for k, v in changes.values.items() if k in ComputeModel.keys)),
                      tuple(sorted(changes.baselines.items())))
        if replay_key not in self._replays:
            self._replays[replay_key] = self.simulate(changes, with_vectors=False)
        replayed = Estimate(self._replays[replay_key])
        return Prediction(changes, estimate, linear, replayed, self.runtime, notes, bound)

    def _more_only(self, changes: Changes, baseline: Baseline) -> bool:
        """Whether every change gives the job more of a resource than the traced run had."""
        more: dict[str, Callable[[float], bool]] = {
            "network": lambda v: v > baseline.network_bandwidth,
            "disk": lambda v: v > baseline.disk_bandwidth,
            "cores": lambda v: v > baseline.cores_per_executor,
            "executors": lambda v: v > baseline.executors,
            "parallelism": lambda v: v > baseline.slots,
            "slots": lambda v: v > baseline.slots,
            "cpu_speed": lambda v: v > 1.0,
            "cpu_share": lambda v: v > 1.0,
            "memory": lambda v: baseline.memory_bytes is not None and v > baseline.memory_bytes,
        }
        keys = [k for k in changes.values if k != "gpu_speedup"]
        return bool(keys) and all(k in more and more[k](changes.number(k, 0.0)) for k in keys)

    def _monte_carlo_runs(self) -> tuple[int, float]:
        """How many draws a band takes, and the share of the operations each redraws. A large job gets
        fewer draws, each redrawing at most MONTE_CARLO_OPERATIONS of its operations: a draw costs a replay
        of every task it redraws, and the band of a job of many operations is narrow anyway (their
        deviations average out). The same for every scenario: worked out once."""
        if self._runs is None:
            self._runs = self._count_runs()
        return self._runs

    def _count_runs(self) -> tuple[int, float]:
        units = [self._unit(p) for p in unit_profiles(self.profile)]
        work = sum(len(u.tasks) + 1 for u in units)
        if self.streaming or work <= MONTE_CARLO_FULL_WORK:
            return MONTE_CARLO_RUNS, 1.0
        share = min(1.0, MONTE_CARLO_OPERATIONS / len(units))
        # a draw re-traverses every operation (about an eighth of replaying one) and replays those it redraws
        cost = work * share + len(units) / 8
        return max(MONTE_CARLO_MIN_RUNS, min(MONTE_CARLO_RUNS, round(MONTE_CARLO_BUDGET / cost))), share

    def _explain_slower(self, changes: Changes, baseline: Baseline, estimate: Estimate, notes: list[str]) -> None:
        """More of a resource predicted slower needs a reason the user can read; without one it is a model's
        artefact, and the job is taken as no slower."""
        if not self._more_only(changes, baseline) or estimate.runtime_s <= self.runtime * (1 + SLOWER_TOLERANCE):
            return
        if self.warmup > 1.0 and self.new_slots(changes) != baseline.slots:
            if self.simulate(changes, draw=Draw(warmup=1.0)) <= self.runtime * (1 + SLOWER_TOLERANCE):
                notes.append(f"slower with more task slots: this trace's first-wave tasks ran {self.warmup:.2f}x "
                             "longer than later ones (JIT, caches and connections warming up), and more slots "
                             "put more tasks in a first wave")
                return
        locality = next((m.locality for m in self._active_models if isinstance(m, IOModel) and m.locality), None)
        if locality is not None and locality.more_remote:
            # a real cost of scaling out, not an artefact: the job may well be slower
            notes.append(f"slower with more executors: {locality.share_after:.0%} of the shuffle crosses the network "
                         f"instead of {locality.share_before:.0%}")
            return
        notes.append(f"the models gave {estimate.runtime_s:.2f} s, above the traced {self.runtime:.2f} s, for more "
                     f"of every resource changed ({changes.describe()}): taken as no slower")
        estimate.runtime_s = self.runtime
        if estimate.low_s is not None:
            low = estimate.model_low_s if estimate.model_low_s is not None else estimate.low_s
            estimate.model_low_s = min(low, self.runtime)
            estimate.model_high_s = self.runtime
            estimate.low_s, estimate.high_s = with_rerun(self.runtime, estimate.model_low_s, self.runtime)
