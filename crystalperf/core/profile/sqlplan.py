"""Spark SQL plan operators as the report's unit: each sampled stack of a SQL stage is given to the node of the
query's physical plan that was running (Scan parquet, HashAggregate, Exchange, BroadcastHashJoin...), so a
stage's time splits over the operators users know from Spark's SQL tab.

Where a sample goes, strongest evidence first, walking its stack from the innermost frame out:
1. an operator's own classes (``UnsafeFixedWidthAggregationMap`` is the hash aggregate's map,
   ``LongToUnsafeRowMap`` a hash join's relation, the Parquet reader the scan's, a shuffle writer (or a
   range partitioner's sampling of its input) the Exchange's map side, a block fetcher its reduce side;
   any ``...execution.XxxExec`` class names node Xxx);
2. the innermost frame of generated code, ``GeneratedIteratorForCodegenStage<N>.<op>_<method>``: the
   whole-stage-codegen node N bounds where (1) looks, and ``<op>`` names the operator whose code the method is
   (``hashAgg_doConsume`` is the aggregate's); the methods that drive a whole pipeline
   (``processNext``, ``hashAgg_doAggregateWithKeys``, ``sort_addToSorter``) run the inlined code of every
   operator in it, so they go to the WholeStageCodegen node itself;
3. nothing else is guessed: a stack with no operator frame (task deserialisation, class loading) stays
   with the stage, counted as not attributed.
A hint that names several nodes of the stage (five BroadcastHashJoins compiled into one codegen stage) goes
to the WholeStageCodegen node they were compiled into (else the smallest plan subtree holding them all), never
to one of them by chance.

Which stage ran which node comes from the hook (the stages whose tasks updated a node's SQL metrics); a node
with no metrics of its own (Project, InputAdapter) runs in the stages of the node above it.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from crystalperf.core import trace as tr
from crystalperf.core.attribution.vectors import SampleResolution
from crystalperf.core.resources import CATEGORIES, ResourceVector, weighted_mean
from crystalperf.core.trace.totals import task_seconds

ATTRIBUTE_STAGE_ID = "stage_id"
MAX_ANALYSED_NODES = 200_000  # plan nodes over all queries
ATTRIBUTE_SQL_EXECUTION = "sql_execution_id"

_GENERATED = re.compile(r"GeneratedIteratorForCodegenStage(\d+)\.(?:([A-Za-z]+)_)?([A-Za-z]+)")
_CODEGEN_NODE = re.compile(r"^WholeStageCodegen \((\d+)\)$")
_EXEC_CLASS = re.compile(r"^org\.apache\.spark\.sql\.execution\.(?:[a-z0-9_]+\.)*([A-Z][A-Za-z0-9]*)Exec\b")
_STAGE_ID = re.compile(r"^stage-(\d+)$")
# Generated methods that loop over a whole pipeline: their own time is every inlined operator's.
_PIPELINE_DRIVERS = frozenset({"processNext", "doAggregateWithKeys", "doAggregateWithoutKey", "addToSorter",
                               "doAggregateWithKeysOutput", "init"})
# The variable prefixes Spark's code generator gives an operator, where they are not its node name lower-cased.
_PREFIX_KINDS = {"hashagg": "HashAggregate", "agg": "HashAggregate", "smj": "SortMergeJoin",
                 "bhj": "BroadcastHashJoin", "shj": "ShuffledHashJoin", "bnlj": "BroadcastNestedLoopJoin",
                 "scan": "Scan", "inputadapter": "InputAdapter", "columnartorow": "ColumnarToRow"}
# Exec classes whose node is named otherwise.
_EXEC_KINDS = {"ShuffleExchange": "Exchange:write", "FileSourceScan": "Scan", "RowDataSourceScan": "Scan",
               "DataSourceScan": "Scan", "BatchScan": "BatchScan", "ObjectHashAggregate": "ObjectHashAggregate",
               "BroadcastExchange": "BroadcastExchange", "ReusedExchange": "Exchange"}
# Boundaries between stages: what is under them ran before, in another stage (or on the driver).
_SHUFFLE_KINDS = ("Exchange", "ShuffleQueryStage", "AQEShuffleRead")
_BOUNDARIES = ("Exchange", "BroadcastExchange", "ShuffleQueryStage", "BroadcastQueryStage", "ReusedExchange",
               "TableCacheQueryStage", "ResultQueryStage")

WRITE_SIDE = "Exchange:write"
READ_SIDE = "Exchange:read"
PYTHON = "python"
ROOT = "root"

# (frame-name prefix, kind, strong). A weak hint is shared by several operators (a generic sorter, a memory
# map): a stronger one further out overrides it.
_CLASS_HINTS: tuple[tuple[str, str, bool], ...] = (
    # a collect's result rows, serialised by the plan's root as they leave the stage
    ("org.apache.spark.sql.execution.SparkPlan.$anonfun$getByteArrayRdd", ROOT, True),
    # the generated code being compiled (in the first tasks of a stage)
    ("org.codehaus.janino.", "WholeStageCodegen", True),
    ("org.codehaus.commons.compiler.", "WholeStageCodegen", True),
    ("org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator", "WholeStageCodegen", True),
    ("org.apache.spark.sql.execution.UnsafeKVExternalSorter", "HashAggregate", True),
    ("org.apache.spark.sql.execution.UnsafeFixedWidthAggregationMap", "HashAggregate", True),
    ("org.apache.spark.sql.execution.aggregate.ObjectAggregation", "ObjectHashAggregate", True),
    ("org.apache.spark.sql.execution.aggregate.SortBasedAggregation", "SortAggregate", True),
    ("org.apache.spark.sql.execution.aggregate.", "HashAggregate", True),
    ("org.apache.spark.sql.execution.UnsafeExternalRowSorter", "Sort", True),
    ("org.apache.spark.util.collection.unsafe.sort.", "Sort", False),
    ("org.apache.spark.sql.execution.joins.SortMergeJoinScanner", "SortMergeJoin", True),
    ("org.apache.spark.sql.execution.joins.", "HashJoin", True),
    ("org.apache.spark.unsafe.map.BytesToBytesMap", "HashAggregate", False),
    ("org.apache.spark.sql.execution.datasources.", "Scan", True),
    ("org.apache.spark.sql.execution.vectorized.", "ColumnarToRow", False),
    ("org.apache.parquet.", "Scan", True),
    ("org.apache.orc.", "Scan", True),
    ("org.apache.hadoop.fs.", "Scan", False),
    ("org.apache.spark.rdd.HadoopRDD", "Scan", True),
    ("org.apache.spark.shuffle.ShuffleWriteProcessor", WRITE_SIDE, True),
    ("org.apache.spark.RangePartitioner", WRITE_SIDE, True),  # the sketch of a range-partitioned Exchange
    ("org.apache.spark.shuffle.sort.SortShuffleManager", "", False),  # hands out both readers and writers
    ("org.apache.spark.shuffle.sort.", WRITE_SIDE, True),
    ("org.apache.spark.MapOutputTracker", READ_SIDE, False),
    ("org.apache.spark.storage.DiskBlockObjectWriter", WRITE_SIDE, False),
    ("org.apache.spark.storage.ShuffleBlockFetcherIterator", READ_SIDE, True),
    ("org.apache.spark.shuffle.BlockStoreShuffleReader", READ_SIDE, True),
    ("org.apache.spark.sql.execution.ShuffledRowRDD", READ_SIDE, True),
    ("org.apache.spark.network.", READ_SIDE, False),
    ("org.apache.spark.broadcast.TorrentBroadcast", "BroadcastExchange", True),
    ("org.apache.spark.api.python.", PYTHON, True),
    ("org.apache.spark.sql.execution.python.", PYTHON, True),
)


def node_kind(name: str) -> str:
    """The operator a plan node's name stands for: ``Scan parquet lineitem`` -> Scan, ``WholeStageCodegen
    (3)`` -> WholeStageCodegen."""
    if name.startswith(("Scan ", "FileScan")) or name == "Scan":
        return "Scan"
    if name.startswith("BatchScan"):
        return "BatchScan"
    if _CODEGEN_NODE.match(name):
        return "WholeStageCodegen"
    return name.split(" ", 1)[0]


def _matches(kind: str, node: PlanNode) -> bool:
    if kind == "HashJoin":
        return node.kind in ("BroadcastHashJoin", "ShuffledHashJoin")
    if kind == PYTHON:
        return "Python" in node.kind or "InPandas" in node.kind or "InArrow" in node.kind
    if kind == "Scan":
        return node.kind in ("Scan", "BatchScan", "InMemoryTableScan", "HiveTableScan")
    return node.kind == kind


@dataclass
class PlanNode:
    id: int
    name: str
    detail: str
    parent: int | None
    kind: str
    children: list[int] = field(default_factory=list)
    stages: set[int] = field(default_factory=set)  # recorded, then inherited from the node above
    codegen: int | None = None  # the whole-stage-codegen node whose compiled code holds this node


@dataclass
class QueryPlan:
    execution_id: str
    description: str
    nodes: list[PlanNode]
    clipped: bool = False
    codegen_nodes: dict[int, int] = field(default_factory=dict)  # codegen stage id -> node id
    depth: list[int] = field(default_factory=list)
    by_stage: dict[int, list[PlanNode]] = field(default_factory=dict)
    compiled: dict[int, list[PlanNode]] = field(default_factory=dict)  # codegen node -> the nodes with it as codegen

    @classmethod
    def of(cls, query: tr.SqlQuery) -> QueryPlan:
        nodes = [PlanNode(n.id, n.name, n.detail, n.parent, node_kind(n.name), stages=set(n.stages))
                 for n in query.nodes]
        plan = cls(query.execution_id, query.description, nodes, query.clipped)
        for node in nodes:  # pre-order: a parent is complete before its children
            if node.parent is None:
                continue
            parent = nodes[node.parent]
            parent.children.append(node.id)
            if not node.stages and parent.kind not in _BOUNDARIES:
                node.stages = set(parent.stages)
            if parent.kind not in _BOUNDARIES and node.kind != "WholeStageCodegen":
                node.codegen = parent.id if parent.kind == "WholeStageCodegen" else parent.codegen
        for node in nodes:
            m = _CODEGEN_NODE.match(node.name)
            if m:
                plan.codegen_nodes.setdefault(int(m.group(1)), node.id)
            plan.depth.append(0 if node.parent is None else plan.depth[node.parent] + 1)
            for stage in node.stages:
                plan.by_stage.setdefault(stage, []).append(node)
            if node.codegen is not None:
                plan.compiled.setdefault(node.codegen, []).append(node)
        return plan

    def common_ancestor(self, ids: Sequence[int]) -> int:
        """The deepest node whose subtree holds all of ``ids``, in one pass over the plan (a plan may be a
        chain thousands of nodes deep: walking every candidate's ancestors would be quadratic)."""
        wanted = set(ids)
        below = [1 if n.id in wanted else 0 for n in self.nodes]
        for node in reversed(self.nodes):  # pre-order: children after their parent
            if node.parent is not None:
                below[node.parent] += below[node.id]
        holding = [n.id for n in self.nodes if below[n.id] == len(wanted)]
        return max(holding, key=lambda i: self.depth[i]) if holding else ids[0]


@dataclass
class _Hint:
    kind: str
    strong: bool


def _class_hint(name: str) -> _Hint | None:
    if "$deserializeLambda$" in name:
        return None  # a task's closure being deserialised names every class it holds, not what runs
    for prefix, kind, strong in _CLASS_HINTS:
        if name.startswith(prefix):
            return _Hint(kind, strong) if kind else None
    m = _EXEC_CLASS.match(name)
    if m:
        kind = m.group(1)
        return _Hint(_EXEC_KINDS.get(kind, kind), True)
    return None


@dataclass
class StackReading:
    """What a stack says about the operator that ran: the operator hint and the generated code it ran in."""

    hint: _Hint | None
    codegen: int | None
    method_kind: str | None  # from the generated method's prefix; None for a pipeline driver


def read_stack(frames: Sequence[tr.Frame], stack: Sequence[int]) -> StackReading:
    hint: _Hint | None = None
    for index in stack:
        name = frames[index].name
        m = _GENERATED.search(name)
        if m:
            prefix, method = m.group(2), m.group(3)
            kind = None
            if prefix and method not in _PIPELINE_DRIVERS:
                kind = _PREFIX_KINDS.get(prefix.lower(), prefix)
            return StackReading(hint, int(m.group(1)), kind)
        found = _class_hint(name)
        # the first strong hint (else the first weak one) stands; the walk goes on for the codegen stage,
        # which still bounds where the hint points
        if found is not None and (hint is None or (found.strong and not hint.strong)):
            hint = found
    return StackReading(hint, None, None)


class _StageScope:
    """The nodes of one query that ran in one stage, and how a stack reading maps onto them."""

    def __init__(self, plan: QueryPlan, stage: int) -> None:
        self.plan = plan
        self.stage = stage
        self.nodes = plan.by_stage.get(stage, [])
        self.ids = {n.id for n in self.nodes}
        self._chosen: dict[tuple[str | None, str | None, int | None], int | None] = {}

    def _codegen_subtree(self, codegen_node: int) -> list[PlanNode]:
        """The codegen node, the operators compiled into it, and the boundary nodes it reads from."""
        return [self.plan.nodes[codegen_node], *self.plan.compiled.get(codegen_node, [])]

    def _pick(self, candidates: Sequence[PlanNode], codegen_node: int | None) -> int | None:
        """One candidate is the node; of several, the code they were compiled into, else the smallest subtree
        holding them all: never one of them by chance."""
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0].id
        if codegen_node is not None:
            return codegen_node
        return self.plan.common_ancestor([c.id for c in candidates])

    def _side(self, kind: str, scope: Sequence[PlanNode]) -> list[PlanNode]:
        exchanges = [n for n in scope if n.kind in _SHUFFLE_KINDS and n.id in self.ids]
        map_side = [n for n in exchanges if any(self.stage in self.plan.nodes[c].stages for c in n.children)]
        if kind == WRITE_SIDE:
            # A range-partitioned Exchange first samples its input in a job of its own (RangePartitioner's
            # sketch, with the partition keys' projection): that stage updates the metrics of the nodes below
            # the Exchange only, so the Exchange is the one above the nodes that ran there.
            seen = {n.id for n in map_side}
            for node in scope:
                above = self.plan.nodes[node.parent] if node.parent is not None else None
                if (above is not None and above.kind in _SHUFFLE_KINDS and above.id not in seen
                        and self.stage in node.stages):
                    seen.add(above.id)
                    map_side.append(above)
            return map_side
        return [n for n in exchanges if n not in map_side]

    def node_for(self, reading: StackReading) -> int | None:
        key = (reading.hint.kind if reading.hint else None, reading.method_kind, reading.codegen)
        if key not in self._chosen:
            self._chosen[key] = self._node_for(reading)
        return self._chosen[key]

    def _node_for(self, reading: StackReading) -> int | None:
        codegen_node = None
        if reading.codegen is not None:
            codegen_node = self.plan.codegen_nodes.get(reading.codegen)
            if codegen_node is not None and codegen_node not in self.ids:
                codegen_node = None
        scope = self._codegen_subtree(codegen_node) if codegen_node is not None else self.nodes
        for kind in (reading.hint.kind if reading.hint else None, reading.method_kind):
            if kind is None:
                continue
            if kind == ROOT:
                chosen = self._pick([n for n in self.nodes if n.parent is None or n.parent not in self.ids], None)
            else:
                def of(nodes: Sequence[PlanNode], kind: str = kind) -> list[PlanNode]:
                    if kind in (WRITE_SIDE, READ_SIDE):
                        return self._side(kind, nodes)
                    return [n for n in nodes if _matches(kind, n)]

                # within the code the sample ran in first, then anywhere in the stage
                chosen = self._pick(of(scope), codegen_node) if codegen_node is not None else None
                if chosen is None:
                    chosen = self._pick(of(self.nodes), None)
            if chosen is not None:
                return chosen
        return codegen_node


@dataclass
class NodeTime:
    samples: int = 0
    seconds: float = 0.0  # task-seconds: the stages' task time, by the node's share of their samples
    vectors: list[tuple[ResourceVector, float]] = field(default_factory=list)
    by_operation: Counter[str] = field(default_factory=Counter)  # samples per stage


def sql_operators(trace: tr.Trace, resolution: SampleResolution | None,
                  stage_vectors: dict[str, ResourceVector] | None = None) -> list[dict[str, Any]]:
    """Per SQL execution of the trace: its plan nodes, each with the samples and task-seconds it was given and
    their resource split, and per stage the share of samples that went to a plan node.

    ``stage_vectors`` are the stages' own vectors, bounded by what Spark measured (CPU time, fetch wait,
    shuffle write time): a node's split is its samples' split corrected by the factor, per resource, that
    turned the stage's samples into the stage's vector, so the operators of a stage that measurably waited on
    its disk share that disk time by where the samples were, and never contradict the stage."""
    if not trace.sql_queries:
        return []
    plans: dict[str, QueryPlan] = {}
    budget = MAX_ANALYSED_NODES
    for q in trace.sql_queries:
        if len(q.nodes) <= budget:  # beyond it, listed without operators: the analysis stays linear and bounded
            plans[q.execution_id] = QueryPlan.of(q)
            budget -= len(q.nodes)
    stage_ops: dict[str, tuple[QueryPlan, int, tr.Operation]] = {}
    for job in trace.iter_operations():
        plan = plans.get(job.attributes.get(ATTRIBUTE_SQL_EXECUTION, ""))
        if plan is None:
            continue
        for stage in job.children:
            number = _stage_number(stage)
            if number is not None and stage.status != "skipped":
                stage_ops[stage.id] = (plan, number, stage)
    samples = trace.samples
    # operation -> (stack, ran in a Python worker) -> samples
    per_stage: dict[str, Counter[tuple[int, bool]]] = defaultdict(Counter)
    if samples is not None:
        for key, _bucket, stack, count in samples.rows():
            sample_key = samples.keys[key]
            if sample_key.operation in stage_ops:
                python = (sample_key.thread or "").startswith("python")
                per_stage[sample_key.operation][(stack, python)] += count

    times: dict[tuple[str, int], NodeTime] = defaultdict(NodeTime)
    stage_rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    readings: dict[tuple[int, bool], StackReading] = {}
    for op_id, (plan, number, stage) in stage_ops.items():
        stacks = per_stage.get(op_id, Counter())
        total = sum(stacks.values())
        scope = _StageScope(plan, number)
        attributed = overhead = 0
        seconds = task_seconds(stage)
        correction = _correction(stacks, resolution, (stage_vectors or {}).get(op_id))
        for (stack, python), count in stacks.items():
            if samples is None:
                break
            if (stack, python) not in readings:
                # A PySpark worker's frames are the user's Python: the plan node is the one running Python.
                readings[(stack, python)] = (StackReading(_Hint(PYTHON, True), None, None) if python
                                             else read_stack(samples.frames, samples.stacks[stack]))
            node = scope.node_for(readings[(stack, python)])
            if node is None:
                if not python and is_task_overhead(samples.frames, samples.stacks[stack]):
                    overhead += count
                continue
            attributed += count
            cell = times[(plan.execution_id, node)]
            cell.samples += count
            cell.seconds += seconds * count / total
            cell.by_operation[op_id] += count
            vec = resolution.stack_vectors.get(stack) if resolution is not None else None
            if vec is not None:
                cell.vectors.append((_corrected(vec, correction), seconds * count / total))
        stage_rows[plan.execution_id].append({
            "operation": op_id, "samples": total, "attributed_samples": attributed,
            "attributed_fraction": round(attributed / total, 4) if total else 0.0,
            # task start-up and hand-over, which no operator runs (Spark's executorDeserializeTime and
            # resultSerializationTime), and the share of the rest that went to an operator
            "overhead_samples": overhead,
            "operator_fraction": round(attributed / (total - overhead), 4) if total > overhead else 0.0,
            "task_seconds": round(seconds, 6)})

    out = []
    for query in trace.sql_queries:
        if query.execution_id not in plans:
            out.append({"execution_id": query.execution_id, "description": query.description, "clipped": True,
                        "operations": [], "stages": [], "samples": 0, "attributed_fraction": 0.0, "nodes": []})
            continue
        plan = plans[query.execution_id]
        nodes = []
        for plan_node in plan.nodes:
            found = times.get((plan.execution_id, plan_node.id))
            entry: dict[str, Any] = {"id": plan_node.id, "name": plan_node.name, "kind": plan_node.kind,
                                     "parent": plan_node.parent, "stages": sorted(plan_node.stages)}
            if plan_node.detail:
                entry["detail"] = plan_node.detail
            if found is not None:
                cell = found
                vec = weighted_mean(cell.vectors) or ResourceVector.of()
                entry.update(samples=cell.samples, task_seconds=round(cell.seconds, 6),
                             vector={c: round(vec[i], 6) for i, c in enumerate(CATEGORIES)},
                             resource_seconds={c: round(vec[i] * cell.seconds, 6) for i, c in enumerate(CATEGORIES)},
                             operations=dict(sorted(cell.by_operation.items())))
            nodes.append(entry)
        rows = stage_rows.get(plan.execution_id, [])
        total = sum(r["samples"] for r in rows)
        out.append({
            "execution_id": query.execution_id,
            "description": query.description,
            "clipped": query.clipped,
            "operations": [r["operation"] for r in rows],
            "stages": rows,
            "samples": total,
            "attributed_fraction": round(sum(r["attributed_samples"] for r in rows) / total, 4) if total else 0.0,
            "nodes": nodes,
        })
    return out


_THREAD_ENTRY = ("java.lang.Thread.run", "java.lang.Thread.runWith")
_DATA_PATH = ("org.apache.spark.rdd.RDD.iterator", "org.apache.spark.rdd.RDD.computeOrReadCheckpoint")


def is_task_overhead(frames: Sequence[tr.Frame], stack: Sequence[int]) -> bool:
    """A task's own start-up or hand-over, not its data: Java (de)serialisation (Spark moves rows with its own
    formats; ObjectInput/OutputStream is the task's closure and its result), or a whole stack (it reaches the
    thread's entry) that never entered the RDD's iterator (metrics, memory clean-up around the run)."""
    names = [frames[i].name for i in stack]
    if any(n.startswith(("java.io.ObjectInputStream.", "java.io.ObjectOutputStream.")) for n in names):
        return True
    return bool(names) and names[-1].startswith(_THREAD_ENTRY) and not any(n.startswith(_DATA_PATH) for n in names)


def _correction(stacks: Counter[tuple[int, bool]], resolution: SampleResolution | None,
                target: ResourceVector | None) -> list[float] | None:
    """Per category, the stage's vector over the mean of its samples' vectors (one step of iterative
    proportional fitting); None where either is unknown."""
    if resolution is None or target is None:
        return None
    mean = weighted_mean((resolution.stack_vectors[s], float(n)) for (s, _), n in stacks.items()
                         if s in resolution.stack_vectors)
    if mean is None:
        return None
    return [target[i] / mean[i] if mean[i] > 1e-9 else 0.0 for i in range(len(CATEGORIES))]


def _corrected(vec: ResourceVector, correction: list[float] | None) -> ResourceVector:
    if correction is None:
        return vec
    scaled = [vec[i] * correction[i] for i in range(len(CATEGORIES))]
    return ResourceVector.of(*scaled) if sum(scaled) > 0 else vec


def _stage_number(op: tr.Operation) -> int | None:
    value = op.attributes.get(ATTRIBUTE_STAGE_ID)
    if value is not None and value.isdigit():
        return int(value)
    m = _STAGE_ID.match(op.id)
    return int(m.group(1)) if m else None


def operators_of(queries: Sequence[dict[str, Any]], operation: str, top: int = 5) -> list[dict[str, Any]]:
    """The plan nodes a stage's samples went to, most first: for the stage's entry in the report."""
    found = []
    for query in queries:
        for node in query["nodes"]:
            samples = node.get("operations", {}).get(operation)
            if samples:
                found.append({"query": query["execution_id"], "node": node["id"], "name": node["name"],
                              "samples": samples})
    return sorted(found, key=lambda n: -n["samples"])[:top]
