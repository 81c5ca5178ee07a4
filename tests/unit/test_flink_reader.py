"""The Flink reader and trace assembly on parts recorded from real PyFlink jobs (tests/data/flink-*), without
PyFlink. Every expected number below was read off the recorded JSON by hand (scopes, metrics, samples).

flink-sql-groupby: local mini cluster, parallelism 2, ``INSERT INTO snk SELECT k, SUM(SQRT(v * v + 1)) FROM
src GROUP BY k`` over 20,000 datagen rows, 10 keys; one part. flink-cluster-groupby: the same job on a
standalone cluster (JobManager + 2 TaskManagers): three parts of one job.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crystalperf.core import trace as t
from crystalperf.core.errors import BadInputError
from crystalperf.integrations.flink import read_metrics, wait_for_metrics
from crystalperf.integrations.flink.assemble import NO_PLAN_WARNING, chains_from_scopes
from crystalperf.integrations.flink.finish import main as finish_main
from crystalperf.integrations.flink.reader import find_plan, load_job, load_part, parts_ready

DATA = Path(__file__).resolve().parents[1] / "data"
LOCAL = DATA / "flink-sql-groupby"
CLUSTER = DATA / "flink-cluster-groupby"
LOCAL_PART = LOCAL / "crystalperf-flink-b242f85febe318b795de0afa808e2c36.7081.json"
CLUSTER_JOB = "e316fce4823341d899e8a8546ee10b25"
JM_PART = CLUSTER / f"crystalperf-flink-{CLUSTER_JOB}.8156.json"  # JobManager: the job scope only
TM1_PART = CLUSTER / f"crystalperf-flink-{CLUSTER_JOB}.8784.json"  # source chain, subtask 0
TM2_PART = CLUSTER / f"crystalperf-flink-{CLUSTER_JOB}.9395.json"  # source chain 1 + aggregation chain 0

SOURCE_CHAIN = "Source: src[7] -> Calc[8] -> HashAggregate[9]"
SINK_CHAIN = "HashAggregate[11] -> snk[12]: Writer"
START, END = 1795550755.704, 1795550758.806  # the local part's "start" and "end"
DURATION = END - START


@pytest.fixture(scope="module")
def local() -> t.Trace:
    return read_metrics(LOCAL_PART)


def _children(trace: t.Trace) -> dict[str, t.Operation]:
    return {c.name: c for op in trace.operations for c in op.children}


def test_chains_and_their_operators_in_plan_order(local: t.Trace) -> None:
    assert [(op.id, op.name, op.kind) for op in local.operations] == [
        ("chain0", SOURCE_CHAIN, "task"),
        ("chain1", SINK_CHAIN, "task"),
    ]
    assert [[c.name for c in op.children] for op in local.operations] == [
        ["Source: src[7]", "Calc[8]", "HashAggregate[9]"],
        ["HashAggregate[11]", "snk[12]: Writer"],
    ]
    assert [c.id for c in local.operations[0].children] == ["chain0/op0", "chain0/op1", "chain0/op2"]
    # operator scopes of subtasks 0 and 1 summed (numRecordsIn / numRecordsOut)
    records = {name: (c.metrics["records_in"], c.metrics["records_out"], c.parallelism)
               for name, c in _children(local).items()}
    assert records == {
        "Source: src[7]": (0.0, 20000.0, 2),
        "Calc[8]": (20000.0, 20000.0, 2),
        "HashAggregate[9]": (20000.0, 20.0, 2),  # local pre-aggregation: 10 keys per subtask
        "HashAggregate[11]": (20.0, 10.0, 1),
        "snk[12]: Writer": (10.0, 0.0, 1),
    }
    assert [op.parallelism for op in local.operations] == [2, 1]
    assert local.application.id == "b242f85febe318b795de0afa808e2c36"
    assert local.application.name == "insert-into_default_catalog.default_database.snk"
    assert (local.application.start, local.application.end) == (START, END)


def test_edges_and_ship_strategy_come_from_the_recorded_plan(local: t.Trace) -> None:
    source, sink = local.operations
    assert source.parents == [] and sink.parents == ["chain0"]
    # the plan's HashAggregate[3] -> HashAggregate[5] edge (planner ids [1]..[6] matched to the job's [7]..[12])
    assert sink.attributes == {"ship_strategy": "chain0: HASH[k]"}
    assert [c.parents for c in source.children] == [[], ["chain0/op0"], ["chain0/op1"]]
    assert [c.parents for c in sink.children] == [[], ["chain1/op0"]]
    assert local.warnings == []
    nodes = find_plan(LOCAL, {"Source: src[7]", "Calc[8]", "HashAggregate[9]", "HashAggregate[11]", "snk[12]: Writer"})
    assert nodes is not None
    assert [n.name for n in nodes] == ["Source: src[7]", "Calc[8]", "HashAggregate[9]", "HashAggregate[11]",
                                       "snk[12]: Writer"]
    assert find_plan(LOCAL, {"Map"}) is None  # a plan that does not name the job's operators is not used


def test_without_the_plan_chains_are_linear_and_the_trace_says_so(tmp_path: Path) -> None:
    shutil.copy(LOCAL_PART, tmp_path)
    trace = read_metrics(tmp_path / LOCAL_PART.name)
    assert trace.warnings == [NO_PLAN_WARNING]
    assert [op.parents for op in trace.operations] == [[], ["chain0"]]
    assert all(not op.attributes for op in trace.operations)
    # operators ordered by where the task name lists them
    assert [c.name for c in trace.operations[0].children] == ["Source: src[7]", "Calc[8]", "HashAggregate[9]"]


def test_task_busy_backpressure_network_and_cpu(local: t.Trace) -> None:
    source, sink = local.operations
    assert [task.id for task in source.tasks] == [f"{SOURCE_CHAIN}#0", f"{SOURCE_CHAIN}#1"]
    # The legacy datagen source reports no busy time (NaN, dropped): its thread's CPU time stands in.
    assert [task.metrics for task in source.tasks] == [
        {"run_time_s": 0.132216003, "network_wait_s": 0.0, "network_bytes": 382.0, "cpu_time_s": 0.132216003},
        {"run_time_s": 0.089722698, "network_wait_s": 0.0, "network_bytes": 382.0, "cpu_time_s": 0.089722698},
    ]
    # accumulateBusyTimeMs 18 + accumulateBackPressuredTimeMs 0; numBytesIn 746 + numBytesOut 0
    assert [task.metrics for task in sink.tasks] == [
        {"run_time_s": 0.018, "network_wait_s": 0.0, "network_bytes": 746.0, "cpu_time_s": 0.067392683},
    ]
    assert all((task.start, task.end) == (START, END) for op in local.operations for task in op.tasks)
    assert local.environment.cpu_count == 2
    assert local.environment.scaling == ["parallelism"]  # subtasks run side by side: parallelism resizes the job
    assert local.metrics == {"cpu_utilization": pytest.approx(1.63 / DURATION)}  # process_cpu_s 1.63


def test_samples_count_for_their_chain_and_again_for_their_operator(local: t.Trace) -> None:
    samples = local.samples
    assert samples is not None
    per_key: dict[tuple[str, str, str | None], int] = {}
    for key_index, count in zip(samples.key, samples.count, strict=True):
        key = samples.keys[key_index]
        per_key[(key.operation, key.task or "", key.thread)] = per_key.get(
            (key.operation, key.task or "", key.thread), 0) + count
    chains = {k: v for k, v in per_key.items() if k[2] is None}
    operators = {k: v for k, v in per_key.items() if k[2] == "operator"}
    # 25 rows, 88 samples: 43 + 43 on the source chain's two subtasks, 2 on the sink chain
    assert chains == {("chain0", f"{SOURCE_CHAIN}#0", None): 43, ("chain0", f"{SOURCE_CHAIN}#1", None): 43,
                      ("chain1", f"{SINK_CHAIN}#0", None): 2}
    # by nested ChainingOutput.pushToOperator frames: 84 rows' worth at depth 0, one at depth 1, one at 2
    by_operator: dict[str, int] = {}
    for (operation, _, _), count in operators.items():
        by_operator[operation] = by_operator.get(operation, 0) + count
    assert by_operator == {"chain0/op0": 84, "chain0/op1": 1, "chain0/op2": 1, "chain1/op0": 2}
    assert samples.origin == 1795550752.994 and samples.bucket_s == 1.0 and samples.interval_s == 0.1
    assert any(f.name == "org.apache.flink.table.data.BoxedWrapperRowData.getDouble" for f in samples.frames)


def test_chained_operators_split_their_chains_busy_time_by_samples(local: t.Trace) -> None:
    source, sink = local.operations
    busy = 0.132216003  # the longest subtask of the source chain
    assert [c.metrics["run_time_s"] for c in source.children] == pytest.approx(
        [busy * 84 / 86, busy * 1 / 86, busy * 1 / 86])
    assert [c.metrics["run_time_s"] for c in sink.children] == pytest.approx([0.018, 0.0])


def test_streaming_figures(local: t.Trace) -> None:
    assert local.streaming is not None
    assert local.streaming.latency_s == pytest.approx(DURATION)
    assert local.streaming.input_rate == pytest.approx(20000 / DURATION)  # the source operator's records out
    assert local.streaming.throughput == pytest.approx(10 / DURATION)  # the sink writer's records in


def test_the_three_parts_of_a_cluster_job_merge_into_one_trace() -> None:
    merged = load_job(JM_PART)
    assert merged.parts == 3
    assert (merged.start, merged.end) == (1795550784.831, 1795550790.011)  # earliest start, latest end
    assert merged.process_cpu_s == pytest.approx(0.77 + 1.13 + 1.63)
    assert len(merged.scopes) == 1 + 4 + 7 and len(merged.samples) == 20 + 26
    trace = read_metrics(JM_PART)
    source, sink = trace.operations
    assert (source.name, sink.name) == (SOURCE_CHAIN, SINK_CHAIN) and sink.parents == ["chain0"]
    # subtask 0 ran on one TaskManager, subtask 1 on the other
    assert [(task.index, task.metrics["cpu_time_s"]) for task in source.tasks] == [(0, 0.383763881),
                                                                                  (1, 0.394952189)]
    assert sink.tasks[0].metrics["run_time_s"] == 0.083
    assert _children(trace)["Source: src[7]"].metrics["records_out"] == 20000.0
    assert trace.samples is not None
    chain_samples = sum(count for key, count in zip(trace.samples.key, trace.samples.count, strict=True)
                        if trace.samples.keys[key].thread is None)
    assert chain_samples == 54 + 61  # the two TaskManagers' samples; the JobManager runs no task
    assert trace.samples.origin == 1795550768.954  # the earliest process's sample origin (the JobManager's)
    assert trace.metrics["cpu_utilization"] == pytest.approx(3.53 / (1795550790.011 - 1795550784.831))
    # any part of the job gives the same operations
    for other in (TM1_PART, TM2_PART):
        again = read_metrics(other)
        assert [op.model_dump() for op in again.operations] == [op.model_dump() for op in trace.operations]


def test_parts_are_ready_once_every_flushed_part_was_written_after_the_end(tmp_path: Path) -> None:
    parts = sorted(CLUSTER.glob(f"crystalperf-flink-{CLUSTER_JOB}.*.json"))
    assert len(parts) == 3 and parts_ready(parts)  # 9395 is a flush, written after the job's end
    assert wait_for_metrics(CLUSTER, parts=3, timeout_s=0) == parts
    early = json.loads(TM2_PART.read_text())
    early["written"] = early["end"]  # flushed before the other process saw the job end
    copy = tmp_path / TM2_PART.name
    copy.write_text(json.dumps(early))
    assert not parts_ready([JM_PART, TM1_PART, copy])


def test_scopes_become_chains_without_the_job_scope() -> None:
    part = load_part(LOCAL_PART)
    assert part.scopes[0].task_name == "" and part.scopes[0].operator_name == ""  # JobManager's job scope
    chains = chains_from_scopes(part.scopes)
    assert list(chains) == [SOURCE_CHAIN, SINK_CHAIN]
    assert sorted(chains[SOURCE_CHAIN].tasks) == ["0", "1"]


def test_a_foreign_or_broken_part_is_bad_input_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "crystalperf-flink-x.1.json"
    for text in ("{not json", '{"format": "other"}', '{"format": "crystalperf-flink-metrics", "scopes": 3}'):
        bad.write_text(text)
        with pytest.raises(BadInputError, match="crystalperf-flink-x.1.json"):
            read_metrics(bad)


def test_finish_runs_as_a_module_and_writes_the_trace_and_report(tmp_path: Path) -> None:
    for path in (LOCAL_PART, *LOCAL.glob("crystalperf-flink-plan-*.json")):
        shutil.copy(path, tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "crystalperf.integrations.flink.finish", str(tmp_path / LOCAL_PART.name),
         "--timeout", "1"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"crystalperf: wrote {tmp_path / 'crystalperf-trace.json.gz'}" in result.stdout
    report = json.loads((tmp_path / "crystalperf-report.json").read_text())
    assert {op["id"] for op in report["operations"]} >= {"chain0", "chain1", "chain0/op1"}


def test_finish_says_so_and_fails_when_the_trace_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(LOCAL_PART, tmp_path)
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("the trace cannot go below a file")
    status = finish_main([str(tmp_path / LOCAL_PART.name), "--out", str(not_a_dir / "out"), "--timeout", "1"])
    captured = capsys.readouterr()
    assert status == 1
    assert "the trace was not written" in captured.err and "wrote" not in captured.out
    assert not (tmp_path / "crystalperf-trace.json.gz").exists()


def test_finish_of_a_missing_part_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "crystalperf-flink-nope.1.json"
    assert finish_main([str(missing), "--timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(missing) in err
