"""The simulation behind every prediction: the traced job re-traversed level by level, each operation's tasks
split by its resource vector, adjusted by the resource models and replayed on the scenario's slots."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from crystalperf.core.predict.band import (
    MONTE_CARLO_KEPT_DURATIONS,
    Draw,
    perturb,
)
from crystalperf.core.predict.base import KNOWN_BANDWIDTH, Baseline, Changes, ResourceModel, TaskParts
from crystalperf.core.predict.ceilings import Ceilings, Floors
from crystalperf.core.predict.compute import estimate_warmup
from crystalperf.core.predict.scenarios import installed_models
from crystalperf.core.predict.simulation import (
    ALL_CPU,
    COLUMNS_MIN_STEPS,
    Columns,
    LevelPlan,
    Sim,
    Split,
    Unit,
    make_parts,
    same_durations,
)
from crystalperf.core.predict.startup import start_up
from crystalperf.core.predict.streaming import Link, StreamingCpu, long_running
from crystalperf.core.profile.bottleneck import Pace, expand, level_critical_path
from crystalperf.core.profile.dag import ExecutionProfile, LevelGraph, OperationProfile
from crystalperf.core.profile.machine import cluster_spread
from crystalperf.core.profile.outside import outside_time
from crystalperf.core.resources import ResourceVector
from crystalperf.core.schedule import replay
from crystalperf.core.trace import ATTRIBUTE_WAITS_ON, METRIC_RUN_TIME, WAITS_ON_OUTSIDE_INPUT

# Subtasks of a source that waited at least this share of their time for input from outside the job (a rate limit,
# records that arrive over time) were paced by it: a legacy Flink source is said to wait on its input from half its
# time on (flink.assemble.waits_on).
INPUT_PACED = 0.5


class Simulator:
    """The job re-traversed under resource changes: each operation's tasks adjusted by the resource models and
    replayed on the new slots, level by level (``simulate``). ``Predictor`` adds the prediction around it."""

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
        # A job of one operator chain runs its subtasks side by side from start to end as a pipeline's chains do:
        # the throughput model answers what it covers there too (its level has no edge that could overlap).
        # what a larger parallelism spreads over, where the trace says what the cluster had beside the job's workers
        self.spread = cluster_spread(profile.trace, self.baseline.slots)
        self._stream_cpu = (StreamingCpu.of(profile.trace, self.runtime, self._busiest_link(), self.spread)
                            if self.streaming or long_running(profile) else None)
        self._prepared: tuple[Changes, list[str]] | None = None
        self.ceilings = Ceilings(profile, self.baseline, self.spread)
        # the time outside every operation a disk bandwidth change scales (batch jobs: a streaming job's runtime
        # is its records' latency)
        self.outside = outside_time(profile) if not self.streaming else None
        # the start-up phase added or removed executors would stretch or shorten (one machine, its CPUs busy)
        self.start_up = start_up(profile, self.ceilings.machine) if not self.streaming else None
        self._floors: Floors | None = None
        # Per operation and per level, what every simulation of every scenario reads the same way.
        self._units: dict[str, Unit] = {}
        self._plans: dict[int, LevelPlan] = {}
        self._draws: dict[tuple[float | None, str], tuple[list[float], float | None, Split]] = {}
        self._draws_size = 0
        self._drawn_columns_kept: dict[tuple[int, float | None, int], Columns] = {}
        self._masks: dict[int, bytearray] = {}
        self._active_models: list[ResourceModel] = list(self.models)
        self._all_planned = False

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

    # -- the simulation ----------------------------------------------------------------------------
    def _split(self, prof: OperationProfile, vec: ResourceVector, without_waiting: bool = False) -> Split:
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
               draw: Draw, without_waiting: bool = False) -> list[TaskParts]:
        if not with_vectors:
            return [TaskParts(d, 0.0, 0.0) for d in durations]
        vec = prof.vector.vector
        if draw.rng is not None:
            vec = perturb(vec, prof.vector.samples, prof.vector.source, draw.rng)
        return make_parts(durations, self._split(prof, vec, without_waiting))

    def _unit(self, prof: OperationProfile) -> Unit:
        unit = self._units.get(prof.path)
        if unit is None:
            unit = self._units[prof.path] = Unit.of(prof, self.baseline.slots)
            unit.index = len(self._units)
        return unit

    def _drawn(self, prof: OperationProfile, unit: Unit, draw: Draw) -> tuple[list[float], float | None, Split]:
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
        vec = perturb(prof.vector.vector, prof.vector.samples, prof.vector.source, draw.rng)
        result = (durations, before, self._split(prof, vec))
        if draw.key is not None and self._draws_size + len(durations) <= MONTE_CARLO_KEPT_DURATIONS:
            self._draws[key] = result
            self._draws_size += len(durations)
        return result

    def _point_split(self, unit: Unit) -> Split:
        if unit.split is None:
            unit.split = self._split(unit.ctx.profile, unit.ctx.profile.vector.vector)
            unit.whole_split = abs(sum(unit.split) - 1.0) <= 1e-12
        return unit.split

    def _leaf_duration(self, unit: Unit, sim: Sim) -> float:
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
                split = ALL_CPU
            else:
                split = self._point_split(unit)
        elif sim.with_vectors:
            durations, before, split = self._drawn(unit.ctx.profile, unit, draw)
        else:
            durations, before = unit.durations, unit.before
            if len(durations) >= 3:
                durations, before = unit.resample(draw.rng), None
            split = ALL_CPU
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
        paced: tuple[list[float], list[float]] | None = None
        if input_wait >= INPUT_PACED and unit.ctx.profile.op.attributes.get(ATTRIBUTE_WAITS_ON) == WAITS_ON_OUTSIDE_INPUT:
            # Tasks that mostly waited for their input were paced by it (a rate limit, records that arrive over
            # time): each takes as long as its input took to arrive (less what a model took off its waits: a
            # faster device), unless its work no longer fits in that time.
            waits = [p.input_wait for p in parts] if sim.models else [d * input_wait for d in durations]
            pace = [d * (1.0 - input_wait) + w for d, w in zip(durations, waits, strict=True)]
            work = [n - w for n, w in zip(new, waits, strict=True)]
            paced = (pace, work)
            new = [max(p, w) for p, w in zip(pace, work, strict=True)]
        if not unit.tasks:
            return max(0.0, unit.duration + sum(new) - sum(durations))
        if sim.parallelism:
            op = unit.ctx.profile.op
            if op.parallelism and unit.count == op.parallelism:
                # Long-running subtasks (streaming): the operator's work is spread over the new subtasks; those
                # paced by their input each take their share of it at their share of its rate, as long as before.
                busy_old = max(durations)
                busy_new = (max(max(paced[0]), sum(paced[1]) * unit.weight / sim.slots) if paced is not None
                            else sum(new) * unit.weight / sim.slots)
                return max(0.0, op.duration * busy_new / busy_old) if busy_old > 0 else op.duration
        if unit.count <= sim.one_wave:
            # One wave before and after, no task moved into or out of it: the longest task.
            before, after = max(durations), max(new)
        else:
            if sim.same_slots and same_durations(new, durations):
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

    def _plan(self, level: LevelGraph) -> LevelPlan:
        plan = self._plans.get(id(level))
        if plan is None:
            plan = self._plans[id(level)] = LevelPlan.of(level, self._unit)
        return plan

    def _level_duration(self, level: LevelGraph, sim: Sim) -> float:
        plan = self._plan(level)
        return plan.end(self._row_durations(plan, sim))

    def _row_durations(self, plan: LevelPlan, sim: Sim) -> list[float]:
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
                durations[i] = self._floored(plan.rows[i][3], found if found is not None else leaf(plan.rows[i][3], sim),
                                             sim)
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
                duration = self._floored(unit, found if found is not None else leaf(unit, sim), sim)
                if sim.record_point:
                    unit.point = duration
                append(duration)
        if sim.record_point:
            plan.points = durations
        return durations

    @staticmethod
    def _floored(unit: Unit, duration: float, sim: Sim) -> float:
        """The operation's duration, no shorter than what the scenario's ceilings allow."""
        floors = sim.floors
        if floors is None:
            return duration
        floor = floors.seconds.get(unit.ctx.profile.path)
        if floor is None:
            return duration
        if floor <= duration:
            return duration
        if sim.record_point:
            floors.record(floors.kinds[unit.ctx.profile.path], floor, duration)
        return floor

    def _columns_durations(self, plan: LevelPlan, sim: Sim) -> list[float | None] | None:
        """The new durations of a level's one-wave operations, all at once, where the scenario's models can adjust
        task parts as columns (None where an operation is left to ``_leaf_duration``): on a level of thousands
        of small operations a model called per operation is most of a point estimate's time."""
        if not self._columns_apply(plan, sim):
            return None
        if plan.columns is None:
            plan.columns = Columns.of(plan)
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
                      else np.broadcast_to(np.array(ALL_CPU), (len(columns.durations), 5)))
            found = columns.new_durations(splits, sim.models, sim.one_wave)
        return columns.by_row(found, len(plan.rows)) if found is not None else None

    def _drawn_columns(self, plan: LevelPlan, rows: list[int], sim: Sim) -> list[float | None] | None:
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
            columns = Columns.of(plan, [i for i, _found in drawn], [found[0] for _i, found in drawn])
            columns.splits = np.array([found[2] for _i, found in drawn], dtype=np.float64)
            # the next scenario's same draw reads the same columns, where every drawn value was kept for it
            if sim.draw.key is not None and all((sim.draw.key, plan.rows[i][3].ctx.profile.path) in self._draws
                                                for i, _found in drawn):
                self._drawn_columns_kept[key] = columns
        assert columns.splits is not None
        found = columns.new_durations(columns.splits[columns.task_unit], sim.models, sim.one_wave)
        return columns.by_row(found, len(plan.rows)) if found is not None else None

    @staticmethod
    def _columns_apply(plan: LevelPlan, sim: Sim) -> bool:
        return (not sim.parallelism and len(plan.rows) >= COLUMNS_MIN_STEPS
                and all(callable(getattr(m, "adjust_columns", None)) for m in sim.models))

    def _plan_all(self, level: LevelGraph) -> None:
        for step in self._plan(level).steps:
            if step.children is not None:
                self._plan_all(step.children)
        if level is self.profile.top:
            self._all_planned = True

    def _redrawn(self, draw: Draw) -> bytearray | None:
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
        self._floors = (self.ceilings.floors(changes, baseline, self.new_slots(changes)) if self.ceilings.useful
                        else None)
        self._prepared = (changes, notes)
        return notes

    def _busy_after(self, prof: OperationProfile, changes: Changes, slots: int, with_vectors: bool,
                    draw: Draw, without_waiting: bool = False) -> float:
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

    def simulate(self, changes: Changes, *, with_vectors: bool = True, draw: Draw | None = None,
                 record_point: bool = False) -> float:
        """The job's runtime under the changes. ``record_point`` keeps every operation's duration, which the
        draws of a band that redraw only some of the operations give the others."""
        self.prepare(changes)
        draw = draw or Draw()
        slots = self.new_slots(changes)
        if with_vectors and self._stream_cpu is not None:
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
        if record_point and self._floors is not None:
            self._floors.reset()
        if draw.share < 1.0 and not self._all_planned:
            self._plan_all(self.profile.top)  # every unit exists (and has its index) before a draw picks some
        sim = Sim(draw, with_vectors, models, slots, slots == self.baseline.slots, "parallelism" in changes, warmup,
                  record_point, self._redrawn(draw), min(slots, self.baseline.slots),
                  # the naive replay knows no ceiling: it is the baseline that shows what they change
                  self._floors if with_vectors else None)

        runtime = self._level_duration(self.profile.top, sim)
        return runtime + self.outside_change(changes) + self.start_up_change(changes) if with_vectors else runtime

    def outside_disk_s(self) -> float | None:
        """Of the time outside every operation, what the device's reads took at the traced bandwidth; None where
        the trace does not give that bandwidth or counted no reads."""
        if self.outside is None or self.baseline.origins.get("disk") not in KNOWN_BANDWIDTH:
            return None
        return self.outside.disk_seconds(self.baseline.disk_bandwidth)

    def start_up_ends(self, changes: Changes) -> tuple[float, float]:
        """Seconds a change of the executor count adds to the start-up before the first operation, where the
        executors start on the machine the traced start-up kept busy (``crystalperf.core.predict.startup``): the
        point, then the band's other end; none for other changes."""
        if "executors" not in changes or self.start_up is None:
            return 0.0, 0.0
        return self.start_up.ends(int(changes.number("executors", self.baseline.executors)))

    def start_up_change(self, changes: Changes) -> float:
        return self.start_up_ends(changes)[0]

    def outside_change(self, changes: Changes) -> float:
        """Seconds a disk bandwidth change adds to the run's time outside every operation, which the device's
        reads then took part of (``crystalperf.core.profile.outside``): none where the trace does not give the
        traced bandwidth (an assumed one says nothing of how long the reads took)."""
        if "disk" not in changes or self.outside is None or not self.outside.read_bytes:
            return 0.0
        baseline = self.baseline.stated(changes)
        if baseline.origins.get("disk") not in KNOWN_BANDWIDTH:
            return 0.0
        outside = self.outside
        return outside.seconds_at(baseline.disk_bandwidth, changes.number("disk", baseline.disk_bandwidth)) - outside.seconds
