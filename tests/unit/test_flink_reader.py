"""The Flink reader and trace assembly on parts recorded from real PyFlink jobs (tests/data/flink-*), without
PyFlink. Every expected number below was read off the recorded JSON by hand (scopes, metrics, samples).

flink-sql-groupby: local mini cluster, parallelism 2, ``INSERT INTO snk SELECT k, SUM(SQRT(v * v + 1)) FROM
src GROUP BY k`` over 20,000 datagen rows (at datagen's default 10,000 rows/s), 10 keys; one part.
flink-cluster-groupby: the same job on a standalone cluster (JobManager + 2 TaskManagers): three parts of one
job. Both are format version 2 (thread states, task lifetimes, classpath); a version 1 part is made from
one by dropping those.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crystalperf.core import trace as t
from crystalperf.core.errors import BadInputError
from crystalperf.integrations.flink import read_metrics, wait_for_metrics
from crystalperf.integrations.flink.assemble import (
    NO_PLAN_WARNING,
    SOURCE_WAITS_ON,
    chains_from_scopes,
    task_metrics,
)
from crystalperf.integrations.flink.finish import main as finish_main
from crystalperf.integrations.flink.reader import (
    Scope,
    find_plan,
    job_cpus,
    load_job,
    load_part,
    parts_ready,
    sibling_parts,
)

DATA = Path(__file__).resolve().parents[1] / "data"
LOCAL = DATA / "flink-sql-groupby"
CLUSTER = DATA / "flink-cluster-groupby"
LOCAL_PART = LOCAL / "crystalperf-flink-3cb35e1ada8e4775cd72873da4568dde.21304.json"
CLUSTER_JOB = "2bd6c44ddf7c5638605ebf174ae3563d"
JM_PART = CLUSTER / f"crystalperf-flink-{CLUSTER_JOB}.28777.json"  # JobManager: the job scope only
TM1_PART = CLUSTER / f"crystalperf-flink-{CLUSTER_JOB}.29404.json"  # source chain, subtask 1
TM2_PART = CLUSTER / f"crystalperf-flink-{CLUSTER_JOB}.30466.json"  # source chain 0 + aggregation chain 0

SOURCE_CHAIN = "Source: src[7] -> Calc[8] -> HashAggregate[9]"
SINK_CHAIN = "HashAggregate[11] -> snk[12]: Writer"
START, END = 1795556849.704, 1795556853.376  # the local part's "start" and "end"
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
    assert local.application.id == "3cb35e1ada8e4775cd72873da4568dde"
    assert local.application.name == "insert-into_default_catalog.default_database.snk"
    assert (local.application.start, local.application.end) == (START, END)


def test_edges_and_ship_strategy_come_from_the_recorded_plan(local: t.Trace) -> None:
    source, sink = local.operations
    assert source.parents == [] and sink.parents == ["chain0"]
    # the plan's HashAggregate[3] -> HashAggregate[5] edge (planner ids [1]..[6] matched to the job's [7]..[12])
    assert sink.attributes["ship_strategy"] == "chain0: HASH[k]"
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
    assert all("ship_strategy" not in op.attributes for op in trace.operations)
    # operators ordered by where the task name lists them
    assert [c.name for c in trace.operations[0].children] == ["Source: src[7]", "Calc[8]", "HashAggregate[9]"]


def test_tasks_measured_times_and_lifetimes(local: t.Trace) -> None:
    source, sink = local.operations
    assert [task.id for task in source.tasks] == [f"{SOURCE_CHAIN}#0", f"{SOURCE_CHAIN}#1"]
    # The legacy datagen source reports no busy time (NaN, dropped) and an idle time of 0 that says nothing:
    # it ran from its deployment ("added") to its end ("removed"); its threads' CPU time is measured.
    assert [task.metrics for task in source.tasks] == [
        {"run_time_s": pytest.approx(1795556852.949 - 1795556850.01), "backpressured_time_s": 0.0,
         "network_bytes": 382.0, "cpu_time_s": 0.08578341},
        {"run_time_s": pytest.approx(1795556852.946 - 1795556850.107), "backpressured_time_s": 0.0,
         "network_bytes": 382.0, "cpu_time_s": 0.190828879},
    ]
    assert [(task.start, task.end) for task in source.tasks] == [(1795556850.01, 1795556852.949),
                                                                 (1795556850.107, 1795556852.946)]
    # accumulateBusyTimeMs 23 + accumulateIdleTimeMs 4 + accumulateBackPressuredTimeMs 0; numBytesIn 746 +
    # numBytesOut 0; the thread's 0.042 s of CPU (generated code compiled before the mailbox loop) bounded by
    # the busy time
    assert [task.metrics for task in sink.tasks] == [
        {"run_time_s": pytest.approx(0.027), "idle_time_s": 0.004, "backpressured_time_s": 0.0,
         "network_bytes": 746.0, "cpu_time_s": 0.023},
    ]
    assert [(task.start, task.end) for task in sink.tasks] == [(1795556853.018, 1795556853.198)]
    # a chain spans its tasks, and its operators with it
    assert (source.start, source.end) == (1795556850.01, 1795556852.949)
    assert (sink.start, sink.end) == (1795556853.018, 1795556853.198)
    assert {(c.start, c.end) for c in sink.children} == {(sink.start, sink.end)}
    # the source mostly did not run (datagen's rate limit): it and its head operator waited on its input
    assert source.attributes["waits_on"] == SOURCE_WAITS_ON
    assert source.children[0].attributes == {"waits_on": SOURCE_WAITS_ON} and not source.children[1].attributes
    assert sink.attributes["waits_on"] == f"its input from {SOURCE_CHAIN}"
    assert local.environment.cpu_count == 2
    assert local.environment.scaling == ["parallelism"]  # subtasks run side by side: parallelism resizes the job
    assert local.metrics == {"cpu_utilization": pytest.approx(1.59 / DURATION)}  # process_cpu_s 1.59


def test_the_recorded_classpath_reaches_the_trace(local: t.Trace) -> None:
    # java.class.path (PyFlink's lib/ and opt/flink-python) and the job's class loader (pipeline.jars)
    names = [Path(entry).name for entry in local.environment.classpath]
    assert len(names) == 17
    assert {"flink-dist-2.3.0.jar", "flink-table-runtime-2.3.0.jar", "flink-python-2.3.0.jar",
            "crystalperf-flink.jar"} <= set(names)


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
    # 24 rows, 52 samples: 26 + 25 on the source chain's two subtasks, 1 on the sink chain
    assert chains == {("chain0", f"{SOURCE_CHAIN}#0", None): 26, ("chain0", f"{SOURCE_CHAIN}#1", None): 25,
                      ("chain1", f"{SINK_CHAIN}#0", None): 1}
    # by nested ChainingOutput.pushToOperator frames: 49 samples at depth 0, one at depth 1, one at 2
    by_operator: dict[str, int] = {}
    for (operation, _, _), count in operators.items():
        by_operator[operation] = by_operator.get(operation, 0) + count
    assert by_operator == {"chain0/op0": 49, "chain0/op1": 1, "chain0/op2": 1, "chain1/op0": 1}
    assert samples.origin == 1795556846.806 and samples.bucket_s == 1.0 and samples.interval_s == 0.1
    assert any(f.name == "org.apache.flink.streaming.api.functions.source.datagen.DataGeneratorSource.run"
               for f in samples.frames)


def test_each_stack_carries_its_threads_state(local: t.Trace) -> None:
    samples = local.samples
    assert samples is not None and len(samples.states) == len(samples.stacks)
    by_state: dict[str, int] = {}
    for key_index, stack, count in zip(samples.key, samples.stack, samples.count, strict=True):
        key = samples.keys[key_index]
        if key.thread is None and key.task == f"{SOURCE_CHAIN}#0":
            by_state[samples.states[stack]] = by_state.get(samples.states[stack], 0) + count
    assert by_state == {"runnable": 5, "timed_waiting": 17, "blocked": 2, "waiting": 2}
    # the rate-limited source sleeps in datagen's throttle: the same frames are one stack per state
    sleeping = [i for i, stack in enumerate(samples.stacks)
                if samples.frames[stack[0]].name == "java.lang.Thread.sleep"]
    assert sleeping and {samples.states[i] for i in sleeping} == {"timed_waiting"}
    interned = [(tuple(stack), samples.states[i]) for i, stack in enumerate(samples.stacks)]
    assert len(set(interned)) == len(interned)


def test_a_version_1_part_reads_with_unknown_states_and_the_jobs_span(tmp_path: Path) -> None:
    doc = json.loads(LOCAL_PART.read_text())
    doc["version"] = 1
    for scope in doc["scopes"]:
        scope.pop("added", None)
        scope.pop("removed", None)
    doc["samples"] = [row[:5] for row in doc["samples"]]
    del doc["classpath"]
    old = tmp_path / LOCAL_PART.name
    old.write_text(json.dumps(doc))
    trace = read_metrics(old)
    assert trace.samples is not None and trace.samples.states == []
    assert sum(trace.samples.count) == 52 + 51 + 1  # chains, and their operators again
    assert trace.environment.classpath == []
    assert all((task.start, task.end) == (START, END) for op in trace.operations for task in op.tasks)
    assert trace.operations[0].tasks[0].metrics["run_time_s"] == pytest.approx(DURATION)


def test_chained_operators_split_their_chains_busy_time_by_samples(local: t.Trace) -> None:
    source, sink = local.operations
    run, cpu = 1795556852.949 - 1795556850.01, 0.08578341  # the longest subtask of the source chain
    assert [c.metrics["run_time_s"] for c in source.children] == pytest.approx(
        [run * 49 / 51, run * 1 / 51, run * 1 / 51])
    # its measured parts split with it
    assert [c.metrics["cpu_time_s"] for c in source.children] == pytest.approx(
        [cpu * 49 / 51, cpu * 1 / 51, cpu * 1 / 51])
    assert [c.metrics["run_time_s"] for c in sink.children] == pytest.approx([0.027, 0.0])
    assert [c.metrics["idle_time_s"] for c in sink.children] == pytest.approx([0.004, 0.0])


def test_streaming_figures(local: t.Trace) -> None:
    assert local.streaming is not None
    assert local.streaming.latency_s == pytest.approx(DURATION)
    assert local.streaming.input_rate == pytest.approx(20000 / DURATION)  # the source operator's records out
    assert local.streaming.throughput == pytest.approx(10 / DURATION)  # the sink writer's records in


def test_the_cpus_of_a_cluster_job_are_its_taskmanager_hosts_cpus() -> None:
    jobmanager = load_part(JM_PART)
    taskmanagers = [load_part(p) for p in sibling_parts(jobmanager.path, jobmanager.job_id)]
    # recorded on one machine: both TaskManagers on 127.0.0.1 share its 2 CPUs
    assert job_cpus([jobmanager, *taskmanagers]) == 2 and load_job(JM_PART).cpu_count == 2
    # on two hosts of 4 CPUs each the job has 8; the JobManager's process runs no task and adds none
    apart = [dataclasses.replace(tm, cpu_count=4, scopes=[dataclasses.replace(s, host=f"10.0.0.{i}") for s in tm.scopes])
             for i, tm in enumerate(taskmanagers)]
    assert job_cpus([jobmanager, *apart]) == 8
    assert job_cpus([jobmanager]) == 2  # a part without task scopes counts when it is all there is


def test_the_three_parts_of_a_cluster_job_merge_into_one_trace() -> None:
    merged = load_job(JM_PART)
    assert merged.parts == 3
    assert (merged.start, merged.end) == (1795556981.965, 1795556986.795)  # earliest start, latest end
    assert merged.process_cpu_s == pytest.approx(0.71 + 1.11 + 1.48)
    assert len(merged.scopes) == 1 + 4 + 7 and len(merged.samples) == 0 + 18 + 13
    assert len(merged.classpath) == 15  # the cluster's lib/: the same in every process, listed once
    trace = read_metrics(JM_PART)
    source, sink = trace.operations
    assert (source.name, sink.name) == (SOURCE_CHAIN, SINK_CHAIN) and sink.parents == ["chain0"]
    # subtask 0 ran on one TaskManager, subtask 1 on the other
    assert [(task.index, task.metrics["cpu_time_s"]) for task in source.tasks] == [(0, 0.333559495),
                                                                                  (1, 0.383589975)]
    assert sink.tasks[0].metrics["run_time_s"] == pytest.approx(0.065 + 0.084)  # busy + idle
    # each subtask names the TaskManager its scopes were registered in, and the environment lists both
    assert [(task.index, task.executor) for task in source.tasks] == [(0, "127.0.0.1:42641-d2fa04"),
                                                                     (1, "127.0.0.1:33027-7883d4")]
    assert trace.environment.hosts == ["127.0.0.1"]
    assert sorted(e.id for e in trace.environment.executors) == ["127.0.0.1:33027-7883d4", "127.0.0.1:42641-d2fa04"]
    assert _children(trace)["Source: src[7]"].metrics["records_out"] == 20000.0
    assert trace.samples is not None
    chain_samples = sum(count for key, count in zip(trace.samples.key, trace.samples.count, strict=True)
                        if trace.samples.keys[key].thread is None)
    assert chain_samples == 33 + 30  # the two TaskManagers' samples; the JobManager runs no task
    assert trace.samples.origin == 1795556945.461  # the earliest process's sample origin (the JobManager's)
    assert trace.metrics["cpu_utilization"] == pytest.approx(3.30 / (1795556986.795 - 1795556981.965))
    # any part of the job gives the same operations
    for other in (TM1_PART, TM2_PART):
        again = read_metrics(other)
        assert [op.model_dump() for op in again.operations] == [op.model_dump() for op in trace.operations]


def test_parts_are_ready_once_every_flushed_part_was_written_after_the_end(tmp_path: Path) -> None:
    parts = sorted(CLUSTER.glob(f"crystalperf-flink-{CLUSTER_JOB}.*.json"))
    assert len(parts) == 3 and parts_ready(parts)  # 30466 is a flush, written after the job's end
    assert wait_for_metrics(CLUSTER, parts=3, timeout_s=0) == parts
    early = json.loads(TM2_PART.read_text())
    early["written"] = early["end"]  # flushed before the other process saw the job end
    copy = tmp_path / TM2_PART.name
    copy.write_text(json.dumps(early))
    assert not parts_ready([JM_PART, TM1_PART, copy])


def test_parts_without_thread_roles_read_every_sample_as_the_task_threads() -> None:
    # the golden parts predate roles: six fields a row
    assert {row.thread for row in load_part(LOCAL_PART).samples} == {""}


def test_a_fetched_sources_idle_time_is_left_to_its_fetchers_samples() -> None:
    values = {"accumulateBusyTimeMs": 1000.0, "accumulateIdleTimeMs": 9000.0, "accumulateBackPressuredTimeMs": 500.0}
    scope = Scope("Source: lines[1] -> Calc[2]", "", "0", 0, values)
    # a task thread idle for its input: measured waiting, and its CPU time bounded by its busy time
    assert task_metrics(scope, 4.0, 20.0) == {"run_time_s": 10.5, "idle_time_s": 9.0, "backpressured_time_s": 0.5,
                                              "cpu_time_s": 1.0}
    # a FLIP-27 source whose fetcher threads were sampled: the idle seconds were theirs to read in; the fetchers'
    # CPU time (in the subtask's) is bounded by the time the subtask was not back-pressured
    assert task_metrics(scope, 4.0, 20.0, fetched=True) == {"run_time_s": 10.5, "backpressured_time_s": 0.5,
                                                            "cpu_time_s": 4.0}
    assert task_metrics(scope, 12.0, 20.0, fetched=True)["cpu_time_s"] == 10.0
    # version 7: the fetchers' part of the threads' CPU time is known; the threads' time is kept whole beside the
    # capped CPU time (they ran side by side: 12 CPU-s in a 10 s run)
    assert task_metrics(scope, 12.0, 20.0, fetched=True, fetcher_cpu=7.0) == {
        "run_time_s": 10.5, "backpressured_time_s": 0.5, "cpu_time_s": 10.0, "threads_cpu_time_s": 12.0,
        "reader_cpu_time_s": 7.0}


def test_a_parts_fetcher_cpu_is_read_where_its_rows_have_it(tmp_path: Path) -> None:
    doc = json.loads(LOCAL_PART.read_text())
    name, subtask, seconds = doc["thread_cpu"][0][:3]
    doc["thread_cpu"][0] = [name, subtask, seconds, seconds / 2]
    part_path = tmp_path / LOCAL_PART.name
    part_path.write_text(json.dumps(doc))
    part = load_part(part_path)
    assert part.fetcher_cpu == {(name, subtask): pytest.approx(seconds / 2)}
    assert load_part(LOCAL_PART).fetcher_cpu == {}  # three figures a row: no fetchers measured
    doc["thread_cpu"][0] = [name, subtask]
    part_path.write_text(json.dumps(doc))
    with pytest.raises(BadInputError, match="thread_cpu row"):
        load_part(part_path)


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


def test_a_finisher_does_not_queue_for_ever_behind_a_stuck_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    import fcntl

    # the package re-exports the function finish() under the module's name
    finish_module = sys.modules["crystalperf.integrations.flink.finish"]
    shutil.copy(LOCAL_PART, tmp_path)
    monkeypatch.setattr(finish_module, "LOCK_TIMEOUT_S", 0.5)
    job = LOCAL_PART.name.removeprefix("crystalperf-flink-").split(".")[0]
    # Another process's analysis of the same job, stuck with the lock held (an open file of its own: flock
    # locks belong to open files, so this one conflicts with the finisher's as another process's would).
    with open(tmp_path / f"crystalperf-flink-{job}.lock", "a+b") as stuck:
        fcntl.flock(stuck, fcntl.LOCK_EX)
        started = time.monotonic()
        status = finish_main([str(tmp_path / LOCAL_PART.name), "--timeout", "1"])
        waited = time.monotonic() - started
    err = capsys.readouterr().err
    assert status == 1 and waited < 30
    assert "held this lock for more than 0.5 s" in err and f"crystalperf-flink-{job}.lock" in err
    assert not (tmp_path / "crystalperf-trace.json.gz").exists()


def _with_kinds(part: Path, out: Path, kinds: dict[str, object] | None) -> None:
    doc = json.loads(part.read_text())
    if kinds is not None:
        doc["thread_kinds_cpu_s"] = kinds
    (out / part.name).write_text(json.dumps(doc))


def test_the_cpu_split_by_thread_kind_reaches_each_taskmanager(tmp_path: Path) -> None:
    shutil.copytree(CLUSTER, tmp_path, dirs_exist_ok=True)
    # process CPU: JobManager 0.71, TaskManagers 1.11 and 1.48 (the golden parts, written before the split)
    _with_kinds(JM_PART, tmp_path, {"gc": 0.01, "jit": 0.2, "other": 0.5})
    _with_kinds(TM1_PART, tmp_path, {"task": 0.38, "network": 0.13, "gc": 0.1, "jit": 0.3, "other": 0.2,
                                     "unknown-kind": 7.0})
    _with_kinds(TM2_PART, tmp_path, {"task": 0.6, "network": 0.2, "gc": 0.08, "jit": 0.4, "other": 0.2})
    merged = load_job(tmp_path / JM_PART.name)
    # a missing kind is 0, an unknown one left out
    assert merged.thread_kinds == pytest.approx({"task": 0.98, "network": 0.33, "gc": 0.19, "jit": 0.9,
                                                 "other": 0.9, "gc_concurrent": 0.0, "hook": 0.0})
    trace = read_metrics(tmp_path / JM_PART.name)
    split = {e.id: e.thread_cpu for e in trace.environment.executors}
    # 29404 is TaskManager 127.0.0.1:33027-7883d4, 30466 127.0.0.1:42641-d2fa04; the JobManager is no executor
    assert split["127.0.0.1:33027-7883d4"] == t.ThreadCpu(task=0.38, network=0.13, gc=0.1, jit=0.3, other=0.2)
    assert split["127.0.0.1:42641-d2fa04"] == t.ThreadCpu(task=0.6, network=0.2, gc=0.08, jit=0.4, other=0.2)
    assert split["127.0.0.1:42641-d2fa04"].total == pytest.approx(1.48)
    # the trace keeps it through a save and load
    t.save_trace(trace, tmp_path / "trace.json")
    assert t.load_trace(tmp_path / "trace.json").environment.executors == trace.environment.executors


def test_a_taskmanagers_page_faults_and_kernel_time_reach_its_thread_cpu(tmp_path: Path) -> None:
    shutil.copytree(CLUSTER, tmp_path, dirs_exist_ok=True)
    for part, kinds, faults in ((TM1_PART, {"task": 0.38, "other": 0.2}, [278698, 0.82, 0.31]),
                                (TM2_PART, {"task": 0.6, "other": 0.2}, None)):
        doc = json.loads(part.read_text())
        doc["thread_kinds_cpu_s"] = kinds
        if faults is not None:
            doc["process_faults"] = faults
        (tmp_path / part.name).write_text(json.dumps(doc))
    trace = read_metrics(tmp_path / JM_PART.name)
    split = {e.id: e.thread_cpu for e in trace.environment.executors}
    assert split["127.0.0.1:33027-7883d4"] == t.ThreadCpu(task=0.38, other=0.2, kernel=0.82, minor_faults=278698,
                                                          task_kernel=0.31)
    # not a kind of thread: the process's total is its kinds'
    assert split["127.0.0.1:33027-7883d4"].total == pytest.approx(0.58)
    assert split["127.0.0.1:42641-d2fa04"] == t.ThreadCpu(task=0.6, other=0.2)


def test_a_part_without_its_task_threads_kernel_time_keeps_the_processs(tmp_path: Path) -> None:
    shutil.copytree(CLUSTER, tmp_path, dirs_exist_ok=True)
    doc = json.loads(TM1_PART.read_text())
    doc["thread_kinds_cpu_s"] = {"task": 0.38, "other": 0.2}
    doc["process_faults"] = [278698, 0.82]
    (tmp_path / TM1_PART.name).write_text(json.dumps(doc))
    cpu = {e.id: e.thread_cpu for e in read_metrics(tmp_path / JM_PART.name).environment.executors}
    assert cpu["127.0.0.1:33027-7883d4"] == t.ThreadCpu(task=0.38, other=0.2, kernel=0.82, minor_faults=278698)


@pytest.mark.parametrize("faults", [[1.0], {"minor": 1}, [-5, 0.1], ["x", 0.1], [1, float("inf")],
                                    [1, 0.1, "x"], [1, 0.1, 0.1, 0.1]])
def test_malformed_page_faults_are_bad_input_naming_the_file(tmp_path: Path, faults: object) -> None:
    doc = json.loads(TM1_PART.read_text())
    doc["process_faults"] = faults
    bad = tmp_path / TM1_PART.name
    bad.write_text(json.dumps(doc))
    with pytest.raises(BadInputError, match=TM1_PART.name):
        load_part(bad)


def test_parts_without_the_split_read_as_before(tmp_path: Path) -> None:
    before = read_metrics(JM_PART)
    assert all(e.thread_cpu is None for e in before.environment.executors)
    assert load_job(JM_PART).thread_kinds is None
    # one part without it: the job's total is unknown, the TaskManager that has it keeps it
    shutil.copytree(CLUSTER, tmp_path, dirs_exist_ok=True)
    _with_kinds(TM1_PART, tmp_path, {"task": 0.38, "network": 0.13, "gc": 0.1, "jit": 0.3, "other": 0.2})
    assert load_job(tmp_path / JM_PART.name).thread_kinds is None
    trace = read_metrics(tmp_path / JM_PART.name)
    assert {e.id: e.thread_cpu is not None for e in trace.environment.executors} == {
        "127.0.0.1:33027-7883d4": True, "127.0.0.1:42641-d2fa04": False}
    # everything else is what the parts without the split gave
    same = {"environment": True, "application": {"output_dir"}}
    assert trace.model_dump(exclude=same) == before.model_dump(exclude=same)


@pytest.mark.parametrize("kinds", [[1.0], {"task": -1.0}, {"task": "x"}, {"gc": float("inf")}, "task"])
def test_a_malformed_split_is_bad_input_naming_the_file(tmp_path: Path, kinds: object) -> None:
    doc = json.loads(TM1_PART.read_text())
    doc["thread_kinds_cpu_s"] = kinds
    bad = tmp_path / TM1_PART.name
    bad.write_text(json.dumps(doc))
    if kinds == {"task": -1.0}:
        assert load_part(bad).thread_kinds == {"task": 0.0, "network": 0.0, "gc": 0.0, "jit": 0.0, "other": 0.0,
                                               "gc_concurrent": 0.0, "hook": 0.0}
        return
    with pytest.raises(BadInputError, match=TM1_PART.name):
        load_part(bad)


def _with_collector(part: Path, out: Path, collector: object, cpu_count: int = 2) -> None:
    doc = json.loads(part.read_text())
    doc["collector"], doc["cpu_count"] = collector, cpu_count
    doc["thread_kinds_cpu_s"] = {"task": 0.38, "gc": 0.05, "gc_concurrent": 0.04, "other": 0.2}
    (out / part.name).write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("collector", "cpu_count", "expected"),
    [
        ({"names": ["G1 Young Generation", "G1 Concurrent GC", "G1 Old Generation"], "option": None}, 2,
         t.GarbageCollector(family="g1", option=None, processors=2)),
        ({"names": ["Copy", "MarkSweepCompact"], "option": None}, 1, t.GarbageCollector(family="serial", processors=1)),
        ({"names": ["PS Scavenge", "PS MarkSweep"], "option": "-XX:+UseParallelGC"}, 8,
         t.GarbageCollector(family="parallel", option="-XX:+UseParallelGC", processors=8)),
        # beans of no known family, or of two; an option that is not one is dropped
        ({"names": ["Epsilon Heap"], "option": "rm -rf /"}, 2, t.GarbageCollector(processors=2)),
        ({"names": ["G1 Young Generation", "Copy"]}, 0, t.GarbageCollector()),
    ],
)
def test_the_collector_reaches_its_taskmanager(tmp_path: Path, collector: dict[str, object], cpu_count: int,
                                               expected: t.GarbageCollector) -> None:
    shutil.copytree(CLUSTER, tmp_path, dirs_exist_ok=True)
    _with_collector(TM1_PART, tmp_path, collector, cpu_count)
    trace = read_metrics(tmp_path / JM_PART.name)
    found = {e.id: e for e in trace.environment.executors}
    tm = found["127.0.0.1:33027-7883d4"]
    assert tm.garbage_collector == expected
    assert tm.thread_cpu is not None and (tm.thread_cpu.gc, tm.thread_cpu.gc_concurrent) == (0.05, 0.04)
    assert found["127.0.0.1:42641-d2fa04"].garbage_collector is None  # its part does not say
    t.save_trace(trace, tmp_path / "trace.json")
    assert t.load_trace(tmp_path / "trace.json").environment.executors == trace.environment.executors


@pytest.mark.parametrize("collector", ["G1", {"names": "G1 Young Generation"}, ["Copy"]])
def test_a_malformed_collector_is_bad_input_naming_the_file(tmp_path: Path, collector: object) -> None:
    _with_collector(TM1_PART, tmp_path, collector)
    with pytest.raises(BadInputError, match=TM1_PART.name):
        load_part(tmp_path / TM1_PART.name)


@pytest.mark.parametrize("status, failure, application, warning", [
    ("FINISHED", None, "succeeded", None),
    ("FAILED", "org.apache.flink.runtime.JobException: Recovery is suppressed (caused by "
               "java.lang.NumberFormatException: For input string: \"x1\")", "failed",
     "the job failed: org.apache.flink.runtime.JobException: Recovery is suppressed (caused by "
     "java.lang.NumberFormatException: For input string: \"x1\")"),
    ("CANCELED", None, "cancelled", "the job was cancelled: the trace ends where it stopped, not where its input did"),
    ("RUNNING", None, "unknown", None),  # no terminal state: not a status a part may carry
    (42, {"a": 1}, "unknown", None),  # hostile values: read as not recorded
    (None, None, "unknown", None),  # parts before format 10, or without the listener
])
def test_how_the_job_ended_comes_from_the_jobmanagers_part(tmp_path: Path, status: object, failure: object,
                                                           application: str, warning: str | None) -> None:
    for part in (JM_PART, TM1_PART, TM2_PART):
        doc = json.loads(part.read_text())
        if part == JM_PART and status is not None:
            doc.update(status=status, **({"failure": failure} if failure is not None else {}))
        (tmp_path / part.name).write_text(json.dumps(doc))
    trace = read_metrics(tmp_path / TM1_PART.name)  # merged from any part: the JobManager's carries it
    assert trace.application.status == application
    said = [w for w in trace.warnings if w.startswith("the job ")]
    assert said == ([warning] if warning else [])


def test_a_part_written_while_the_job_ran_makes_a_partial_trace(tmp_path: Path) -> None:
    doc = json.loads(LOCAL_PART.read_text())
    doc["cut"] = "the JVM exited while the job ran (its driver or cluster was stopped)"
    (tmp_path / LOCAL_PART.name).write_text(json.dumps(doc))
    trace = read_metrics(tmp_path / LOCAL_PART.name)
    assert trace.partial == ("the JVM exited while the job ran (its driver or cluster was stopped): the trace ends "
                             "with the reporter's last record")
    assert trace.application.status == "cancelled"
    doc["status"] = "FAILED"  # the listener saw how it ended before the exit: that is what the trace says
    (tmp_path / LOCAL_PART.name).write_text(json.dumps(doc))
    trace = read_metrics(tmp_path / LOCAL_PART.name)
    assert trace.application.status == "failed" and trace.partial is None
    assert read_metrics(LOCAL_PART).partial is None
