"""The replay behind every prediction: each operation's tasks as the simulations read them (``Unit``), each
level of the DAG in topological order with what its re-traversal reads (``LevelPlan``), and the columns many
small operations are adjusted in at once (``Columns``)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from crystalperf.core import trace as tr
from crystalperf.core.predict.band import Draw
from crystalperf.core.predict.base import OpContext, ResourceModel, TaskParts
from crystalperf.core.predict.ceilings import Floors
from crystalperf.core.profile.dag import LevelGraph, OperationProfile, runs_its_children
from crystalperf.core.profile.outside import waited_batches
from crystalperf.core.schedule import replay
from crystalperf.core.trace.totals import task_count

# An operation of more tasks is simulated through this many of them, evenly spaced in start order.
REPRESENTATIVE_TASKS = 512


@dataclass
class Sim:
    """What one simulation of one scenario reads for every operation."""

    draw: Draw
    with_vectors: bool
    models: list[ResourceModel]  # the models that change something, in order
    slots: int
    same_slots: bool
    parallelism: bool  # the scenario sets the parallelism
    warmup: float
    record_point: bool = False
    redrawn: bytearray | None = None  # by unit index, when the draw redraws only some operations
    one_wave: int = 0  # an operation of at most this many tasks ran, and runs, in one wave (min of the slots)
    # the scenario's floors by unit operation path (``crystalperf.core.predict.ceilings``), and where the point
    # estimate records what each ceiling added
    floors: Floors | None = None


def same_durations(new: Sequence[float], old: Sequence[float]) -> bool:
    """Equal task durations but for rounding (a split summed back)."""
    for a, b in zip(new, old, strict=True):
        if abs(a - b) > 1e-12 * b:
            return False
    return True


# A task's time split as TaskParts splits it: cpu, disk, network, fixed, input wait (fractions).
Split = tuple[float, float, float, float, float]
ALL_CPU: Split = (1.0, 0.0, 0.0, 0.0, 0.0)  # replayed without vectors, all time counts as CPU


def make_parts(durations: Sequence[float], split: Split) -> list[TaskParts]:
    cpu, disk, network, fixed, input_wait = split
    return [TaskParts(d * cpu, d * disk, d * network, d * fixed, d * input_wait) for d in durations]


def _start(task: tr.Task) -> float:
    return task.start


@dataclass(slots=True)
class Unit:
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
    split: Split | None = None  # of the operation's vector, once computed
    whole_split: bool = False  # the split's parts add up to the whole task (they do but for rounding)
    replays: dict[tuple[int, float], float] | None = None  # the traced tasks replayed on (slots, warm-up)
    index: int = 0  # order of creation: which draws redraw it
    point: float | None = None  # its duration in the point estimate of the scenario being predicted
    duration: float = 0.0  # the operation's traced span

    @classmethod
    def of(cls, prof: OperationProfile, slots: int) -> Unit:
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
class Step:
    prof: OperationProfile
    preds: tuple[int, ...]  # indices of the predecessors' steps
    # with predecessors: the traced gap after the last of them ended; without: the start within the level
    offset: float
    children: LevelGraph | None  # re-traversed instead of replayed
    unit: Unit | None  # replayed (when there are no children to re-traverse)


# A level of at least this many steps has the tasks of its one-wave operations adjusted as columns by the models
# that can (``adjust_columns``), instead of one operation at a time.
COLUMNS_MIN_STEPS = 256


@dataclass
class Columns:
    """A level's operations with recorded tasks, their tasks laid end to end: what the models adjust as columns."""

    rows: list[int]  # the plan's rows of these operations
    units: list[Unit]
    contexts: list[OpContext]
    durations: np.ndarray  # every task's traced duration, operation after operation
    task_unit: np.ndarray  # each task's operation (position in units)
    starts: np.ndarray  # where each operation's tasks start
    counts: np.ndarray  # the tasks each operation ran
    span: np.ndarray  # each operation's traced span
    longest: np.ndarray  # its longest recorded task
    replayed: np.ndarray  # its recorded tasks replayed on the traced slots (unit.before)
    splits: np.ndarray | None = None  # each operation's split of the measured vector, once needed
    whole: np.ndarray | None = None  # whether those splits add up to the whole task (Unit.whole_split)

    @classmethod
    def of(cls, plan: LevelPlan, rows: Sequence[int] | None = None,
           durations: Sequence[Sequence[float]] | None = None) -> Columns:
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
class LevelPlan:
    """A level in topological order with what its re-traversal reads, worked out once per predictor."""

    steps: list[Step]
    tail: float  # traced time after the level's last operation ended
    # per step: predecessors, offset, children, unit (what a simulation reads, unpacked fast)
    rows: list[tuple[tuple[int, ...], float, LevelGraph | None, Unit]] = field(default_factory=list)
    child_rows: list[int] = field(default_factory=list)  # the steps re-traversed (with children)
    # every step's duration in the point estimate of the scenario being predicted (set by that simulation)
    points: list[float] | None = None
    # each step's one predecessor (-1: none) and offsets, when no step has more than one: a forest
    parents: np.ndarray | None = None
    offsets: np.ndarray | None = None
    # per step, where one waited for its trigger: its traced start within the level, before which it never starts
    not_before: list[float | None] | None = None
    _redrawn: dict[int, list[int]] = field(default_factory=dict)
    _tour: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # of the forest, once needed
    columns: Columns | None = None  # once a scenario's models adjust the level's tasks as columns

    @classmethod
    def of(cls, level: LevelGraph, unit: Callable[[OperationProfile], Unit]) -> LevelPlan:
        order = level.topological()
        position = {node: i for i, node in enumerate(order)}
        steps: list[Step] = []
        last_end = level.start
        for node in order:
            prof = level.nodes[node]
            op = prof.op
            preds = tuple(position[p] for p in level.graph.predecessors(node))
            offset = (op.start - max(level.nodes[order[p]].op.end for p in preds)) if preds else op.start - level.start
            children = prof.children if prof.children and not runs_its_children(prof) else None
            steps.append(Step(prof, preds, offset, children, unit(prof) if children is None else None))
            last_end = max(last_end, op.end)
        not_before = _trigger_starts(level, steps)
        rows = [(step.preds, step.offset, step.children, step.unit) for step in steps]
        plan = cls(steps, max(0.0, level.end - last_end), rows)  # type: ignore[arg-type]
        plan.child_rows = [i for i, step in enumerate(steps) if step.children is not None]
        if any(start is not None for start in not_before):
            plan.not_before = not_before
        elif len(steps) >= VECTOR_PROPAGATION_STEPS and all(len(step.preds) <= 1 for step in steps):
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
        not_before = self.not_before
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
            if not_before is not None and (trigger := not_before[i]) is not None and start < trigger:
                start = trigger
            new_start[i] = start
            new_end[i] = start + durations[i]
        return max(new_end, default=0.0) + self.tail

    def _forest_end(self, durations: list[float]) -> float:
        """``end`` when every step has at most one predecessor p: it starts max(end_p + offset, start_p) =
        start_p + max(duration_p + offset, 0), so a start is a sum along the step's path from its root: a prefix
        sum over a walk of the forest that adds a step's term on entering it and takes it off on leaving."""
        assert self.parents is not None and self.offsets is not None
        if self._tour is None:
            self._tour = euler_tour(self.parents)
        tour, signs, entries = self._tour
        duration = np.asarray(durations, dtype=np.float64)
        parent = self.parents
        has_parent = parent >= 0
        own = np.where(has_parent, duration[np.where(has_parent, parent, 0)] + self.offsets, self.offsets)
        np.maximum(own, 0.0, out=own)
        start = np.cumsum(own[tour] * signs)[entries]
        return float((start + duration).max()) + self.tail


def _trigger_starts(level: LevelGraph, steps: list[Step]) -> list[float | None]:
    """Each step that waited for its streaming query's trigger (``crystalperf.core.profile.outside``): its traced
    start within the level, before which it does not start in any scenario (a query keeps its trigger's schedule
    however fast its batches get); once the batch before runs past the trigger it starts after it by the query's own
    steps: its offset is set to those. None for every other step."""
    waited = waited_batches([step.prof.op for step in steps])
    starts: list[float | None] = [None] * len(steps)
    for i, step in enumerate(steps):
        if step.preds and (wait := waited.get(step.prof.op.id)) is not None:
            starts[i] = step.prof.op.start - level.start
            step.offset = wait.overhead_s
    return starts


def euler_tour(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
