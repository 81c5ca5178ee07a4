"""The listener + plugin on real local Spark jobs: the trace, the report, the Python worker samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.profile.outside import TRIGGER_LATE_S
from crystalperf.core.trace import SCHEMA_VERSION, load_trace
from crystalperf.integrations.spark.assemble import METRIC_PYTHON_CPU_WAIT_TIME

# Linux with schedstats: task threads and PySpark workers record their run-queue delay (cpu_wait_s).
SCHEDSTAT = Path("/proc/thread-self/schedstat").exists()


def _top_names(op: dict) -> list[str]:
    return [f["name"] for f in op.get("top_functions", [])]


def _assert_run_queue_delay_recorded(tasks: list[tr.Task], *, python: bool = False, every_task: bool = False) -> None:
    """The tasks the hook measured have their run-queue delay where the kernel says it (none where it cannot),
    within the run time together with the CPU time. It measures a thread's first task and, once a time bucket
    (a second), the next task to start on each thread: ``every_task`` where every task follows a task that lasted
    longer than a bucket."""
    assert tasks
    measured = [task for task in tasks if tr.METRIC_CPU_WAIT_TIME in task.metrics]
    if not SCHEDSTAT:
        assert not measured
        return
    assert measured
    if every_task:
        assert len(measured) == len(tasks), [t.id for t in tasks if t not in measured]
    for task in measured:
        m = task.metrics
        assert m[tr.METRIC_CPU_WAIT_TIME] >= 0, m
        # Spark counts a task's run time in whole milliseconds, its CPU time in nanoseconds
        assert m[tr.METRIC_CPU_TIME] + m[tr.METRIC_CPU_WAIT_TIME] <= m[tr.METRIC_RUN_TIME] + 1e-3, m
        if python:
            assert m[METRIC_PYTHON_CPU_WAIT_TIME] >= 0, m


def test_bundled_jar_matches_its_sources() -> None:
    import hatch_build

    spec = next(j for j in hatch_build.JARS if j.name == "spark")
    assert hatch_build.is_current(spec), "rebuild the jar: python hatch_build.py"


def test_shuffle_spill_parquet_job_and_event_log(run_app, tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    result = run_app(f'''
        spark = session(**{{"spark.shuffle.spill.numElementsForceSpillThreshold": 20000,
                           "spark.eventLog.enabled": "true", "spark.eventLog.dir": "{events}",
                           "spark.eventLog.compress": "false"}})
        df = spark.range(0, 400_000).selectExpr("id % 997 AS k", "id * 7 % 10007 AS v")
        df.repartition(2).sortWithinPartitions("v").write.mode("overwrite").parquet("{tmp_path}/out/sorted")
        back = spark.read.parquet("{tmp_path}/out/sorted")
        print("GROUPS", back.groupBy("k").count().count())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GROUPS 997" in result.stdout
    # No spark.crystalperf.outputDir: the trace goes next to the application's last output, in a directory of
    # this application's own (other applications may write there too).
    (out,) = (tmp_path / "out").glob("crystalperf-local-*")
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert trace.application.framework == "spark" and trace.application.status == "succeeded"
    # the listener writes the schema version spark_conf passed it (spark.crystalperf.schemaVersion)
    assert trace.schema_version == SCHEMA_VERSION
    jobs = trace.operations
    assert jobs and all(j.kind == "job" for j in jobs)
    stages = [s for j in jobs for s in j.children]
    assert all(s.kind == "stage" for s in stages)
    assert any(s.parents for s in stages), "a shuffle makes a stage depend on another"
    tasks = [t for s in stages for t in s.tasks]
    assert tasks and all(t.executor == "driver" for t in tasks)
    total = {k: sum(t.metrics.get(k, 0.0) for t in tasks) for k in
             ("spill_disk_bytes", "output_bytes", "input_bytes", "shuffle_write_bytes", "run_time_s", "cpu_time_s")}
    assert all(v > 0 for v in total.values()), total
    assert trace.metrics["spill_disk_bytes"] > 0
    # local master: the process's storage I/O is recorded (what the disk what-if uses); the job wrote
    # parquet, but whether pages reached the device yet is up to the kernel's writeback, so only >= 0
    assert trace.metrics["storage_read_bytes"] >= 0 and trace.metrics["storage_write_bytes"] >= 0
    assert trace.environment.total_slots == 2 and trace.environment.executors[0].cores == 2
    assert any(p.endswith("crystalperf-spark.jar") for p in trace.environment.properties.get("spark.jars", "").split(","))
    assert trace.samples is not None and trace.samples.total > 0
    assert {k.thread for k in trace.samples.keys} >= {"task"}
    report = result.report(out)
    assert report["bottleneck"]["resource"] in ("cpu", "disk", "network")
    assert report["predictions"] and report["critical_path"]
    kinds = {o["kind"] for o in report["operations"]}
    assert {"job", "stage"} <= kinds

    # The same run, read back offline from Spark's own event log.
    from crystalperf.core.cli import main

    log = next(p for p in events.iterdir() if not p.name.endswith(".inprogress"))
    assert main(["import", "spark-eventlog", str(log), "--out", str(tmp_path / "from-log.json.gz")]) == 0
    offline = load_trace(tmp_path / "from-log.json.gz")
    offline_tasks = [t for j in offline.operations for s in j.children for t in s.tasks]
    assert len(offline_tasks) == len(tasks)
    assert sum(t.metrics["spill_disk_bytes"] for t in offline_tasks) == total["spill_disk_bytes"]
    assert offline.samples is None


def test_a_lambda_udf_and_pysparks_own_worker_code_are_located(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = run_app(f'''
        from pyspark.sql.functions import udf
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        # an inline lambda over many rows: the workers' time is the lambda's and PySpark's (un)pickling of the rows
        shout = udf(lambda word: "".join(sorted(word * 60)), "string")
        words = spark.range(0, 1_000_000, numPartitions=2).selectExpr("cast(id % 977 as string) as word")
        print("ROWS", words.select(shout("word").alias("w")).groupBy("w").count().count())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    # the DataFrame action's jobs are named after the script's line, not the JVM's reflection accessor
    line = next(n for n, text in enumerate((tmp_path / "app.py").read_text().splitlines(), 1) if '"ROWS"' in text)
    names = [op.name for op in trace.iter_operations()]
    assert any(name.endswith(f"count at {tmp_path / 'app.py'}:{line}") for name in names), names
    assert not any("NativeMethodAccessorImpl" in name for name in names), names
    resolution = trace.samples.resolution
    assert resolution is not None
    located = {f.qualified_name: f.location or "" for f in (resolution.functions[i] for i in resolution.stack_function
                                                              if i >= 0)}
    # the workers import pyspark from pyspark.zip: its functions are read from the archive
    assert any(".zip/pyspark/" in location for location in located.values()), located
    # the inline lambda is a function of its own
    python = {name: location for name, location in located.items() if ".py" in location}
    assert any(name.endswith("<lambda>") and location.startswith(str(tmp_path)) for name, location in python.items()), \
        (python, [f for f in trace.samples.frames if "lambda" in f.name], resolution.problems[:20])
    # no sample falls through to the hook's own wrapper around the worker's main
    assert not [name for name, location in located.items() if "/crystalperf/integrations/" in location], located


def test_code_shipped_with_add_py_file_is_located_after_spark_deleted_its_copy(run_app, tmp_path: Path) -> None:
    import zipfile

    deps = tmp_path / "deps.zip"
    with zipfile.ZipFile(deps, "w") as archive:
        archive.writestr("textops.py", 'import hashlib\n\n\ndef digest(word):\n    """Hashes a word many times."""\n'
                                       '    h = word.encode()\n    for _ in range(3000):\n'
                                       '        h = hashlib.sha256(h).digest()\n    return h.hex()[:8]\n')
    out = tmp_path / "report"
    result = run_app(f'''
        from pyspark.sql.functions import col, udf
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        spark.sparkContext.addPyFile("{deps}")

        def use(word):
            import textops
            return textops.digest(word)

        print("N", spark.range(0, 12_000, numPartitions=2).select(udf(use, "string")(col("id").cast("string")))
              .distinct().count())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert str(tmp_path) in trace.environment.source_roots
    resolution = trace.samples.resolution
    assert resolution is not None
    # the workers imported textops from Spark's copy of deps.zip, gone when the application stopped: the function
    # is read from the original the program added
    located = {resolution.functions[i].qualified_name: resolution.functions[i].location
               for i in resolution.stack_function if i >= 0}
    assert located.get("textops.digest", "").startswith(f"{deps}/textops.py:"), located


def test_cpu_heavy_python_udf_is_cpu_bound_and_named(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = run_app(f'''
        from pyspark.sql.functions import udf
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})

        # Enough work that the UDF, not the Python workers' start-up (about a second of the task threads
        # waiting in SparkEnv.createPythonWorker), is most of the stage.
        def burn_cycles_in_python(x):
            total = 0
            for i in range(300_000):
                total = (total + i * x) % 1_000_003
            return total

        burn = udf(burn_cycles_in_python, "long")
        print("SUM", spark.range(0, 400, numPartitions=4).select(burn("id").alias("b")).groupBy().sum("b").collect()[0][0])
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert any(k.thread == "python-worker" for k in trace.samples.keys)
    report = result.report(out)
    assert report["bottleneck"]["resource"] == "cpu"
    udf_stage = max((o for o in report["operations"] if o["kind"] == "stage"), key=lambda o: o["runtime_s"])
    _assert_run_queue_delay_recorded(next(op for op in trace.iter_operations() if op.id == udf_stage["id"]).tasks,
                                     python=True, every_task=True)
    assert udf_stage["vector"]["cpu"] > 0.5
    assert any("burn_cycles_in_python" in n for n in _top_names(udf_stage)), _top_names(udf_stage)
    # the Python workers' samplers count in the hook's cost too, each worker a process of its own
    workers = [p for p in trace.hook.processes if p.source.startswith("python:")] if trace.hook else []
    assert workers and all(p.cpu_s > 0 and "sampler" in p.parts for p in workers)


def test_query_stages_of_an_action_made_from_the_jvm_are_named_after_its_query(run_app, tmp_path: Path) -> None:
    """A Scala or Java application sets no call site, and adaptive execution submits a query's stages from a pool
    thread: Spark names them after one of its closures. The report names them after the SQL query."""
    out = tmp_path / "report"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        spark.range(200000).selectExpr("id % 97 AS k", "id AS v").createOrReplaceTempView("t")
        # called on the JVM's session, as a JVM application calls it: no call site comes from Python
        print("ROWS", spark._jsparkSession.sql("SELECT k, sum(v) FROM t GROUP BY k ORDER BY k").collectAsList().size())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ROWS 97" in result.stdout
    stages = [op for op in load_trace(out / "crystalperf-trace.json.gz").iter_operations() if op.kind == "stage"]
    renamed = [s for s in stages if "spark_stage_name" in s.attributes]
    assert renamed and all(s.attributes["spark_stage_name"].startswith("$anonfun$") for s in renamed)
    assert all("$anonfun$" not in s.name and "collectAsList" in s.name for s in stages), [s.name for s in stages]
    report = result.report(out)
    assert "$anonfun$" not in report["bottleneck"]["sentence"]


def test_a_structured_streaming_query_is_reported_by_batch(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = run_app(f'''
        import time
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        rate = spark.readStream.format("rate").option("rowsPerSecond", 5000).load()
        counts = rate.selectExpr("value % 10 AS k").groupBy("k").count()
        query = (counts.writeStream.outputMode("complete").format("memory").queryName("counts")
                 .trigger(processingTime="2 seconds").start())
        time.sleep(10)
        query.stop()
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    batches = [job for job in trace.operations if "streaming_batch" in job.attributes]
    assert len(batches) >= 2
    # a batch the query's stop cut short was cancelled, which fails no application
    assert trace.application.status == "succeeded", [(job.name, job.status) for job in trace.operations]
    assert {job.status for job in trace.operations} <= {"success", "killed"}
    assert [job.name.split(": ", 1)[1] for job in batches[:2]] == [f"counts batch {job.attributes['streaming_batch']}"
                                                                    for job in batches[:2]]
    assert all(s.name.endswith(job.name.split(": ", 1)[1]) and "spark_stage_name" in s.attributes
               for job in batches for s in job.children)
    # each batch's trigger (all but one the stop cut short): when it fired (before its jobs) and how long it ran
    # (past them)
    batches = [job for job in batches if "streaming_trigger_start" in job.attributes]
    assert len(batches) >= 2
    fired = [float(job.attributes["streaming_trigger_start"]) for job in batches]
    ran = [float(job.attributes["streaming_trigger_s"]) for job in batches]
    assert all(f <= job.start + 1e-3 and f + r >= job.end - 1e-3 for f, r, job in zip(fired, ran, batches, strict=True))
    report = result.report(out)
    # with how long the batches took and how often one started (a trigger of two seconds)
    assert any("structured streaming micro-batches ('counts': " in w and " every " in w for w in report["warnings"])
    # the batches kept to their trigger: a batch whose trigger fired after the one before had ended starts no
    # earlier with faster cores (the application does not end before it)
    waited = [job for job, f, before_f, before_r in zip(batches[1:], fired[1:], fired, ran, strict=False)
              if f > before_f + before_r + TRIGGER_LATE_S]
    assert waited, [(job.start, job.end, f, r) for job, f, r in zip(batches, fired, ran, strict=True)]
    faster = next(p for p in report["predictions"] if p["description"] == "cpu_speed=2.0")
    assert faster["crystalperf"]["runtime_s"] >= waited[-1].start - trace.application.start, faster


def test_gzip_decompression_job_is_cpu_bound(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    data = tmp_path / "logs"
    data.mkdir()
    import gzip
    import random

    rng = random.Random(7)
    words = [f"w{i:05d}" for i in range(5000)]
    for part in range(4):
        with gzip.open(data / f"part-{part}.txt.gz", "wt", compresslevel=6) as f:
            for _ in range(150_000):
                f.write(" ".join(rng.choices(words, k=12)) + "\n")
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        lines = spark.read.text("{data}")
        print("LINES", lines.filter(lines.value.contains("w00042")).count())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    report = result.report(out)
    assert report["bottleneck"]["resource"] == "cpu", report["bottleneck"]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    _assert_run_queue_delay_recorded([t for op in trace.iter_operations() for t in op.tasks])
    # what the hook cost, as it measured itself: in the trace (the finish added the writing of the listener's)
    # and in the report
    assert trace.hook is not None
    driver = trace.hook.processes[0]
    assert driver.source == "driver" and {"sampler", "callbacks", "tasks", "trace_write"} <= set(driver.parts)
    # the task threads stopped while the JVM took their stacks: measured by the JVM's safepoint clock, in the total
    assert driver.parts.get("pauses", 0.0) > 0
    assert driver.cpu_s == pytest.approx(sum(driver.parts.values()), abs=1e-6)
    assert 0 < driver.cpu_s < (driver.process_cpu_s or 0.0)
    assert driver.budget_share == 0.01 and driver.cores and driver.samples_taken
    assert report["hook_cost"]["cpu_s"] == pytest.approx(trace.hook.cpu_s, abs=1e-6)  # rounded to a microsecond
    assert 0 < report["hook_cost"]["share"] < 1
    # the driver's JVM, which ran the tasks, split by thread kind: the tasks' CPU, the compilers', the collector's,
    # the hook's own threads', adding up to its CPU time since the hook started
    [executor] = trace.environment.executors
    kinds = executor.thread_cpu
    assert kinds is not None, executor
    assert kinds.task > 0 and kinds.jit > 0 and kinds.gc + kinds.gc_concurrent > 0 and kinds.hook > 0
    # and its kernel time and page faults over the same span: a fresh JVM's heap is first touched in the kernel
    # (the kernel's clock counts in 10 ms ticks, so a short job's may read none)
    assert kinds.minor_faults is not None and kinds.minor_faults > 0, kinds
    assert kinds.kernel is not None and 0 <= kinds.kernel <= kinds.total, kinds
    # the report says what the tasks shared: the cores, how busy the process kept them, and that split
    machine = report["machine"]
    assert machine["cores"] >= 1 and 0 < machine["busy_cores"] <= machine["cores"] * 1.05
    assert machine["threads"]["task"] == pytest.approx(kinds.task, abs=1e-6)
    assert machine["processes"][0]["id"] == executor.id and "the JIT compilers" in machine["sentence"]
    assert kinds.total == pytest.approx(driver.process_cpu_s, rel=0.15)


def test_spark_submit_with_the_printed_conf_lines(tmp_path: Path) -> None:
    import os
    import shlex
    import subprocess
    import sys

    import pyspark

    out = tmp_path / "report"
    conf = subprocess.run([sys.executable, "-m", "crystalperf.core.cli", "spark-conf", "--output-dir", str(out)],
                          capture_output=True, text=True, check=True).stdout
    args = [a for a in shlex.split(conf.replace("\\\n", " "))]
    job = tmp_path / "job.py"
    job.write_text(
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.appName('submitted').getOrCreate()\n"
        "def slow_square(x):\n"
        "    return sum(x for _ in range(20_000))\n"
        "print('TOTAL', spark.sparkContext.parallelize(range(400), 2).map(slow_square).sum())\n"
        "spark.stop()\n")
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    done = subprocess.run([str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", *args, str(job)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "TOTAL" in done.stdout
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert trace.application.name == "submitted"
    keys = trace.samples.keys if trace.samples else []
    assert any(k.thread == "python-worker" for k in keys)


@pytest.mark.skipif(not SCHEDSTAT, reason="no /proc/thread-self/schedstat: no run-queue delay to record")
def test_task_threads_sharing_one_core_record_their_run_queue_delay(run_app, tmp_path: Path) -> None:
    """Two JVM task threads on one core each wait for it about as long as they run on it: the delay the
    plugin reads from each measured task thread's schedstat (at task start and end, from a file that thread keeps
    open) must show it, not just stay within its bounds."""
    out = tmp_path / "report"
    result = run_app(f'''
        import os
        os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})  # the JVM inherits it: local[2] on one core
        # a time bucket shorter than a task, so that each thread's second task starts in a new one and is measured
        spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.crystalperf.analysis": "false",
                           "spark.crystalperf.bucketMs": "200"}})
        print("SUM", spark.range(0, 60_000_000, numPartitions=4).selectExpr("sum(hash(id, id * 7))").collect())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    stage = max(trace.iter_operations(), key=lambda op: sum(t.metrics[tr.METRIC_CPU_TIME] for t in op.tasks))
    _assert_run_queue_delay_recorded(stage.tasks, every_task=True)
    cpu = sum(t.metrics[tr.METRIC_CPU_TIME] for t in stage.tasks)
    waited = sum(t.metrics[tr.METRIC_CPU_WAIT_TIME] for t in stage.tasks)
    assert cpu > 0 and waited > 0.25 * cpu, (waited, cpu)
