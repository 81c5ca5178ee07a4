"""What-if prediction (paper §5): new task times from the resource models, a replay of the tasks on
the new slots, then a re-traversal of the DAG for the job's new runtime.

Every prediction carries a low/high band (a seeded Monte Carlo over task durations, resource vectors
and the warm-up factor) and, for honesty, two baselines computed in the same call: linear scaling by
the changed resource, and task replay without resource vectors (what Sparklens does).
"""

from __future__ import annotations

import logging
import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata

import numpy as np

from crystalperf.core import trace as tr
from crystalperf.core.bottleneck import expand, level_critical_path
from crystalperf.core.predict.base import (
    DEFAULT_GPU_SPEEDUP,
    KNOWN_KEYS,
    ROUND_TRIPS_NOTE,
    STATABLE_KEYS,
    Baseline,
    Changes,
    OpContext,
    ResourceModel,
    TaskParts,
    runs_its_children,
    scaling_keys,
    unit_profiles,
)
from crystalperf.core.predict.compute import ComputeModel, SharedHostModel, estimate_warmup, replay
from crystalperf.core.predict.io import IOModel
from crystalperf.core.predict.memory import MemoryModel
from crystalperf.core.predict.streaming import Link, Pace, StreamingCpu
from crystalperf.core.profile import ExecutionProfile, LevelGraph, OperationProfile
from crystalperf.core.resources import ResourceVector
from crystalperf.core.trace import ATTRIBUTE_WAITS_ON, METRIC_RUN_TIME
from crystalperf.core.vectors import task_count

__all__ = ["Baseline", "Changes", "KNOWN_KEYS", "Prediction", "Predictor", "default_scenarios", "replay"]

log = logging.getLogger(__name__)

MONTE_CARLO_RUNS = 16
# Replayed tasks (plus operations) up to which every band gets MONTE_CARLO_RUNS draws; beyond, fewer, within
# MONTE_CARLO_BUDGET replayed tasks per band, each draw redrawing at most MONTE_CARLO_OPERATIONS operations.
MONTE_CARLO_FULL_WORK = 5000
MONTE_CARLO_BUDGET = 40_000
MONTE_CARLO_OPERATIONS = 2000
MONTE_CARLO_MIN_RUNS = 2
# An operation of more tasks is simulated through this many of them, evenly spaced in start order.
REPRESENTATIVE_TASKS = 512
# Task durations of Monte Carlo draws kept for the next scenario's same draw (about 32 bytes each).
MONTE_CARLO_KEPT_DURATIONS = 2_000_000
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
    for name, cls in (("compute", ComputeModel), ("memory", MemoryModel), ("io", IOModel),
                      ("contention", SharedHostModel)):
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
        return shown


@dataclass
class _Draw:
    """One Monte Carlo draw of the uncertain inputs (None: use the measured values)."""

    rng: random.Random | None = None
    warmup: float | None = None
    key: float | None = None  # the seed of rng: draws with the same seed draw the same
    # On a job of many operations a draw redraws this share of them (the same ones for draw ``number`` of
    # every scenario); the others keep their point estimate.
    share: float = 1.0
    number: int = 0

    @classmethod
    def seeded(cls, seed: float, warmup: float | None, share: float = 1.0, number: int = 0) -> _Draw:
        return cls(random.Random(seed), warmup, seed, share, number)

    def redraws_all(self, count: int) -> bytearray:
        """Which of the operations of index 0 .. count - 1 this draw redraws (1: redrawn), a fixed pseudo-random
        choice: index i is when (i * 0x9E3779B1 + number * 0x85EBCA6B) % 4096 < share * 4096. Computed at once, a
        mask per draw over 20,000 operations: only the low 12 bits of the sum decide, and unsigned 64-bit
        arithmetic wraps without changing them."""
        if self.share >= 1.0:
            return bytearray(b"\x01" * count)
        index = np.arange(count, dtype=np.uint64)
        mixed = index * np.uint64(0x9E3779B1) + np.uint64(self.number * 0x85EBCA6B % 2**64)
        return bytearray(((mixed % np.uint64(4096)) < self.share * 4096).astype(np.uint8).tobytes())


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
        self._stream_cpu = (StreamingCpu.of(profile.trace, self.runtime, self._busiest_link()) if self.streaming
                            else None)
        self._prepared: tuple[Changes, list[str]] | None = None
        # Per operation and per level, what every simulation of every scenario reads the same way.
        self._units: dict[str, _Unit] = {}
        self._plans: dict[int, _LevelPlan] = {}
        # Replays without vectors depend on the slots and the compute model's changes only.
        self._replays: dict[tuple[object, ...], float] = {}
        self._draws: dict[tuple[float | None, str], tuple[list[float], float | None, _Split]] = {}
        self._draws_size = 0
        self._drawn_columns_kept: dict[tuple[int, float | None, int], _Columns] = {}
        self._masks: dict[int, bytearray] = {}
        self._active_models: list[ResourceModel] = list(self.models)
        self._all_planned = False
        self._runs: tuple[int, float] | None = None

    def streaming_pace(self) -> Pace | None:
        """What set a pipelined job's traced pace, where the trace has the streaming model's inputs."""
        return self._stream_cpu.pace() if self._stream_cpu is not None else None

    def _busiest_link(self) -> Link | None:
        """The link that carried the most of the job's data, as the byte counters saw it, at the traced run's
        bandwidth (declared by the hook, else the one observed)."""
        seen = self.baseline.observed.get("network")
        if seen is None or self.baseline.network_idle or self.baseline.origins.get("network") == "assumed":
            return None
        return Link(seen.bytes, self.baseline.network_bandwidth, seen.active_s,
                    declared=self.baseline.origins.get("network") == "declared")

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
    def _split(self, prof: OperationProfile, vec: ResourceVector, without_waiting: bool = False) -> _Split:
        """The fractions of a task's time each part of TaskParts gets, from the operation's vector."""
        # Waiting is fixed: no change of this operation's own resources shortens the time it waited for input.
        # So is a wait given to the work it waited on (a step's wait for its prefetching input pipeline): how
        # that wait changes is the framework model's business (it sees the work), not the step's resources'.
        through = prof.vector.through
        if through is None:
            cpu, disk, network = max(0.0, vec.cpu), max(0.0, vec.disk), max(0.0, vec.network)
        else:
            cpu, disk, network = (max(0.0, vec.cpu - through.cpu), max(0.0, vec.disk - through.disk),
                                  max(0.0, vec.network - through.network))
        fixed = vec.waiting + (vec.cpu - cpu) + (vec.disk - disk) + (vec.network - network)
        # a wait the hook says was for the operation's input (a source): shortened by a faster device, if at all
        input_wait = vec.waiting if prof.op.attributes.get(ATTRIBUTE_WAITS_ON) and prof.vector.through is None else 0.0
        if without_waiting:
            fixed, input_wait = fixed - vec.waiting, 0.0
        return cpu, disk, network, fixed - input_wait, input_wait

    def _parts(self, prof: OperationProfile, durations: Sequence[float], with_vectors: bool,
               draw: _Draw, without_waiting: bool = False) -> list[TaskParts]:
        if not with_vectors:
            return [TaskParts(d, 0.0, 0.0) for d in durations]
        vec = prof.vector.vector
        if draw.rng is not None:
            vec = _perturb(vec, prof.vector.samples, prof.vector.source, draw.rng)
        return _make_parts(durations, self._split(prof, vec, without_waiting))

    def _unit(self, prof: OperationProfile) -> _Unit:
        unit = self._units.get(prof.path)
        if unit is None:
            unit = self._units[prof.path] = _Unit.of(prof, self.baseline.slots)
            unit.index = len(self._units)
        return unit

    def _drawn(self, prof: OperationProfile, unit: _Unit, draw: _Draw) -> tuple[list[float], float | None, _Split]:
        """One Monte Carlo draw of an operation's task durations and split. Every scenario's draw number k
        starts from the same seed and draws the same way (common random numbers, which makes the scenarios'
        bands comparable): it is drawn once and kept, within a bound on the memory that takes."""
        assert draw.rng is not None
        key = (draw.key, prof.path)
        kept = self._draws.get(key)
        if kept is not None:
            return kept
        durations, before = unit.durations, unit.before
        if len(durations) >= 3:
            durations = unit.resample(draw.rng)
            before = None
        vec = _perturb(prof.vector.vector, prof.vector.samples, prof.vector.source, draw.rng)
        result = (durations, before, self._split(prof, vec))
        if draw.key is not None and self._draws_size + len(durations) <= MONTE_CARLO_KEPT_DURATIONS:
            self._draws[key] = result
            self._draws_size += len(durations)
        return result

    def _point_split(self, unit: _Unit) -> _Split:
        if unit.split is None:
            unit.split = self._split(unit.ctx.profile, unit.ctx.profile.vector.vector)
            unit.whole_split = abs(sum(unit.split) - 1.0) <= 1e-12
        return unit.split

    def _leaf_duration(self, unit: _Unit, sim: _Sim) -> float:
        draw = sim.draw
        # no model changes a task: the traced durations as they are (a split of them adds up to them)
        unmodelled = (not sim.models and draw.rng is None
                      and (not sim.with_vectors or (self._point_split(unit) and unit.whole_split)))
        if (unmodelled and unit.tasks and not sim.parallelism
                and (unit.count <= sim.one_wave or sim.same_slots)):
            # and none moves between waves: the operation keeps its traced span
            return unit.duration
        if draw.rng is None:
            durations, before = unit.durations, unit.before
            if not sim.with_vectors:
                split = _ALL_CPU
            else:
                split = self._point_split(unit)
        elif sim.with_vectors:
            durations, before, split = self._drawn(unit.ctx.profile, unit, draw)
        else:
            durations, before = unit.durations, unit.before
            if len(durations) >= 3:
                durations, before = unit.resample(draw.rng), None
            split = _ALL_CPU
        cpu, disk, network, fixed, input_wait = split
        if sim.models:
            ctx = unit.ctx
            parts = [TaskParts(d * cpu, d * disk, d * network, d * fixed, d * input_wait) for d in durations]
            for model in sim.models:
                parts = model.adjust(ctx, parts)
            new = [p.cpu + p.disk + p.network + p.fixed + p.input_wait for p in parts]
        else:
            # No model to hand the parts to: the same sums, without an object per task (most of a replay's time
            # on a job of many small operations).
            new = [d * cpu + d * disk + d * network + d * fixed + d * input_wait for d in durations]
        if not unit.tasks:
            return max(0.0, unit.duration + sum(new) - sum(durations))
        if sim.parallelism:
            op = unit.ctx.profile.op
            if op.parallelism and unit.count == op.parallelism:
                # Long-running subtasks (streaming): the operator's work is spread over the new subtasks.
                busy_old = max(durations)
                busy_new = sum(new) * unit.weight / sim.slots
                return max(0.0, op.duration * busy_new / busy_old) if busy_old > 0 else op.duration
        if unit.count <= sim.one_wave:
            # One wave before and after, no task moved into or out of it: the longest task.
            before, after = max(durations), max(new)
        else:
            if sim.same_slots and _same(new, durations):
                return unit.duration  # nothing changed for this operation
            if before is None:
                before = replay(durations, self.baseline.slots, weight=unit.weight)
            kept = unit.replays.get((sim.slots, sim.warmup)) if unmodelled and unit.replays is not None else None
            if kept is not None:
                after = kept
            else:
                after = replay(new, sim.slots, original_slots=self.baseline.slots, warmup=sim.warmup,
                               weight=unit.weight)
                if unmodelled:
                    # the traced durations on these slots: the same in every scenario no model changes
                    if unit.replays is None:
                        unit.replays = {}
                    unit.replays[(sim.slots, sim.warmup)] = after
        duration = unit.duration + after - before
        if after < before and unit.before is not None and unit.before > unit.duration > 0:
            # The traced tasks replayed take longer than the operation did (it had more slots than the trace
            # says, or the trace contradicts itself): there is no sequential part to keep, and taking the
            # difference off would shrink the operation more than in proportion (to nothing, on a trace of
            # 2**40 tasks in a few seconds). In proportion, at most.
            duration = max(duration, unit.duration * after / before)
        return max(0.0, duration)

    def _plan(self, level: LevelGraph) -> _LevelPlan:
        plan = self._plans.get(id(level))
        if plan is None:
            plan = self._plans[id(level)] = _LevelPlan.of(level, self._unit)
        return plan

    def _level_duration(self, level: LevelGraph, sim: _Sim) -> float:
        plan = self._plan(level)
        return plan.end(self._row_durations(plan, sim))

    def _row_durations(self, plan: _LevelPlan, sim: _Sim) -> list[float]:
        """Each step's new duration: its children re-traversed, or its tasks replayed. They do not depend on
        when the step starts, so they are worked out before the level's start times are."""
        redrawn = sim.redrawn
        leaf = self._leaf_duration
        if redrawn is not None and plan.points is not None:
            # A draw that redraws a share of the operations: the others keep the point estimate's durations.
            durations = list(plan.points)
            rows = plan.redrawn_rows(sim.draw.number, redrawn)
            drawn = self._drawn_columns(plan, rows, sim)
            for i in rows:
                found = drawn[i] if drawn is not None else None
                durations[i] = found if found is not None else leaf(plan.rows[i][3], sim)
            for i in plan.child_rows:
                durations[i] = max(self._level_duration(plan.rows[i][2], sim), 0.0)  # type: ignore[arg-type]
            return durations
        known = None
        if redrawn is None and sim.draw.rng is None:
            known = self._columns_durations(plan, sim)
        elif redrawn is None:  # a draw that redraws every operation
            known = self._drawn_columns(plan, [i for i, row in enumerate(plan.rows) if row[2] is None], sim)
        durations = []
        append = durations.append
        for i, (_preds, _offset, children, unit) in enumerate(plan.rows):
            if children is not None:
                append(max(self._level_duration(children, sim), 0.0))
            elif redrawn is not None and unit.point is not None and not redrawn[unit.index]:
                append(unit.point)
            else:
                found = known[i] if known is not None else None
                duration = found if found is not None else leaf(unit, sim)
                if sim.record_point:
                    unit.point = duration
                append(duration)
        if sim.record_point:
            plan.points = durations
        return durations

    def _columns_durations(self, plan: _LevelPlan, sim: _Sim) -> list[float | None] | None:
        """The new durations of a level's one-wave operations, all at once, where the scenario's models can adjust
        task parts as columns (None where an operation is left to ``_leaf_duration``): on a level of thousands
        of small operations a model called per operation is most of a point estimate's time."""
        if not self._columns_apply(plan, sim):
            return None
        if plan.columns is None:
            plan.columns = _Columns.of(plan)
        columns = plan.columns
        if not columns.units:
            return None
        if sim.with_vectors and columns.splits is None:
            columns.splits = np.array([self._point_split(unit) for unit in columns.units], dtype=np.float64)
            columns.whole = np.array([unit.whole_split for unit in columns.units], dtype=bool)
        found: list[float | None] | None
        if not sim.models:
            # as _leaf_duration: no model changes a task and none moves between waves, the traced span stays
            kept = (columns.counts <= sim.one_wave) | sim.same_slots
            if sim.with_vectors:
                kept &= columns.whole
            found = [span if keep else None for span, keep in zip(columns.span.tolist(), kept.tolist(), strict=True)]
        else:
            splits = (columns.splits[columns.task_unit] if sim.with_vectors and columns.splits is not None
                      else np.broadcast_to(np.array(_ALL_CPU), (len(columns.durations), 5)))
            found = columns.new_durations(splits, sim.models, sim.one_wave)
        return columns.by_row(found, len(plan.rows)) if found is not None else None

    def _drawn_columns(self, plan: _LevelPlan, rows: list[int], sim: _Sim) -> list[float | None] | None:
        """``_columns_durations`` for the operations a Monte Carlo draw redraws (``rows``, replayed ones): their drawn
        durations and splits, the same in every scenario, adjusted by this scenario's models."""
        if not sim.with_vectors or not self._columns_apply(plan, sim):
            return None
        key = (id(plan), sim.draw.key, len(rows))
        columns = self._drawn_columns_kept.get(key)
        if columns is None:
            # drawn in the order the operations are (the draw's random numbers go to the same operations as one
            # by one), those without recorded tasks too: they are replayed one by one from what is drawn here
            drawn = [(i, self._drawn(plan.rows[i][3].ctx.profile, plan.rows[i][3], sim.draw)) for i in rows]
            drawn = [(i, found) for i, found in drawn if plan.rows[i][3].tasks]
            if not drawn:
                return None
            columns = _Columns.of(plan, [i for i, _found in drawn], [found[0] for _i, found in drawn])
            columns.splits = np.array([found[2] for _i, found in drawn], dtype=np.float64)
            # the next scenario's same draw reads the same columns, where every drawn value was kept for it
            if sim.draw.key is not None and all((sim.draw.key, plan.rows[i][3].ctx.profile.path) in self._draws
                                                for i, _found in drawn):
                self._drawn_columns_kept[key] = columns
        assert columns.splits is not None
        found = columns.new_durations(columns.splits[columns.task_unit], sim.models, sim.one_wave)
        return columns.by_row(found, len(plan.rows)) if found is not None else None

    @staticmethod
    def _columns_apply(plan: _LevelPlan, sim: _Sim) -> bool:
        return (not sim.parallelism and len(plan.rows) >= COLUMNS_MIN_STEPS
                and all(callable(getattr(m, "adjust_columns", None)) for m in sim.models))

    def _plan_all(self, level: LevelGraph) -> None:
        for step in self._plan(level).steps:
            if step.children is not None:
                self._plan_all(step.children)
        if level is self.profile.top:
            self._all_planned = True

    def _redrawn(self, draw: _Draw) -> bytearray | None:
        """Which operations (by unit index) a draw that redraws only a share of them redraws."""
        if draw.share >= 1.0:
            return None
        mask = self._masks.get(draw.number)
        if mask is None:
            mask = self._masks[draw.number] = draw.redraws_all(len(self._units) + 1)
        return mask

    def prepare(self, changes: Changes) -> list[str]:
        """Let every model read the scenario once; returns their notes."""
        if self._prepared is not None and self._prepared[0] is changes:
            return self._prepared[1]
        notes: list[str] = []
        baseline = self.baseline.stated(changes)
        for model in self.models:
            notes.extend(model.prepare(self.profile, baseline, changes))
        # A model that says it changes nothing in this scenario is not asked about every task.
        self._active_models = [m for m in self.models if not getattr(m, "unchanged", False)]
        self._prepared = (changes, notes)
        return notes

    def _busy_after(self, prof: OperationProfile, changes: Changes, slots: int, with_vectors: bool,
                    draw: _Draw, without_waiting: bool = False) -> float:
        """Busy time of a pipelined operation's busiest task under the changes; work is spread over
        the new number of subtasks when the parallelism changes."""
        unit = self._unit(prof)
        tasks = unit.tasks
        busy = [t.metrics.get(METRIC_RUN_TIME, t.duration) for t in tasks] if tasks else [prof.busy_time]
        if draw.rng is not None and len(busy) >= 3:
            busy = [draw.rng.choice(busy) for _ in busy]
        parts = self._parts(prof, busy, with_vectors, draw, without_waiting)
        for model in self._active_models:
            if with_vectors or model.name == "compute":
                parts = model.adjust(unit.ctx, parts)
        new = [p.total for p in parts]
        if tasks and "parallelism" in changes:
            return sum(new) * unit.weight / int(changes.number("parallelism", unit.count))
        return max(new)

    def simulate(self, changes: Changes, *, with_vectors: bool = True, draw: _Draw | None = None,
                 record_point: bool = False) -> float:
        """The job's runtime under the changes. ``record_point`` keeps every operation's duration, which the
        draws of a band that redraw only some of the operations give the others."""
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

        # Without vectors all time counts as CPU, so only the compute model has anything to scale; with the
        # measured vectors (not a draw of them), a model may know it scales nothing.
        models = [m for m in self._active_models if (with_vectors or m.name == "compute")
                  and not (draw.rng is None and getattr(m, "point_unchanged", False))]
        warmup = draw.warmup if draw.warmup is not None else self.warmup
        if draw.share < 1.0 and not self._all_planned:
            self._plan_all(self.profile.top)  # every unit exists (and has its index) before a draw picks some
        sim = _Sim(draw, with_vectors, models, slots, slots == self.baseline.slots, "parallelism" in changes, warmup,
                   record_point, self._redrawn(draw), min(slots, self.baseline.slots))

        return self._level_duration(self.profile.top, sim)

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
        collector = stream.collector_note(changes) if stream is not None else None
        if collector:
            model_notes.append(collector)
        notes += baseline.notes_for(changes) + model_notes
        if self.baseline.slots != self.new_slots(changes):
            notes.append(f"task slots {self.baseline.slots} -> {self.new_slots(changes)}"
                         + (f" (first-wave warm-up factor {self.warmup:.2f})" if self.warmup != 1.0 else ""))
        point = self.simulate(changes, record_point=True)
        if stream is not None:
            notes.append(stream.note())
        estimate = Estimate(point)
        if band:
            rng = random.Random(seed)
            runs, share = self._monte_carlo_runs()
            draws = []
            for number in range(runs):
                warm = rng.choice(self.warmup_factors) if self.warmup_factors else None
                drawn = self.simulate(changes, draw=_Draw.seeded(rng.random(), warm, share, number))
                # Redrawing a share of the operations shows that share of the variance: scaled back to all.
                draws.append(point + (drawn - point) / math.sqrt(share))
            # A bandwidth the trace did not give is a guess: the band spans what the traced run could have had.
            for key in STATABLE_KEYS:
                if key in changes and baseline.origins.get(key) == "assumed":
                    for factor in ASSUMED_BANDWIDTH_RANGE:
                        guess = replace(changes, baselines={**changes.baselines, key: baseline.bandwidth(key) * factor})
                        draws.append(self.simulate(guess))
                    notes.append(f"the band spans a traced {key} bandwidth {1 / ASSUMED_BANDWIDTH_RANGE[0]:g}x "
                                 f"lower to {ASSUMED_BANDWIDTH_RANGE[1]:g}x higher than assumed")
            monte_carlo, guesses = draws[:runs], draws[runs:]
            estimate.low_s = min([point, _quantile(monte_carlo, BAND_QUANTILES[0]), *guesses])
            estimate.high_s = max([point, _quantile(monte_carlo, BAND_QUANTILES[1]), *guesses])
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
            if self.simulate(changes, draw=_Draw(warmup=1.0)) <= self.runtime * (1 + SLOWER_TOLERANCE):
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
            estimate.low_s = min(estimate.low_s, self.runtime)
            estimate.high_s = self.runtime


@dataclass
class _Sim:
    """What one simulation of one scenario reads for every operation."""

    draw: _Draw
    with_vectors: bool
    models: list[ResourceModel]  # the models that change something, in order
    slots: int
    same_slots: bool
    parallelism: bool  # the scenario sets the parallelism
    warmup: float
    record_point: bool = False
    redrawn: bytearray | None = None  # by unit index, when the draw redraws only some operations
    one_wave: int = 0  # an operation of at most this many tasks ran, and runs, in one wave (min of the slots)


def _same(new: Sequence[float], old: Sequence[float]) -> bool:
    """Equal task durations but for rounding (a split summed back)."""
    for a, b in zip(new, old, strict=True):
        if abs(a - b) > 1e-12 * b:
            return False
    return True


# A task's time split as TaskParts splits it: cpu, disk, network, fixed, input wait (fractions).
_Split = tuple[float, float, float, float, float]
_ALL_CPU: _Split = (1.0, 0.0, 0.0, 0.0, 0.0)  # replayed without vectors, all time counts as CPU


def _make_parts(durations: Sequence[float], split: _Split) -> list[TaskParts]:
    cpu, disk, network, fixed, input_wait = split
    return [TaskParts(d * cpu, d * disk, d * network, d * fixed, d * input_wait) for d in durations]


def _start(task: tr.Task) -> float:
    return task.start


@dataclass(slots=True)
class _Unit:
    """An operation's tasks as every simulation reads them: in start order, thinned to at most
    REPRESENTATIVE_TASKS evenly spaced ones on a large operation, each standing for ``weight`` of its
    ``count`` tasks (a hook's sample of the tasks is thinned no further)."""

    tasks: list[tr.Task]
    durations: list[float]
    count: int
    weight: float
    ctx: OpContext
    before: float | None = None  # the traced tasks replayed on the traced slots
    mean: float = 0.0
    split: _Split | None = None  # of the operation's vector, once computed
    whole_split: bool = False  # the split's parts add up to the whole task (they do but for rounding)
    replays: dict[tuple[int, float], float] | None = None  # the traced tasks replayed on (slots, warm-up)
    index: int = 0  # order of creation: which draws redraw it
    point: float | None = None  # its duration in the point estimate of the scenario being predicted
    duration: float = 0.0  # the operation's traced span

    @classmethod
    def of(cls, prof: OperationProfile, slots: int) -> _Unit:
        op = prof.op
        ordered = sorted(op.tasks, key=_start) if len(op.tasks) > 1 else list(op.tasks)
        count = task_count(op)
        if len(ordered) > REPRESENTATIVE_TASKS:
            step = len(ordered) / REPRESENTATIVE_TASKS
            ordered = [ordered[int((i + 0.5) * step)] for i in range(REPRESENTATIVE_TASKS)]
        weight = count / len(ordered) if ordered else 1.0
        durations = [t.duration for t in ordered] if ordered else [op.duration]
        unit = cls(ordered, durations, count, weight, OpContext(prof, ordered, count),
                   mean=sum(durations) / len(durations), duration=op.duration)
        if ordered:
            unit.before = replay(durations, slots, weight=weight)
        return unit

    def resample(self, rng: random.Random) -> list[float]:
        """A bootstrap draw of the durations. A recorded task standing for ``weight`` tasks stands for their
        mean, which varies ``sqrt(weight)`` times less than one task does."""
        if self.weight == 1.0:
            return [rng.choice(self.durations) for _ in self.durations]
        shrink = 1.0 / math.sqrt(self.weight)
        return [max(0.0, self.mean + (rng.choice(self.durations) - self.mean) * shrink) for _ in self.durations]


@dataclass(slots=True)
class _Step:
    prof: OperationProfile
    preds: tuple[int, ...]  # indices of the predecessors' steps
    # with predecessors: the traced gap after the last of them ended; without: the start within the level
    offset: float
    children: LevelGraph | None  # re-traversed instead of replayed
    unit: _Unit | None  # replayed (when there are no children to re-traverse)


# A level of at least this many steps has the tasks of its one-wave operations adjusted as columns by the models
# that can (``adjust_columns``), instead of one operation at a time.
COLUMNS_MIN_STEPS = 256


@dataclass
class _Columns:
    """A level's operations with recorded tasks, their tasks laid end to end: what the models adjust as columns."""

    rows: list[int]  # the plan's rows of these operations
    units: list[_Unit]
    contexts: list[OpContext]
    durations: np.ndarray  # every task's traced duration, operation after operation
    task_unit: np.ndarray  # each task's operation (position in units)
    starts: np.ndarray  # where each operation's tasks start
    counts: np.ndarray  # the tasks each operation ran
    span: np.ndarray  # each operation's traced span
    longest: np.ndarray  # its longest recorded task
    replayed: np.ndarray  # its recorded tasks replayed on the traced slots (unit.before)
    splits: np.ndarray | None = None  # each operation's split of the measured vector, once needed
    whole: np.ndarray | None = None  # whether those splits add up to the whole task (_Unit.whole_split)

    @classmethod
    def of(cls, plan: _LevelPlan, rows: Sequence[int] | None = None,
           durations: Sequence[Sequence[float]] | None = None) -> _Columns:
        """The plan's operations with recorded tasks (of ``rows``, else all), with their traced durations (else
        ``durations``, one list per row: a Monte Carlo draw of them)."""
        if rows is None:
            rows = [i for i, (_p, _o, children, unit) in enumerate(plan.rows) if children is None and unit.tasks]
        units = [plan.rows[i][3] for i in rows]
        if durations is None:
            durations = [unit.durations for unit in units]
        sizes = [len(d) for d in durations]
        starts = np.zeros(len(units), dtype=np.int64)
        if units:
            starts[1:] = np.cumsum(sizes)[:-1]
        return cls(list(rows), units, [unit.ctx for unit in units],
                   np.array([d for row in durations for d in row], dtype=np.float64),
                   np.repeat(np.arange(len(units), dtype=np.int64), sizes), starts,
                   np.array([unit.count for unit in units], dtype=np.int64),
                   np.array([unit.duration for unit in units], dtype=np.float64),
                   np.array([max(row) for row in durations], dtype=np.float64),
                   np.array([unit.before if unit.before is not None else -math.inf for unit in units],
                            dtype=np.float64))

    def new_durations(self, splits: np.ndarray, models: Sequence[ResourceModel], one_wave: int) -> list[float | None] | None:
        """Each operation's new span when its tasks, split by ``splits`` (per task), are adjusted by the models as
        columns and it ran, and runs, in one wave (None for the others, and when a model cannot)."""
        parts = self.durations[:, None] * splits
        for model in models:
            if not model.adjust_columns(self.contexts, parts, self.task_unit):  # type: ignore[attr-defined]
                return None
        new = parts[:, 0] + parts[:, 1] + parts[:, 2] + parts[:, 3] + parts[:, 4]
        after = np.maximum.reduceat(new, self.starts)
        before = self.longest
        duration = self.span + after - before
        # as _leaf_duration: tasks replayed longer than their operation's span shrink it in proportion at most
        shrunk = (after < before) & (self.replayed > self.span) & (self.span > 0)
        if shrunk.any():
            duration = np.where(shrunk, np.maximum(duration, np.divide(
                self.span * after, before, out=np.zeros_like(after), where=before > 0)), duration)
        duration = np.maximum(duration, 0.0)
        return [value if fits else None
                for value, fits in zip(duration.tolist(), (self.counts <= one_wave).tolist(), strict=True)]

    def by_row(self, found: list[float | None], rows: int) -> list[float | None]:
        """Values of these operations (in their order) at their rows of a level of ``rows`` steps; None elsewhere."""
        known: list[float | None] = [None] * rows
        for row, value in zip(self.rows, found, strict=True):
            known[row] = value
        return known


# A level of at least this many steps, each after at most one other, has its start times summed along its
# tree by numpy (a prefix sum over an Euler tour) instead of one step at a time; a smaller one gives the exact
# sequential sums.
VECTOR_PROPAGATION_STEPS = 512


@dataclass
class _LevelPlan:
    """A level in topological order with what its re-traversal reads, worked out once per predictor."""

    steps: list[_Step]
    tail: float  # traced time after the level's last operation ended
    # per step: predecessors, offset, children, unit (what a simulation reads, unpacked fast)
    rows: list[tuple[tuple[int, ...], float, LevelGraph | None, _Unit]] = field(default_factory=list)
    child_rows: list[int] = field(default_factory=list)  # the steps re-traversed (with children)
    # every step's duration in the point estimate of the scenario being predicted (set by that simulation)
    points: list[float] | None = None
    # each step's one predecessor (-1: none) and offsets, when no step has more than one: a forest
    parents: np.ndarray | None = None
    offsets: np.ndarray | None = None
    _redrawn: dict[int, list[int]] = field(default_factory=dict)
    _tour: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # of the forest, once needed
    columns: _Columns | None = None  # once a scenario's models adjust the level's tasks as columns

    @classmethod
    def of(cls, level: LevelGraph, unit: Callable[[OperationProfile], _Unit]) -> _LevelPlan:
        order = level.topological()
        position = {node: i for i, node in enumerate(order)}
        steps: list[_Step] = []
        last_end = level.start
        for node in order:
            prof = level.nodes[node]
            op = prof.op
            preds = tuple(position[p] for p in level.graph.predecessors(node))
            offset = (op.start - max(level.nodes[order[p]].op.end for p in preds)) if preds else op.start - level.start
            children = prof.children if prof.children and not runs_its_children(prof) else None
            steps.append(_Step(prof, preds, offset, children, unit(prof) if children is None else None))
            last_end = max(last_end, op.end)
        rows = [(step.preds, step.offset, step.children, step.unit) for step in steps]
        plan = cls(steps, max(0.0, level.end - last_end), rows)  # type: ignore[arg-type]
        plan.child_rows = [i for i, step in enumerate(steps) if step.children is not None]
        if len(steps) >= VECTOR_PROPAGATION_STEPS and all(len(step.preds) <= 1 for step in steps):
            plan.parents = np.array([step.preds[0] if step.preds else -1 for step in steps], dtype=np.int64)
            plan.offsets = np.array([step.offset for step in steps], dtype=np.float64)
        return plan

    def redrawn_rows(self, number: int, redrawn: bytearray) -> list[int]:
        """The steps replayed (not re-traversed) that draw ``number`` redraws."""
        rows = self._redrawn.get(number)
        if rows is None:
            rows = self._redrawn[number] = [i for i, (_p, _o, children, unit) in enumerate(self.rows)
                                            if children is None and redrawn[unit.index]]
        return rows

    def end(self, durations: list[float]) -> float:
        """When the level ends with these step durations: each step keeps its traced offset to the last of its
        predecessors to finish (negative when they overlapped, as pipelined streaming operators do), never
        starting before a predecessor started nor before the level."""
        if self.parents is not None:
            return self._forest_end(durations)
        new_start = [0.0] * len(durations)
        new_end = [0.0] * len(durations)
        for i, (preds, offset, _children, _unit) in enumerate(self.rows):
            if len(preds) == 1:
                p = preds[0]
                start = new_end[p] + offset
                if start < new_start[p]:
                    start = new_start[p]
            elif preds:
                start = max(new_end[p] for p in preds) + offset
                start = max(start, max(new_start[p] for p in preds))
            else:
                start = offset
            if start < 0.0:
                start = 0.0
            new_start[i] = start
            new_end[i] = start + durations[i]
        return max(new_end, default=0.0) + self.tail

    def _forest_end(self, durations: list[float]) -> float:
        """``end`` when every step has at most one predecessor p: it starts max(end_p + offset, start_p) =
        start_p + max(duration_p + offset, 0), so a start is a sum along the step's path from its root: a prefix
        sum over a walk of the forest that adds a step's term on entering it and takes it off on leaving."""
        assert self.parents is not None and self.offsets is not None
        if self._tour is None:
            self._tour = _euler_tour(self.parents)
        tour, signs, entries = self._tour
        duration = np.asarray(durations, dtype=np.float64)
        parent = self.parents
        has_parent = parent >= 0
        own = np.where(has_parent, duration[np.where(has_parent, parent, 0)] + self.offsets, self.offsets)
        np.maximum(own, 0.0, out=own)
        start = np.cumsum(own[tour] * signs)[entries]
        return float((start + duration).max()) + self.tail


def _euler_tour(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A depth-first walk of a forest given by each node's parent (-1: a root; parents before children):
    the node entered or left at each position, +1 on entering and -1 on leaving, and where each is entered."""
    n = len(parents)
    children: list[list[int]] = [[] for _ in range(n)]
    roots: list[int] = []
    for node, parent in enumerate(parents.tolist()):
        (children[parent] if parent >= 0 else roots).append(node)
    tour: list[int] = []
    signs: list[float] = []
    entries = [0] * n
    stack = [(root, False) for root in reversed(roots)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            tour.append(node)
            signs.append(-1.0)
            continue
        entries[node] = len(tour)
        tour.append(node)
        signs.append(1.0)
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(children[node]))
    return np.array(tour, dtype=np.int64), np.array(signs), np.array(entries, dtype=np.int64)


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
    scenarios: list[dict[str, float | str] | Changes] = []
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
    if baseline.origins.get("network") in ("declared", "observed") and not baseline.network_idle:
        # the job's own link, as it was declared or seen: what a faster one would buy is a question users ask
        scenarios += [{"network": baseline.network_bandwidth * 10}]
    scenarios += [{"network": baseline.network_bandwidth / 10}, {"disk": baseline.disk_bandwidth * 2},
                  {"disk": baseline.disk_bandwidth / 2}]
    if len({t.host for op in profile.trace.iter_operations() for t in op.tasks if t.host}) > 1:
        # tasks on several hosts: what moving them apart (another zone, another site) would cost
        scenarios += [Changes.parse(["rtt=+10ms"])]
    if baseline.memory_bytes and baseline.data_bytes:
        scenarios += [{"memory": baseline.memory_bytes * 2}, {"memory": baseline.memory_bytes / 2}]
    for model in models if models is not None else installed_models():
        propose = getattr(model, "scenarios", None)
        if callable(propose):
            try:
                scenarios += list(propose(profile, baseline))
            except Exception as exc:  # a plug-in's failure costs its scenarios, not the report
                log.warning("predictor %s could not propose scenarios: %s", model.name, exc)
    return [s if isinstance(s, Changes) else Changes(s) for s in scenarios]
