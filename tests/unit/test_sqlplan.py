"""Spark SQL plan operators: stage membership, stack-to-node attribution, and the report's figures, on a small
plan and stacks shaped like the ones a real Spark 4 trace holds (tests/integrations/spark/test_spark_demo.py
checks the same on a real run)."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.errors import BadInputError
from crystalperf.core.profile.sqlplan import QueryPlan, is_task_overhead, read_stack, sql_operators
from tests.unit.helpers import make_trace, op, task

GEN = "org.apache.spark.sql.catalyst.expressions.GeneratedClass$GeneratedIteratorForCodegenStage{}.{}"
THREAD = ["org.apache.spark.rdd.RDD.iterator", "org.apache.spark.executor.Executor$TaskRunner.run",
          "java.lang.Thread.run"]

# A Q9-like plan: a final aggregate (stage 1) over an Exchange whose map side (stage 0) scans, joins twice
# against broadcasts, and partially aggregates, all compiled into codegen stage 1.
PLAN = [
    ("WholeStageCodegen (2)", None, [1]),      # 0
    ("HashAggregate", 0, [1]),                 # 1
    ("InputAdapter", 1, []),                   # 2
    ("Exchange", 2, [0, 1]),                   # 3
    ("WholeStageCodegen (1)", 3, [0]),         # 4
    ("HashAggregate", 4, [0]),                 # 5
    ("Project", 5, []),                        # 6
    ("BroadcastHashJoin", 6, [0]),             # 7
    ("BroadcastHashJoin", 7, [0]),             # 8
    ("ColumnarToRow", 8, [0]),                 # 9
    ("InputAdapter", 9, []),                   # 10
    ("Scan parquet lineitem", 10, [0]),        # 11
    ("InputAdapter", 8, []),                   # 12
    ("BroadcastExchange", 12, []),             # 13
]


def _query(plan: list = PLAN) -> tr.SqlQuery:
    return tr.SqlQuery(execution_id="1", description="Q", nodes=[
        tr.SqlPlanNode(id=i, name=name, parent=parent, stages=stages) for i, (name, parent, stages) in enumerate(plan)])


STACKS = {  # name -> (stage, frames innermost first, samples, the node it must go to or None)
    "scan": (0, ["org.apache.parquet.column.impl.ColumnReaderImpl.readValue",
                 "org.apache.spark.sql.execution.datasources.FileScanRDD$$anon$1.hasNext",
                 GEN.format(1, "columnartorow_nextBatch_0$"), GEN.format(1, "processNext")] + THREAD, 4, 11),
    "agg": (0, ["org.apache.spark.unsafe.map.BytesToBytesMap.safeLookup",
                "org.apache.spark.sql.execution.UnsafeFixedWidthAggregationMap.getAggregationBufferFromUnsafeRow",
                GEN.format(1, "hashAgg_doConsume_0$"), GEN.format(1, "processNext")] + THREAD, 2, 5),
    "pipeline": (0, [GEN.format(1, "hashAgg_doAggregateWithKeys_0$"), GEN.format(1, "processNext")] + THREAD, 3, 4),
    # two BroadcastHashJoins compiled into codegen stage 1: the codegen node, not one of them
    "join": (0, ["org.apache.spark.sql.execution.joins.LongToUnsafeRowMap.getValue",
                 GEN.format(1, "hashAgg_doAggregateWithKeys_0$")] + THREAD, 2, 4),
    "write": (0, ["org.apache.spark.storage.DiskBlockObjectWriter.write",
                  "org.apache.spark.shuffle.sort.BypassMergeSortShuffleWriter.write",
                  "org.apache.spark.shuffle.ShuffleWriteProcessor.write"] + THREAD, 1, 3),
    "fetch": (1, ["org.apache.spark.storage.ShuffleBlockFetcherIterator.next",
                  "org.apache.spark.shuffle.sort.SortShuffleManager.getReader",
                  "org.apache.spark.sql.execution.ShuffledRowRDD.compute"] + THREAD, 2, 3),
    "final": (1, [GEN.format(2, "agg_doAggregateWithoutKey_0$"), GEN.format(2, "processNext")] + THREAD, 1, 0),
    "collect": (1, ["java.io.DataOutputStream.writeInt",
                    "org.apache.spark.sql.execution.SparkPlan.$anonfun$getByteArrayRdd$2"] + THREAD, 1, 0),
    "deserialise": (1, ["java.io.ObjectInputStream.readObject0", "java.io.ObjectInputStream.readObject",
                        "org.apache.spark.sql.execution.FileSourceScanExec.$deserializeLambda$"], 3, None),
    "cpu-metric": (1, ["sun.management.ThreadImpl.getThreadTotalCpuTime0",
                       "org.apache.spark.scheduler.ResultTask.runTask",
                       "org.apache.spark.executor.Executor$TaskRunner.run", "java.lang.Thread.run"], 1, None),
}


def _trace(plan: list = PLAN, stacks_by_name: dict = STACKS) -> tr.Trace:
    frames: list[tr.Frame] = []
    index: dict[str, int] = {}
    stacks, keys, key, stack, count = [], [], [], [], []
    for s, (stage, names, n, _) in enumerate(stacks_by_name.values()):
        ids = []
        for name in names:
            if name not in index:
                index[name] = len(frames)
                frames.append(tr.Frame(name=name, language="java"))
            ids.append(index[name])
        stacks.append(ids)
        keys.append(tr.SampleKey(operation=f"stage-{stage}", task=f"t{stage}", thread="task"))
        key.append(s)
        stack.append(s)
        count.append(n)
    samples = tr.StackSamples(interval_s=0.1, bucket_s=1.0, origin=0.0, frames=frames, stacks=stacks, keys=keys,
                              key=key, bucket=[0] * len(key), stack=stack, count=count)
    stage0 = op("stage-0", 0, 2, tasks=[task("t0", 0, 2, run_time_s=2.0)], kind="stage")
    stage1 = op("stage-1", 2, 3, parents=["stage-0"], tasks=[task("t1", 2, 3, run_time_s=1.0)], kind="stage")
    job = op("job-0", 0, 3, children=[stage0, stage1], kind="job", attributes={"sql_execution_id": "1"})
    trace = make_trace([job], samples=samples)
    trace.sql_queries = [_query(plan)]
    return trace


def test_nodes_without_metrics_run_in_the_stages_of_the_node_above_them_and_never_across_an_exchange():
    plan = QueryPlan.of(_query())
    assert plan.nodes[6].stages == {0}  # Project, under the map side's aggregate
    assert plan.nodes[2].stages == {1}  # InputAdapter, reading the Exchange in the final stage
    assert plan.nodes[3].stages == {0, 1}  # the Exchange: written in 0, read in 1
    assert plan.nodes[13].stages == {0}  # the broadcast is read where its join runs
    assert plan.nodes[11].kind == "Scan" and plan.nodes[4].kind == "WholeStageCodegen"
    assert plan.codegen_nodes == {2: 0, 1: 4}
    assert plan.nodes[11].codegen == 4 and plan.nodes[5].codegen == 4 and plan.nodes[4].codegen is None


@pytest.mark.parametrize("name", list(STACKS))
def test_each_stack_goes_to_its_operator(name):
    trace = _trace()
    expected = STACKS[name][3]
    [query] = sql_operators(trace, None)
    got = [n["id"] for n in query["nodes"] if n.get("operations", {}).get(f"stage-{STACKS[name][0]}")]
    if expected is not None:
        assert expected in got, (name, got)


def test_stage_figures_add_up_by_hand():
    [query] = sql_operators(_trace(), None)
    nodes = {n["id"]: n for n in query["nodes"]}
    # stage 0: 12 samples, all attributed; its 2 task-seconds split by samples
    assert nodes[11]["samples"] == 4 and nodes[11]["task_seconds"] == pytest.approx(2.0 * 4 / 12)
    assert nodes[4]["samples"] == 5  # 3 in the pipeline driver + 2 in the ambiguous joins
    assert nodes[5]["samples"] == 2
    # the Exchange: 1 write sample in stage 0 (2 s / 12), 2 fetch samples in stage 1 (1 s / 8)
    assert nodes[3]["operations"] == {"stage-0": 1, "stage-1": 2}
    assert nodes[3]["task_seconds"] == pytest.approx(2.0 / 12 + 2 * 1.0 / 8)
    assert nodes[0]["operations"] == {"stage-1": 2}  # codegen 2's aggregate driver and the collect
    assert "samples" not in nodes[7] and "samples" not in nodes[8]
    stages = {s["operation"]: s for s in query["stages"]}
    assert stages["stage-0"]["attributed_fraction"] == 1.0 and stages["stage-0"]["overhead_samples"] == 0
    one = stages["stage-1"]
    assert (one["samples"], one["attributed_samples"], one["overhead_samples"]) == (8, 4, 4)
    assert one["operator_fraction"] == 1.0
    assert query["attributed_fraction"] == pytest.approx(16 / 20)


def test_generated_frames_name_codegen_stage_and_operator():
    frames = [tr.Frame(name=GEN.format(7, "sort_addToSorter_0$")), tr.Frame(name=GEN.format(9, "smj_findNextJoinRows_0$"))]
    assert (read_stack(frames, [0]).codegen, read_stack(frames, [0]).method_kind) == (7, None)  # a pipeline driver
    assert (read_stack(frames, [1]).codegen, read_stack(frames, [1]).method_kind) == (9, "SortMergeJoin")


def test_a_cut_stack_without_java_serialisation_is_not_called_overhead():
    frames = [tr.Frame(name="sun.management.ThreadImpl.getThreadTotalCpuTime0"),
              tr.Frame(name="org.apache.spark.scheduler.ResultTask.runTask")]
    assert not is_task_overhead(frames, [0, 1])  # the stack was cut before its thread's entry: unknown


def test_the_report_holds_queries_and_each_stage_names_its_operators():
    report = analyze(_trace()).report
    [query] = report["sql_queries"]
    assert query["description"] == "Q" and query["operations"] == ["stage-0", "stage-1"]
    stage0 = next(o for o in report["operations"] if o["id"] == "stage-0")
    assert [p["node"] for p in stage0["plan_operators"]][0] in (4, 11)
    assert {p["name"] for p in stage0["plan_operators"]} >= {"Scan parquet lineitem", "HashAggregate"}
    for node in query["nodes"]:
        if node.get("samples"):
            assert sum(node["vector"].values()) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("nodes, problem", [
    ([{"id": 1, "name": "Sort"}], "ids are the node's index"),
    ([{"id": 0, "name": "Sort", "parent": 0}], "does not come before it"),
])
def test_a_plan_that_is_no_tree_is_refused_in_one_line(tmp_path, nodes, problem):
    doc = _trace().model_dump(by_alias=True, exclude_none=True)
    doc["sql_queries"] = [{"execution_id": "1", "nodes": nodes}]
    with pytest.raises(BadInputError, match=problem):
        tr.parse_trace(doc, tmp_path / "t.json")


def test_a_plan_as_deep_as_the_schema_allows_is_analysed_in_one_pass_per_hint():
    """A chain of 20,000 joins all run by one stage, every one a candidate for a join sample: the answer is the
    smallest subtree holding them all (the chain's top), found without walking each candidate's ancestors."""
    nodes = [tr.SqlPlanNode(id=i, name="BroadcastHashJoin", parent=i - 1 if i else None, stages=[0])
             for i in range(tr.MAX_PLAN_NODES)]
    trace = _trace()
    trace.sql_queries = [tr.SqlQuery(execution_id="1", nodes=nodes)]
    [query] = sql_operators(trace, None)
    joined = {n["id"]: n["samples"] for n in query["nodes"] if n.get("samples")}
    assert joined[0] >= STACKS["join"][2]


# Q9's last two stages: a sort over a range-partitioned Exchange. Before writing, the Exchange samples its input
# in a job of its own (stage 0 here: RangePartitioner's sketch); that stage updates the metrics of the nodes
# below the Exchange, not the Exchange's, as a real Spark 4 trace records them.
RANGE_PLAN = [
    ("WholeStageCodegen (2)", None, [1]),      # 0
    ("Sort", 0, [1]),                          # 1
    ("InputAdapter", 1, []),                   # 2
    ("Exchange", 2, [1]),                      # 3, rangepartitioning: read in 1 (the map side is stage 0's job)
    ("WholeStageCodegen (1)", 3, [0]),         # 4
    ("HashAggregate", 4, [0]),                 # 5
]
RANGE_STACKS = {
    "sketch": (0, ["java.util.zip.ZipFile.getEntry", "java.lang.ClassLoader.loadClass",
                   "org.apache.spark.RangePartitioner$.$anonfun$sketch$1",
                   "org.apache.spark.rdd.RDD.$anonfun$mapPartitionsWithIndex$2"] + THREAD, 3, 3),
    "partition-key": (0, ["org.apache.spark.sql.catalyst.expressions.codegen.GenerateUnsafeProjection$.generate",
                          "org.apache.spark.sql.catalyst.expressions.UnsafeProjection$.create",
                          "org.apache.spark.sql.execution.exchange.ShuffleExchangeExec$.$anonfun$prepareShuffleDependency$1"]
                      + THREAD, 2, 3),
    "aggregate": (0, [GEN.format(1, "agg_doAggregateWithKeys_0$")] + THREAD, 4, 4),
    "sort": (1, ["org.apache.spark.sql.execution.UnsafeExternalRowSorter.insertRow",
                 GEN.format(2, "sort_addToSorter_0$")] + THREAD, 2, 1),
}


def test_a_range_exchange_gets_the_sketch_stage_that_recorded_only_the_nodes_below_it():
    [query] = sql_operators(_trace(RANGE_PLAN, RANGE_STACKS), None)
    nodes = {n["id"]: n for n in query["nodes"]}
    assert nodes[3]["operations"] == {"stage-0": 5}
    assert nodes[4]["operations"] == {"stage-0": 4}
    stages = {s["operation"]: s for s in query["stages"]}
    assert stages["stage-0"]["attributed_samples"] == 9 and stages["stage-0"]["operator_fraction"] == 1.0
