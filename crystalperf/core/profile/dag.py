"""The DAG execution profile (paper §4.2): every operation with its times, resource vector,
resource-time and top functions, as a networkx graph per level (hierarchical for Spark:
job -> stages -> tasks)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import networkx as nx

from crystalperf.core import trace as tr
from crystalperf.core.attribution.attribute import Attribution, attribute
from crystalperf.core.attribution.classify import ResourceClassifier
from crystalperf.core.attribution.vectors import (
    ATTRIBUTION_EVIDENCE,
    OperationVector,
    SampleResolution,
)
from crystalperf.core.trace.totals import task_seconds

T = TypeVar("T")

# Two operations are treated as one after the other when the second starts no earlier than this
# before the first ends (clocks of different hosts, rounding of event times).
SEQUENCE_TOLERANCE_S = 0.005


@dataclass
class OperationProfile:
    """One node of the execution profile."""

    op: tr.Operation
    path: str  # unique across levels: ancestor ids joined with '/'
    parent_path: str | None
    vector: OperationVector
    children: LevelGraph | None = None
    pipelined: bool = False  # runs at the same time as the operations it depends on (streaming)
    # what resource_seconds and work_seconds were computed from, and their value
    _resource_seconds: tuple[OperationVector, bool, dict[str, float]] | None = field(
        default=None, init=False, repr=False, compare=False)
    _work_seconds: tuple[OperationVector, dict[str, float]] | None = field(
        default=None, init=False, repr=False, compare=False)

    @property
    def id(self) -> str:
        return self.op.id

    @property
    def runtime(self) -> float:
        return self.op.duration

    @property
    def busy_time(self) -> float:
        """Time the operation's busiest task worked (run time, else its span); the span without tasks."""
        if not self.op.tasks:
            return self.op.metrics.get(tr.METRIC_RUN_TIME, self.runtime)
        return max(t.metrics.get(tr.METRIC_RUN_TIME, t.duration) for t in self.op.tasks)

    @property
    def path_time(self) -> float:
        """What this operation adds to a path through it: its span, or, when it is pipelined with its
        neighbours (all running at once), the busy time of its busiest task."""
        return self.busy_time if self.pipelined else self.runtime

    @property
    def resource_seconds(self) -> dict[str, float]:
        """Path time split by the vector: what this operation adds to a path it lies on. Shared: not to be
        changed by the caller (the analysis reads it a few times per operation, 20,000 operations at a time)."""
        memo = self._resource_seconds
        if memo is None or memo[0] is not self.vector or memo[1] != self.pipelined:
            memo = self._resource_seconds = (self.vector, self.pipelined, self.vector.vector.scaled(self.path_time))
        return memo[2]

    @property
    def work_seconds(self) -> dict[str, float]:
        """Task time split by the vector: the resources consumed, summed over parallel tasks. Shared, as
        ``resource_seconds``."""
        memo = self._work_seconds
        if memo is None or memo[0] is not self.vector:
            memo = self._work_seconds = (self.vector, self.vector.vector.scaled(task_seconds(self.op)))
        return memo[1]


@dataclass
class LevelGraph:
    """The operations of one level (siblings) as a DAG. Edges are the explicit parents plus the
    implicit 'ran after' order of operations that declare no parents but started only when an
    earlier sibling had finished (e.g. Spark jobs submitted one after another by the driver)."""

    graph: nx.DiGraph
    nodes: dict[str, OperationProfile]
    start: float
    end: float
    pipelined: bool = False
    # The graph is complete once level_graph returns and nothing changes it after: the analysis asks for its
    # order a dozen times (a tenth of a second each at 20,000 operations), so it is sorted once.
    _order: list[str] | None = field(default=None, init=False, repr=False, compare=False)

    def topological(self) -> list[str]:
        if self._order is None:
            self._order = list(nx.topological_sort(self.graph))
        return list(self._order)


@dataclass
class ExecutionProfile:
    trace: tr.Trace
    top: LevelGraph
    by_path: dict[str, OperationProfile] = field(default_factory=dict)
    resolution: SampleResolution | None = None
    classifier_version: str = ""
    attribution: str = ATTRIBUTION_EVIDENCE
    # (read, written) storage bytes where the OS counters showed the job's processes did no disk I/O worth a wait
    # (``observed.storage_counted_idle``): the sampled functions' disk share was counted as CPU.
    storage_idle: tuple[float, float] | None = None
    # Whether the network counters of every process that ran the job's tasks saw no traffic
    # (``observed.network_counted_idle``): the running samples' network share was counted as CPU.
    network_idle: bool = False
    # Figures derived from the whole profile that several scenarios read (see predict.base.unit_seconds), and what
    # they are computed from (predict.base.job_metric_total).
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # Every part of the report walks the operations; the levels do not change once built (LevelGraph).
    _walked: list[OperationProfile] | None = field(default=None, init=False, repr=False, compare=False)

    def memoised(self, name: str, compute: Callable[[], T]) -> T:
        """``compute()`` the first time ``name`` is asked for, the same value after (figures several parts of the
        analysis read)."""
        if name not in self.memo:
            self.memo[name] = compute()
        found: T = self.memo[name]
        return found

    def walk(self) -> list[OperationProfile]:
        """All operation profiles, parents before children."""
        if self._walked is None:
            self._walked = self._walk()
        return list(self._walked)

    def _walk(self) -> list[OperationProfile]:
        out: list[OperationProfile] = []

        def visit(level: LevelGraph) -> None:
            for node_id in level.topological():
                prof = level.nodes[node_id]
                out.append(prof)
                if prof.children:
                    visit(prof.children)

        visit(self.top)
        return out


def implicit_predecessors(ops: Sequence[tr.Operation]) -> dict[str, str]:
    """For each operation that declares no parents: the sibling that finished last before it started
    (ended no later than ``SEQUENCE_TOLERANCE_S`` after its start and started strictly before it; of equal
    ends, the one listed last).

    Siblings that started at the same time or later are concurrent, not predecessors. One sweep in start
    order, O(n log n): a sibling becomes a candidate once it has ended (by the tolerance) and, held back in
    a heap while it has not started yet, once the sweep passes its start; the candidates only grow, so the
    best of them is a running maximum.
    """
    by_end = sorted(range(len(ops)), key=lambda i: ops[i].end)
    queries = sorted((i for i, o in enumerate(ops) if not o.parents), key=lambda i: ops[i].start)
    result: dict[str, str] = {}
    ended = 0  # siblings of by_end[:ended] have ended by the current query's start (plus the tolerance)
    not_started: list[tuple[float, int]] = []  # (start, index) of ended siblings not yet started before it
    best: tuple[float, int] | None = None  # (end, index) of the best candidate so far
    for q in queries:
        start = ops[q].start
        limit = start + SEQUENCE_TOLERANCE_S
        while ended < len(by_end) and ops[by_end[ended]].end <= limit:
            i = by_end[ended]
            heapq.heappush(not_started, (ops[i].start, i))
            ended += 1
        while not_started and not_started[0][0] < start:
            _, i = heapq.heappop(not_started)
            if best is None or (ops[i].end, i) > best:
                best = (ops[i].end, i)
        if best is not None:
            result[ops[q].id] = ops[best[1]].id
    return result


def _topological_order(graph: nx.DiGraph) -> list[str]:
    """The level's operations in an order that respects its edges (the check for a cycle is the sort the analysis
    reads anyway). An edge implied by time that closes a cycle with declared ones goes: a stage that never ran (its
    job was cancelled) carries its job's start, before the parent it declares."""
    while True:
        try:
            return list(nx.topological_sort(graph))
        except nx.NetworkXUnfeasible:
            cycle = nx.find_cycle(graph)
            implied = [(u, v) for u, v, *_ in cycle if graph.edges[u, v]["implicit"]]
            if not implied:
                raise ValueError(f"operations form a cycle: {' -> '.join(str(e[0]) for e in cycle)}") from None
            graph.remove_edges_from(implied)


def level_graph(
    ops: Sequence[tr.Operation],
    make_node: Callable[[tr.Operation, str, str | None], OperationProfile],
    parent_path: str | None,
    start: float,
    end: float,
) -> LevelGraph:
    graph = nx.DiGraph()
    nodes: dict[str, OperationProfile] = {}
    for op in ops:
        path = f"{parent_path}/{op.id}" if parent_path else op.id
        nodes[op.id] = make_node(op, path, parent_path)
    graph.add_nodes_from(op.id for op in ops)
    graph.add_edges_from((p, op.id, {"implicit": False}) for op in ops for p in op.parents)
    graph.add_edges_from((pred, op_id, {"implicit": True}) for op_id, pred in implicit_predecessors(ops).items())
    order = _topological_order(graph)
    by_id = {op.id: op for op in ops}
    # A level whose operations overlap their declared predecessors is a pipeline (streaming): its
    # operations' spans say nothing about where the time went, their busy times do.
    pipelined = any(
        by_id[v].start < by_id[u].end - SEQUENCE_TOLERANCE_S and by_id[u].duration > 0
        for u, v, implicit in graph.edges(data="implicit") if not implicit
    )
    if pipelined:
        for node in nodes.values():
            node.pipelined = True
    level = LevelGraph(graph, nodes, start, end, pipelined)
    level._order = order
    return level


def build_profile(
    trace: tr.Trace,
    classifier: ResourceClassifier,
    *,
    locators: Sequence[object] | None = None,
    source_roots: Sequence[str] = (),
    reclassify: bool = False,
    attribution: str = ATTRIBUTION_EVIDENCE,
) -> ExecutionProfile:
    """Attribute and aggregate: the execution profile of a trace in one call (``attribute``, then
    ``profile_of``; the analysis calls the two stages itself)."""
    return profile_of(trace, attribute(trace, classifier, locators=locators, source_roots=source_roots,
                                       reclassify=reclassify, attribution=attribution))


def profile_of(trace: tr.Trace, attributed: Attribution) -> ExecutionProfile:
    """The DAG execution profile of a trace whose operations' vectors are attributed: a graph per level."""
    by_path: dict[str, OperationProfile] = {}

    def make_node(op: tr.Operation, path: str, parent_path: str | None) -> OperationProfile:
        children = (
            level_graph(op.children, make_node, path, op.start, op.end) if op.children else None
        )
        prof = OperationProfile(op, path, parent_path, attributed.vectors[path], children)
        by_path[path] = prof
        return prof

    app = trace.application
    top = level_graph(trace.operations, make_node, None, app.start, app.end)
    return ExecutionProfile(trace, top, by_path, attributed.resolution, attributed.classifier_version,
                            attributed.attribution, storage_idle=attributed.storage_idle,
                            network_idle=attributed.network_idle)


def runs_its_children(prof: OperationProfile) -> bool:
    """An operation whose own tasks ran its children's work, the children having no tasks of their own (a
    Flink chain: its operators are called record by record on the chain's task threads). The children then
    each span the whole operation and replaying them side by side says nothing: the tasks are the units, and
    the operation's vector (over all its children's samples) their split."""
    return bool(prof.op.tasks) and prof.children is not None and bool(prof.children.nodes) and not any(
        child.op.tasks for child in prof.children.nodes.values())


def unit_profiles(profile: ExecutionProfile) -> Iterator[OperationProfile]:
    """The operations whose tasks (or themselves) a prediction adjusts: leaves, and operations that ran their
    children on their own tasks (not those children)."""
    stack = [profile.top]
    while stack:
        level = stack.pop()
        for prof in level.nodes.values():
            if prof.children and not runs_its_children(prof):
                stack.append(prof.children)
            else:
                yield prof


def vector_dict(values: Iterable[float]) -> dict[str, float]:
    """Four per-category figures (a vector, or its seconds: cpu, disk, network, waiting in that order) rounded for
    the report. Spelled out: a report of 20,000 operations makes 80,000 of these."""
    cpu, disk, network, waiting = values
    return {"cpu": round(cpu, 6), "disk": round(disk, 6), "network": round(network, 6), "waiting": round(waiting, 6)}
