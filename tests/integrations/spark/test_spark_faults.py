"""Whatever goes wrong on crystalperf's side, the application's result and exit status are its own."""

from __future__ import annotations

import time
from pathlib import Path

from crystalperf.core.trace import load_trace


def test_unwritable_output_dir_leaves_the_application_alone(run_app, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{blocker}/report"}})
        print("COUNT", spark.range(0, 1000).count())
        spark.stop()
        print("AFTER STOP")
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    assert "COUNT 1000" in result.stdout and "AFTER STOP" in result.stdout
    assert "could not write the trace" in result.stderr


def test_analysis_crash_keeps_the_trace_and_the_exit_status(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.crystalperf.python": "/bin/false"}})
        print("COUNT", spark.range(0, 1000).count())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    assert "COUNT 1000" in result.stdout
    # the finish runs detached from the driver: its exit status is in its log
    assert "the finish exited with status 1" in (out / "crystalperf-analysis.log").read_text()
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert trace.operations and not (out / "crystalperf-report.json").exists()


def test_failed_job_is_recorded_and_the_application_decides(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.task.maxFailures": 1}})
        sc = spark.sparkContext

        def explode(x):
            raise ValueError("boom")

        try:  # fails in its first stage: the stage after the shuffle never runs
            sc.parallelize(range(10), 2).map(explode).reduceByKey(lambda a, b: a).count()
        except Exception:
            print("CAUGHT")
        print("COUNT", spark.range(0, 100).count())
        sc.parallelize(range(10), 2).map(explode).count()  # uncaught: the application fails
    ''', testing=False)
    assert "CAUGHT" in result.stdout and "COUNT 100" in result.stdout
    assert result.returncode == 1  # Python's own status for an uncaught exception
    trace = load_trace(out / "crystalperf-trace.json.gz")
    statuses = [j.status for j in trace.operations]
    assert statuses.count("failed") >= 1 and "success" in statuses
    failed_tasks = [t for j in trace.operations for s in j.children for t in s.tasks if t.status == "failed"]
    assert failed_tasks
    # the stage that never ran is in the trace, and the analysis reads the trace whole
    assert any(s.status == "skipped" and s.parents for s in trace.operations[0].children)
    report = out / "crystalperf-report.json"
    deadline = time.monotonic() + 300  # the analysis runs detached after the application's end
    while not report.is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert report.is_file(), (out / "crystalperf-analysis.log").read_text()[-2000:]
    assert result.report(out)["bottleneck"]["sentence"]


def test_a_context_stopped_with_an_exit_code_is_a_failed_application(run_app, tmp_path: Path) -> None:
    """SparkContext.stop(exitCode) (Spark 3.4+), as a driver that gives up calls it: every job succeeded, the
    application says it failed, and so does the trace."""
    out = tmp_path / "report"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        print("COUNT", spark.range(0, 1000).count())
        spark.sparkContext._jsc.sc().stop(3)
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    assert "COUNT 1000" in result.stdout
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert {j.status for j in trace.operations} == {"success"}
    assert trace.application.status == "failed"


def test_a_job_running_when_the_program_stops_its_session_ends_cancelled(run_app, tmp_path: Path) -> None:
    """SparkContext.stop() posts the application's end before its scheduler cancels the jobs still running (a
    streaming batch a query's stop did not wait for, a job of another thread): the trace, written at the
    application's end, says they were cancelled, and the application did not fail."""
    out = tmp_path / "report"
    result = run_app(f'''
        import threading, time
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        sc = spark.sparkContext
        print("COUNT", spark.range(0, 1000).count())

        def slow_job():
            try:
                sc.parallelize(range(2), 2).map(lambda x: time.sleep(60)).count()
            except Exception:
                print("CANCELLED")

        worker = threading.Thread(target=slow_job, daemon=True)
        worker.start()
        while not sc.statusTracker().getActiveJobsIds():
            time.sleep(0.1)
        time.sleep(2)
        spark.stop()
        worker.join(60)
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert trace.application.status == "succeeded"
    cut = [job for job in trace.operations if job.status != "success"]
    assert [job.status for job in cut] == ["killed"], [(job.name, job.status) for job in trace.operations]
    assert cut[0].name.endswith("app.py:20") and all(stage.status == "killed" for stage in cut[0].children)
