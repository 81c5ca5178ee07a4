"""Real PyFlink local jobs with the crystalperf reporter configured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crystalperf.integrations import flink as cpflink

from .reports import plumbing_top_functions
from .sql_jobs import batch_table_env, create_keyed_tables

ROOT = Path(__file__).resolve().parents[3]


def _run_sql_job(out_dir: Path, rows: int = 1_000_000) -> None:
    from pyflink.common import Configuration

    env = batch_table_env(cpflink.configure(Configuration(), out_dir, analyze=False), parallelism=1)
    # Unpaced, so that the source computes for a second or so and the sampler sees a runnable task thread:
    # at datagen's default rate the source sleeps between rows and the job computes for a few ms.
    create_keyed_tables(env, rows, rows_per_second=1_000_000_000)
    statement = "INSERT INTO snk SELECT k, SUM(SQRT(v * v + 1)) FROM src GROUP BY k"
    cpflink.record_plan(env, out_dir, statement)
    env.execute_sql(statement).wait()


@pytest.fixture(scope="module")
def sql_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pyflink")
    out = tmp_path_factory.mktemp("flink-sql")
    _run_sql_job(out)
    return out


def test_reporter_writes_metrics_of_every_operator(sql_job: Path) -> None:
    files = cpflink.wait_for_metrics(sql_job)
    assert len(files) == 1
    trace = cpflink.read_metrics(files[0])
    operator_names = [c.name for op in trace.operations for c in op.children]
    assert any("src" in name for name in operator_names)
    assert any("snk" in name for name in operator_names)
    assert len(trace.operations) >= 2  # the GROUP BY splits the job into two chains joined by a shuffle
    assert trace.operations[1].parents == [trace.operations[0].id]
    assert "HASH" in trace.operations[1].attributes["ship_strategy"]  # edges from the recorded plan
    assert not any("assumed linear" in w for w in trace.warnings)
    assert trace.operations[0].children[0].name.startswith("Source: src")
    records = {c.name: c.metrics for op in trace.operations for c in op.children}
    assert max(m["records_out"] for m in records.values()) >= 1_000_000  # final values, taken at removal
    assert trace.streaming is not None and trace.streaming.throughput is not None
    # task threads were sampled and aggregated per chain/subtask
    assert trace.samples is not None and sum(trace.samples.count) > 0
    chain_ids = {op.id for op in trace.operations}
    operator_ids = {c.id for op in trace.operations for c in op.children}
    sampled_chains = {k.operation for k in trace.samples.keys if k.thread is None}
    assert trace.operations[0].id in sampled_chains and sampled_chains <= chain_ids
    assert {k.operation for k in trace.samples.keys if k.thread == "operator"} <= operator_ids
    assert any(f.name.startswith("org.apache.flink.") for f in trace.samples.frames)
    # how the job ended, from the job status listener configure() set
    assert trace.application.status == "succeeded" and trace.partial is None
    # the sampler also reads the CPU time of the subtask threads it saw and the process's (throughput model)
    assert trace.operations[0].tasks[0].metrics.get("cpu_time_s", 0) > 0
    # each stack carries the state its thread was in; each task spans its own deployment to its end
    assert trace.samples.states and "runnable" in trace.samples.states
    source, aggregation = trace.operations[:2]
    assert aggregation.tasks[0].start > source.tasks[0].start  # batch: deployed once its input is complete
    assert trace.application.start <= source.start and aggregation.end <= trace.application.end
    assert not any("Python worker" in w for w in trace.warnings)  # SQL built-ins run in the JVM
    assert 0 < trace.metrics["cpu_utilization"] <= (trace.environment.cpu_count or 0)


def test_the_process_cpu_time_is_split_by_thread_kind(sql_job: Path) -> None:
    from crystalperf.integrations.flink.reader import load_part

    part = load_part(cpflink.wait_for_metrics(sql_job)[0])
    kinds = part.thread_kinds
    assert kinds is not None and part.process_cpu_s is not None
    # the task kind is the subtask threads' CPU time; the kinds add up to the process's time
    assert kinds["task"] == pytest.approx(sum(part.thread_cpu.values()), rel=1e-6)
    assert sum(kinds.values()) == pytest.approx(part.process_cpu_s, abs=0.05)
    assert kinds["jit"] > 0 and kinds["other"] > 0  # a fresh JVM compiles; the JobManager runs in it too
    assert kinds["hook"] > 0  # the reporter's sampler and the I/O counters are threads of their own
    # the one TaskManager of the mini cluster carries it in the trace
    (executor,) = cpflink.read_metrics(part.path).environment.executors
    assert executor.thread_cpu is not None and executor.thread_cpu.task == pytest.approx(kinds["task"])
    # a fresh JVM's heap is first touched while the job runs: the process's page faults and its time in the kernel,
    # which is part of its CPU time (counted in 10 ms clock ticks: a short job's may be none)
    assert executor.thread_cpu.minor_faults and executor.thread_cpu.minor_faults > 0
    assert executor.thread_cpu.kernel is not None and 0 <= executor.thread_cpu.kernel <= part.process_cpu_s + 0.05
    # and the part of it in the subtask threads, read from the JVM's clocks (their CPU time less their user time)
    task_kernel = executor.thread_cpu.task_kernel
    assert task_kernel is not None and 0 <= task_kernel <= executor.thread_cpu.task + 0.05
    # and the collector the JVM's ergonomics chose: the serial one below two processors, G1 from two
    collector = executor.garbage_collector
    assert collector is not None and collector.option is None and collector.processors == part.cpu_count
    assert collector.family == ("g1" if part.cpu_count >= 2 else "serial")
    # and the heap its subtasks shared: its size and what each generation's collections did over the job
    assert collector.heap_max_bytes is not None and collector.heap_max_bytes > 0
    assert collector.young_collections is not None and collector.old_collections is not None
    assert collector.young_collection_s is not None and collector.old_collection_s is not None


def test_finish_writes_a_report_naming_the_operators_and_a_bottleneck(sql_job: Path, tmp_path: Path) -> None:
    metrics_file = cpflink.wait_for_metrics(sql_job)[0]
    trace_path = cpflink.finish(metrics_file, tmp_path)
    assert trace_path.exists()
    report = json.loads((tmp_path / "crystalperf-report.json").read_text())
    # what the reporter cost, as it measured itself over the job: in the trace and the report
    hook = cpflink.read_metrics(metrics_file).hook
    assert hook is not None and hook.processes[0].source.startswith("minicluster:")
    process = hook.processes[0]
    assert 0 < process.cpu_s < (process.process_cpu_s or 0.0)
    assert {"sampler", "callbacks"} <= set(process.parts) and process.samples_taken
    assert report["hook_cost"]["cpu_s"] > 0 and 0 < report["hook_cost"]["share"] < 1
    # what the subtasks shared: the TaskManager's CPU by kind of thread (on a job this short, the compilers' as much
    # as the subtasks'); its counters may span too little of a job this short for the cores' figures
    machine = report["machine"]
    assert "cores" not in machine or machine["cores"] >= 1
    threads = machine["threads"]
    assert threads["task"] > 0 and threads["jit"] > 0, threads
    assert "the tasks" in machine["sentence"] and "the JIT compilers" in machine["sentence"]
    # an unpaced generated source, square roots and a GROUP BY in memory: nothing but computing
    assert report["bottleneck"]["resource"] == "cpu"
    names = json.dumps(report["operations"])
    assert "src" in names and "snk" in names
    assert plumbing_top_functions(report) == []


def test_a_failing_job_still_leaves_what_was_collected(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    from pyflink.common import Configuration

    config = cpflink.configure(Configuration(), tmp_path, analyze=False)
    config.set_string("restart-strategy.type", "none")
    env = batch_table_env(config, parallelism=1)
    env.execute_sql("CREATE TABLE src (k INT) WITH ('connector'='datagen', 'number-of-rows'='1000')")
    env.execute_sql("CREATE TABLE snk (k INT) WITH ('connector'='blackhole')")
    with pytest.raises(Exception):  # noqa: B017 - Flink wraps the cast failure in a Py4J error
        env.execute_sql("INSERT INTO snk SELECT CAST(CONCAT('x', CAST(k AS STRING)) AS INT) FROM src").wait()
    files = cpflink.wait_for_metrics(tmp_path)
    assert len(files) == 1
    trace = cpflink.read_metrics(files[0])
    assert any("src" in c.name for op in trace.operations for c in op.children)
    # the job status listener saw it fail, and with what
    assert trace.application.status == "failed"
    assert any(w.startswith("the job failed: ") and "NumberFormatException" in w for w in trace.warnings), \
        trace.warnings


def test_cpu_heavy_map_is_classified_cpu_bound(tmp_path: Path) -> None:
    # The heavy "map" is a SQL Calc of Java built-ins (hashing): Python UDF workers are not sampled yet,
    # so their compute would be invisible in the task threads' stacks.
    pytest.importorskip("pyflink")
    from pyflink.common import Configuration

    env = batch_table_env(cpflink.configure(Configuration(), tmp_path, analyze=False), parallelism=1)
    create_keyed_tables(env, 40000, sink_value="h STRING")
    statement = "INSERT INTO snk SELECT k, SHA512(REPEAT(SHA256(CAST(v AS STRING)), 400)) FROM src"
    assert cpflink.record_plan(env, tmp_path, statement) is not None
    env.execute_sql(statement).wait()
    cpflink.finish(cpflink.wait_for_metrics(tmp_path)[0], tmp_path)
    report = json.loads((tmp_path / "crystalperf-report.json").read_text())
    chain = next(op for op in report["operations"] if "Calc" in op["name"] and "/" not in op["id"])
    calc = next(op for op in report["operations"] if op["name"].startswith("Calc") and "/" in op["id"])
    # the chain's stacks are split between its operators by their ChainingOutput.pushToOperator depth
    for heavy in (chain, calc):
        assert heavy["vector_source"] == "samples"
        vector = heavy["vector"]
        assert vector["cpu"] > max(vector["disk"], vector["network"])
    calc_functions = [f["name"] for f in calc["top_functions"]]
    assert any(
        name.startswith(("java.security.", "sun.security.", "org.apache.flink.table."))
        for name in calc_functions
    )
    assert report["bottleneck"]["resource"] == "cpu"
    assert plumbing_top_functions(report) == []
