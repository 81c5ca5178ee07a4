"""What-if prediction (paper §5): new task times from the resource models, a replay of the tasks on
the new slots, then a re-traversal of the DAG for the job's new runtime.

Every prediction carries a low/high band (a seeded Monte Carlo over task durations, resource vectors
and the warm-up factor) and, for honesty, two baselines computed in the same call: linear scaling by
the changed resource, and task replay without resource vectors (what Sparklens does).
"""

from __future__ import annotations

import logging
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata

from crystalperf.core.bottleneck import expand, level_critical_path
from crystalperf.core.predict.base import (
    DEFAULT_GPU_SPEEDUP,
    KNOWN_KEYS,
    STATABLE_KEYS,
    Baseline,
    Changes,
    OpContext,
    ResourceModel,
    TaskParts,
    runs_its_children,
    scaling_keys,
)
from crystalperf.core.predict.compute import ComputeModel, estimate_warmup, replay
from crystalperf.core.predict.io import IOModel
from crystalperf.core.predict.memory import MemoryModel
from crystalperf.core.predict.streaming import StreamingCpu
from crystalperf.core.profile import ExecutionProfile, LevelGraph, OperationProfile
from crystalperf.core.resources import ResourceVector
from crystalperf.core.trace import ATTRIBUTE_WAITS_ON, METRIC_RUN_TIME

__all__ = ["Baseline", "Changes", "KNOWN_KEYS", "Prediction", "Predictor", "default_scenarios", "replay"]

log = logging.getLogger(__name__)

MONTE_CARLO_RUNS = 16
BAND_QUANTILES = (0.1, 0.9)
# A bandwidth the trace does not give may have been this much lower / higher than the assumed figure.
ASSUMED_BANDWIDTH_RANGE = (0.1, 4.0)
# Predictions within this of the traced runtime are "no change", not "slower".
SLOWER_TOLERANCE = 0.01


def installed_models() -> list[ResourceModel]:
    """The built-in models plus any registered under ``crystalperf.predictors``."""
    models: list[ResourceModel] = []
    seen: set[str] = set()
    try:
        eps = sorted(metadata.entry_points(group="crystalperf.predictors"), key=lambda e: e.name)
    except Exception:  # a broken distribution's metadata must not stop predictions
        eps = []
    for ep in eps:
        try:
            models.append(ep.load()())
            seen.add(ep.name)
        except Exception as exc:
            log.warning("predictor %s could not be loaded: %s", ep.name, exc)
    for name, cls in (("compute", ComputeModel), ("memory", MemoryModel), ("io", IOModel)):
        if name not in seen:
            models.append(cls())
    return models


@dataclass
class Estimate:
    runtime_s: float
    low_s: float | None = None
    high_s: float | None = None


@dataclass
class Prediction:
    changes: Changes
    crystalperf: Estimate
    linear: Estimate
    replay: Estimate
    baseline_runtime_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.baseline_runtime_s / self.crystalperf.runtime_s if self.crystalperf.runtime_s > 0 else float("inf")

    def as_dict(self) -> dict[str, object]:
        def est(e: Estimate) -> dict[str, object]:
            d: dict[str, object] = {"runtime_s": round(e.runtime_s, 6)}
            if e.low_s is not None:
                d["low_s"] = round(e.low_s, 6)
                d["high_s"] = round(e.high_s or e.runtime_s, 6)
            return d

        return {
            "changes": {k: v for k, v in self.changes.values.items()},
            "description": self.changes.describe(),
            "baseline_runtime_s": round(self.baseline_runtime_s, 6),
            "crystalperf": est(self.crystalperf),
            "linear": est(self.linear),
            "replay": est(self.replay),
            "speedup": round(self.speedup, 4),
            "notes": self.notes,
        }


@dataclass
class _Draw:
    """One Monte Carlo draw of the uncertain inputs (None: use the measured values)."""

    rng: random.Random | None = None
    warmup: float | None = None


class Predictor:
    """Predicts the runtime of a traced job under resource changes."""

    def __init__(self, profile: ExecutionProfile, models: Sequence[ResourceModel] | None = None) -> None:
        self.profile = profile
        self.baseline = Baseline.of(profile.trace)
        self.models = list(models) if models is not None else installed_models()
        self.warmup, self.warmup_factors = estimate_warmup(profile, self.baseline.slots)
        self.streaming = profile.top.pipelined
        streaming = profile.trace.streaming
        # Streaming jobs run until stopped: what we predict is the latency of a record batch
        # through the operators (paper §7.1), at the observed input rate.
        latency = streaming.latency_s if streaming is not None else None
        self.runtime = latency if self.streaming and latency else profile.trace.application.duration
        self._path = expand(profile.top, level_critical_path(profile.top)) if self.streaming else []
        self._stream_cpu = StreamingCpu.of(profile.trace, self.runtime) if self.streaming else None
        self._prepared: tuple[Changes, list[str]] | None = None

    # -- scenario parameters -------------------------------------------------------------------
    def new_slots(self, changes: Changes) -> int:
        b = self.baseline
        if "slots" in changes:
            return int(changes.number("slots", b.slots))
        if "parallelism" in changes:
            return int(changes.number("parallelism", b.slots))
        cores = int(changes.number("cores", b.cores_per_executor))
        executors = int(changes.number("executors", b.executors))
        if "cores" in changes or "executors" in changes:
            return max(1, cores * executors)
        return b.slots

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

    # -- the simulation ----------------------------------------------------------------------------
    def _parts(self, prof: OperationProfile, durations: Sequence[float], with_vectors: bool,
               draw: _Draw, without_waiting: bool = False) -> list[TaskParts]:
        if not with_vectors:
            return [TaskParts(d, 0.0, 0.0) for d in durations]
        vec = prof.vector.vector
        if draw.rng is not None:
            vec = _perturb(vec, prof.vector.samples, prof.vector.source, draw.rng)
        # Waiting is fixed: no change of this operation's own resources shortens the time it waited for input.
        # So is a wait given to the work it waited on (a step's wait for its prefetching input pipeline): how
        # that wait changes is the framework model's business (it sees the work), not the step's resources'.
        through = prof.vector.through or ResourceVector(0.0, 0.0, 0.0, 0.0)
        cpu, disk, network = (max(0.0, vec[i] - through[i]) for i in range(3))
        fixed = vec.waiting + (vec.cpu - cpu) + (vec.disk - disk) + (vec.network - network)
        # a wait the hook says was for the operation's input (a source): shortened by a faster device, if at all
        input_wait = vec.waiting if prof.op.attributes.get(ATTRIBUTE_WAITS_ON) and prof.vector.through is None else 0.0
        if without_waiting:
            fixed, input_wait = fixed - vec.waiting, 0.0
        return [TaskParts(d * cpu, d * disk, d * network, d * (fixed - input_wait), d * input_wait)
                for d in durations]

    def _leaf_duration(self, prof: OperationProfile, changes: Changes, slots: int, with_vectors: bool,
                       draw: _Draw) -> float:
        op = prof.op
        tasks = sorted(op.tasks, key=lambda t: t.start)
        durations = [t.duration for t in tasks] if tasks else [op.duration]
        if draw.rng is not None and len(durations) >= 3:
            durations = [draw.rng.choice(durations) for _ in durations]
        parts = self._parts(prof, durations, with_vectors, draw)
        ctx = OpContext(prof, tasks)
        for model in self.models:
            # Without vectors all time counts as CPU, so only the compute model has anything to scale.
            if with_vectors or model.name == "compute":
                parts = model.adjust(ctx, parts)
        new = [p.total for p in parts]
        if not tasks:
            return max(0.0, op.duration + sum(new) - sum(durations))
        warmup = draw.warmup if draw.warmup is not None else self.warmup
        if "parallelism" in changes and op.parallelism and len(tasks) == op.parallelism:
            # Long-running subtasks (streaming): the operator's work is spread over the new subtasks.
            busy_old = max(durations)
            busy_new = sum(new) / slots
            return max(0.0, op.duration * busy_new / busy_old) if busy_old > 0 else op.duration
        before = replay(durations, self.baseline.slots)
        after = replay(new, slots, original_slots=self.baseline.slots, warmup=warmup)
        return max(0.0, op.duration + after - before)

    def _level_duration(self, level: LevelGraph, leaf: Callable[[OperationProfile], float]) -> float:
        new_start: dict[str, float] = {}
        new_end: dict[str, float] = {}
        last_end = level.start
        for node in level.topological():
            prof = level.nodes[node]
            op = prof.op
            preds = list(level.graph.predecessors(node))
            if preds:
                # Keep the offset to the last predecessor to finish (negative when they overlapped,
                # as pipelined streaming operators do), never starting before a predecessor started.
                gap = op.start - max(level.nodes[p].op.end for p in preds)
                start = max(new_end[p] for p in preds) + gap
                start = max([start, *(new_start[p] for p in preds)])
            else:
                start = op.start - level.start
            start = max(0.0, start)
            if prof.children and not runs_its_children(prof):
                duration = max(self._level_duration(prof.children, leaf), 0.0)
            else:
                duration = leaf(prof)
            new_start[node] = start
            new_end[node] = start + duration
            last_end = max(last_end, op.end)
        tail = max(0.0, level.end - last_end)
        return max(new_end.values(), default=0.0) + tail

    def prepare(self, changes: Changes) -> list[str]:
        """Let every model read the scenario once; returns their notes."""
        if self._prepared is not None and self._prepared[0] is changes:
            return self._prepared[1]
        notes: list[str] = []
        baseline = self.baseline.stated(changes)
        for model in self.models:
            notes.extend(model.prepare(self.profile, baseline, changes))
        self._prepared = (changes, notes)
        return notes

    def _busy_after(self, prof: OperationProfile, changes: Changes, slots: int, with_vectors: bool,
                    draw: _Draw, without_waiting: bool = False) -> float:
        """Busy time of a pipelined operation's busiest task under the changes; work is spread over
        the new number of subtasks when the parallelism changes."""
        tasks = prof.op.tasks
        busy = [t.metrics.get(METRIC_RUN_TIME, t.duration) for t in tasks] if tasks else [prof.busy_time]
        if draw.rng is not None and len(busy) >= 3:
            busy = [draw.rng.choice(busy) for _ in busy]
        parts = self._parts(prof, busy, with_vectors, draw, without_waiting)
        ctx = OpContext(prof, list(tasks))
        for model in self.models:
            if with_vectors or model.name == "compute":
                parts = model.adjust(ctx, parts)
        new = [p.total for p in parts]
        if tasks and "parallelism" in changes:
            return sum(new) / int(changes.number("parallelism", len(tasks)))
        return max(new)

    def simulate(self, changes: Changes, *, with_vectors: bool = True, draw: _Draw | None = None) -> float:
        self.prepare(changes)
        draw = draw or _Draw()
        slots = self.new_slots(changes)
        if self.streaming and with_vectors and self._stream_cpu is not None:
            throughput_bound = self._stream_cpu.predict(changes)
            if throughput_bound is not None:
                return throughput_bound
        if self.streaming:
            # Past the path's head, an operator's waiting is for the operators before it on the path, whose own
            # time the path already counts (a sink idle while its source downloads): counted once.
            before = sum(p.path_time * (1.0 - (p.vector.vector.waiting if i and with_vectors else 0.0))
                         for i, p in enumerate(self._path))
            after = sum(self._busy_after(p, changes, slots, with_vectors, draw, without_waiting=bool(i and with_vectors))
                        for i, p in enumerate(self._path))
            return self.runtime * after / before if before > 0 else self.runtime

        def leaf(prof: OperationProfile) -> float:
            return self._leaf_duration(prof, changes, slots, with_vectors, draw)

        # A parent's duration comes from its children's re-traversal; give it the parent's own span.
        def level_span(level: LevelGraph) -> float:
            return self._level_duration(level, leaf)

        return level_span(self.profile.top)

    def predict(self, changes: Changes, *, band: bool = True, seed: int = 0) -> Prediction:
        baseline = self.baseline.stated(changes)
        # a bandwidth assumption matters to the scenarios that change that bandwidth
        notes = [a for a in baseline.assumptions
                 if not any(a.startswith(f"{key} bandwidth") and key not in changes for key in STATABLE_KEYS)]
        notes += baseline.notes_for(changes) + self.prepare(changes)
        if self.baseline.slots != self.new_slots(changes):
            notes.append(f"task slots {self.baseline.slots} -> {self.new_slots(changes)}"
                         + (f" (first-wave warm-up factor {self.warmup:.2f})" if self.warmup != 1.0 else ""))
        point = self.simulate(changes)
        if self._stream_cpu is not None and self._stream_cpu.predict(changes) is not None:
            notes.append(self._stream_cpu.note())
        estimate = Estimate(point)
        if band:
            rng = random.Random(seed)
            runs = MONTE_CARLO_RUNS if _task_count(self.profile) < 5000 else MONTE_CARLO_RUNS // 2
            draws = []
            for _ in range(runs):
                warm = rng.choice(self.warmup_factors) if self.warmup_factors else None
                draws.append(self.simulate(changes, draw=_Draw(random.Random(rng.random()), warm)))
            # A bandwidth the trace did not give is a guess: the band spans what the traced run could have had.
            for key in STATABLE_KEYS:
                if key in changes and baseline.origins.get(key) == "assumed":
                    for factor in ASSUMED_BANDWIDTH_RANGE:
                        guess = Changes(changes.values, {**changes.baselines, key: baseline.bandwidth(key) * factor})
                        draws.append(self.simulate(guess))
                    notes.append(f"the band spans a traced {key} bandwidth {1 / ASSUMED_BANDWIDTH_RANGE[0]:g}x "
                                 f"lower to {ASSUMED_BANDWIDTH_RANGE[1]:g}x higher than assumed")
            monte_carlo, guesses = draws[:runs], draws[runs:]
            estimate.low_s = min([point, _quantile(monte_carlo, BAND_QUANTILES[0]), *guesses])
            estimate.high_s = max([point, _quantile(monte_carlo, BAND_QUANTILES[1]), *guesses])
        self._explain_slower(changes, baseline, estimate, notes)
        linear = Estimate(self.runtime * self.linear_factor(changes))
        replayed = Estimate(self.simulate(changes, with_vectors=False))
        return Prediction(changes, estimate, linear, replayed, self.runtime, notes)

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

    def _explain_slower(self, changes: Changes, baseline: Baseline, estimate: Estimate, notes: list[str]) -> None:
        """More of a resource predicted slower needs a reason the user can read; without one it is a model's
        artefact, and the job is taken as no slower."""
        if not self._more_only(changes, baseline) or estimate.runtime_s <= self.runtime * (1 + SLOWER_TOLERANCE):
            return
        if self.warmup > 1.0 and self.new_slots(changes) != baseline.slots:
            if self.simulate(changes, draw=_Draw(warmup=1.0)) <= self.runtime * (1 + SLOWER_TOLERANCE):
                notes.append(f"slower with more task slots: this trace's first-wave tasks ran {self.warmup:.2f}x "
                             "longer than later ones (JIT, caches and connections warming up), and more slots "
                             "put more tasks in a first wave")
                return
        notes.append(f"the models gave {estimate.runtime_s:.2f} s, above the traced {self.runtime:.2f} s, for more "
                     f"of every resource changed ({changes.describe()}): taken as no slower")
        estimate.runtime_s = self.runtime
        if estimate.low_s is not None:
            estimate.low_s = min(estimate.low_s, self.runtime)
            estimate.high_s = self.runtime


def _task_count(profile: ExecutionProfile) -> int:
    return sum(len(p.op.tasks) for p in profile.walk())


def _quantile(values: Sequence[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, round(q * 100) - 1))]


def _perturb(vec: ResourceVector, samples: int, source: str, rng: random.Random) -> ResourceVector:
    """A Dirichlet draw around the vector: confident with many samples, loose for guesses."""
    if source == "samples":
        concentration = 10.0 + min(samples, 400)
    elif source in ("metrics", "children"):
        concentration = 60.0
    else:
        concentration = 6.0
    # A category the operation never showed (most often waiting) is not invented by the draw.
    draws = [rng.gammavariate(concentration * v + 0.05, 1.0) if v > 0 or i < 3 else 0.0 for i, v in enumerate(vec)]
    return ResourceVector.of(*draws)


def default_scenarios(profile: ExecutionProfile, baseline: Baseline,
                      models: Sequence[ResourceModel] | None = None) -> list[Changes]:
    """The what-ifs a report shows by default: resizing by the keys the trace declares, the generic resource
    changes the trace gives figures for, then what the resource models propose."""
    keys = scaling_keys(profile.trace)
    scenarios: list[dict[str, float | str]] = []
    if "parallelism" in keys:
        scenarios += [{"parallelism": baseline.slots * 2}]
        if baseline.slots > 1:
            scenarios += [{"parallelism": max(1, baseline.slots // 2)}]
    if "cores" in keys:
        scenarios += [{"cores": baseline.cores_per_executor * 2}]
        if baseline.cores_per_executor > 1:
            scenarios += [{"cores": max(1, baseline.cores_per_executor // 2)}]
    if "executors" in keys:
        scenarios += [{"executors": baseline.executors * 2}]
    scenarios += [{"cpu_speed": 2.0}, {"cpu_share": 0.5}]
    scenarios += [{"network": baseline.network_bandwidth / 10}, {"disk": baseline.disk_bandwidth * 2},
                  {"disk": baseline.disk_bandwidth / 2}]
    if baseline.memory_bytes and baseline.data_bytes:
        scenarios += [{"memory": baseline.memory_bytes * 2}, {"memory": baseline.memory_bytes / 2}]
    for model in models if models is not None else installed_models():
        propose = getattr(model, "scenarios", None)
        if callable(propose):
            try:
                scenarios += list(propose(profile, baseline))
            except Exception as exc:  # a plug-in's failure costs its scenarios, not the report
                log.warning("predictor %s could not propose scenarios: %s", model.name, exc)
    return [Changes(s) for s in scenarios]
