"""Never break the job, never lose the report (issue 16), on real local Spark applications: the listener's memory
is bounded (a uniform sample of tasks past its budget, exact totals per stage), SparkContext.stop() does not wait
for the analysis, a SIGTERM'd driver leaves a partial trace, secrets are redacted, and applications sharing a
directory do not overwrite each other's files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from crystalperf.core.trace import load_trace
from crystalperf.integrations.base import SLOW_FINISH_ENV
from crystalperf.integrations.spark.redact import REPLACEMENT
from tests.integrations.spark.conftest import PRELUDE, wait_for_finish


def _stages(trace):
    return [s for j in trace.operations for s in j.children if s.status != "skipped"]


def test_tasks_past_the_budget_are_a_uniform_sample_with_exact_stage_totals(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    # 20 KB holds about 50 task records: 3 stages of 60 tasks cannot all be kept.
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.crystalperf.maxTaskBytes": "20k",
                           "spark.crystalperf.analysis": "false"}})
        sc = spark.sparkContext
        for _ in range(3):
            print("SUM", sc.parallelize(range(6000), 60).map(lambda x: x * 2).sum())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    stages = _stages(trace)
    assert len(stages) == 3
    for stage in stages:
        assert stage.task_count == 60
        assert 1 <= len(stage.tasks) < 60, "past the budget, the tasks are a sample"
        assert len({t.id for t in stage.tasks}) == len(stage.tasks)
        kept_run = sum(t.metrics["run_time_s"] for t in stage.tasks)
        assert stage.metrics["run_time_s"] >= kept_run
        assert stage.metrics["executorRunTime"] == pytest.approx(stage.metrics["run_time_s"] * 1000)
        assert "tasks_sampled" in stage.attributes
    assert trace.partial is None


def test_below_the_budget_every_task_is_kept_and_totals_are_their_sums(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.crystalperf.analysis": "false"}})
        print("SUM", spark.sparkContext.parallelize(range(1000), 8).map(lambda x: x + 1).sum())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    (stage,) = _stages(load_trace(out / "crystalperf-trace.json.gz"))
    assert stage.task_count == len(stage.tasks) == 8
    for name in ("run_time_s", "cpu_time_s", "records_out", "resultSize"):
        assert stage.metrics[name] == pytest.approx(sum(t.metrics[name] for t in stage.tasks)), name


def test_stop_returns_before_the_analysis_and_the_report_follows(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    # The analysis is made slow (a test-only knob): stop() must not wait for it.
    result = run_app(f'''
        import os
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        print("COUNT", spark.range(0, 1000).count())
        spark.stop()
        print("TRACE AT STOP", os.path.exists("{out}/crystalperf-trace.json.gz"))
        print("REPORT AT STOP", os.path.exists("{out}/crystalperf-report.json"))
    ''', wait_finish=False, env={SLOW_FINISH_ENV: "15"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "TRACE AT STOP True" in result.stdout and "REPORT AT STOP False" in result.stdout
    assert "the analysis runs detached" in result.stderr
    wait_for_finish(result.stderr, timeout=300)
    report = result.report(out)
    assert report["operations"]
    assert "the finish exited with status 0" in (out / "crystalperf-analysis.log").read_text()


def test_sigterm_to_the_driver_leaves_a_partial_trace(tmp_path: Path) -> None:
    out = tmp_path / "report"
    script = tmp_path / "app.py"
    script.write_text(PRELUDE + textwrap.dedent(f'''
        import time
        spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.crystalperf.analysis": "false"}})
        sc = spark.sparkContext
        print("FIRST", sc.parallelize(range(100), 2).sum(), flush=True)

        def slow(x):
            time.sleep(600)
            return x

        print("SLOW STARTS", flush=True)
        sc.parallelize(range(2), 2).map(slow).sum()
    '''))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, CRYSTALPERF_TESTING="1")
    driver = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None
        for line in driver.stdout:
            if line.startswith("SLOW STARTS"):
                break
        time.sleep(5)  # the slow stage is running
        driver.send_signal(signal.SIGTERM)
        _, stderr = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    trace_file = out / "crystalperf-trace.json.gz"
    deadline = time.monotonic() + 120
    while not trace_file.exists():
        assert time.monotonic() < deadline, stderr[-3000:]
        time.sleep(0.2)
    wait_for_finish(stderr, timeout=120)
    trace = load_trace(trace_file)
    assert trace.partial and "stopped before the application ended" in trace.partial
    assert trace.application.status == "cancelled"
    done = [s for s in _stages(trace) if s.status == "success"]
    assert done and done[0].task_count == 2 and len(done[0].tasks) == 2


def test_secrets_are_redacted_by_name_and_value(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    secrets = {
        "spark.hadoop.fs.s3a.secret.key": "abc",
        "spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net": "azurekey",
        "spark.hadoop.fs.azure.sas.container.acct.blob.core.windows.net": "sv=2020&sig=xyz",
        "spark.executorEnv.DB_PASS": "hunter2",
        "spark.myapp.url": "jdbc:postgresql://db:5432/sales?user=etl&password=hunter2",
        "spark.myapp.dsn": "postgresql://etl:hunter2@db:5432/sales",
        "spark.myapp.note": "the token is 1234",
    }
    conf = ", ".join(f'"{k}": "{v}"' for k, v in secrets.items())
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.crystalperf.analysis": "false",
                           "spark.myapp.plain": "visible", {conf}}})
        print("COUNT", spark.range(0, 10).count())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    properties = load_trace(out / "crystalperf-trace.json.gz").environment.properties
    for key in secrets:
        assert properties[key] == REPLACEMENT, key
    assert properties["spark.myapp.plain"] == "visible"
    assert "hunter2" not in (out / "crystalperf-trace.json.gz").read_bytes().decode("latin-1")


def test_applications_sharing_a_directory_keep_their_own_files(run_app, tmp_path: Path) -> None:
    for _ in range(2):
        result = run_app('''
            spark = session(**{"spark.crystalperf.analysis": "false"})
            print("COUNT", spark.range(0, 10).count())
            spark.stop()
        ''')
        assert result.returncode == 0, result.stderr[-3000:]
    # no output was written: the working directory is shared, each application has its directory there
    dirs = sorted(tmp_path.glob("crystalperf-local-*"))
    assert len(dirs) == 2
    ids = {load_trace(d / "crystalperf-trace.json.gz").application.id for d in dirs}
    assert len(ids) == 2
    assert not list(tmp_path.glob("crystalperf-local-*/.*.tmp"))
    # the documented names in the shared directory are the latest application's files, as links
    latest = tmp_path / "crystalperf-trace.json.gz"
    assert latest.is_symlink() and latest.resolve().parent in {d.resolve() for d in dirs}
    assert load_trace(latest).application.id in ids
