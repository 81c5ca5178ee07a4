"""The reporter's own failures never fail the job (real PyFlink local jobs)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from crystalperf.integrations import flink as cpflink

from .sql_jobs import batch_table_env, create_keyed_tables


def test_unwritable_output_dir_does_not_fail_the_job(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    from pyflink.common import Configuration

    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("the reporter cannot create its output directory here")
    env = batch_table_env(cpflink.configure(Configuration(), not_a_dir / "out"), parallelism=1)
    create_keyed_tables(env, 2000, sink_value="h STRING")
    result = env.execute_sql("INSERT INTO snk SELECT k, CAST(v AS STRING) FROM src")
    result.wait()  # raises if the job failed
    assert not (not_a_dir.parent / "out").exists()


def test_reporter_killed_mid_job_does_not_fail_the_job(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    from pyflink.common import Configuration
    from pyflink.java_gateway import get_gateway

    config = cpflink.configure(Configuration(), tmp_path, analyze=False)
    config.set_string("metrics.reporter.crystalperf.sample.interval.ms", "20")
    env = batch_table_env(config, parallelism=1)
    create_keyed_tables(env, 200_000, sink_value="h STRING")
    result = env.execute_sql("INSERT INTO snk SELECT k, SHA256(CAST(v AS STRING)) FROM src")

    thread_class = get_gateway().jvm.java.lang.Thread
    sampler = None
    deadline = time.monotonic() + 30
    while sampler is None and time.monotonic() < deadline:
        threads = thread_class.getAllStackTraces().keySet().toArray()
        sampler = next((th for th in threads if th.getName() == "crystalperf-flink-sampler"), None)
        time.sleep(0.05)
    assert sampler is not None, "the reporter's sampler thread never started"
    assert result.get_job_client().get_job_status().result().name in {"CREATED", "INITIALIZING", "RUNNING"}
    sampler.stop()  # ThreadDeath in the reporter's thread while the job runs
    result.wait()  # raises if the job failed
    assert not sampler.isAlive()
    files = cpflink.wait_for_metrics(tmp_path)
    assert len(files) == 1  # the metrics part of the reporter still writes its file
    assert any("src" in c.name for op in cpflink.read_metrics(files[0]).operations for c in op.children)


STOPPED_DRIVER = """
import sys
from pyflink.common import Configuration
from pyflink.table import EnvironmentSettings, TableEnvironment
from crystalperf.integrations import flink as cpflink

out = sys.argv[1]
config = cpflink.configure(Configuration(), out)
env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(config).build())
env.execute_sql("CREATE TABLE src (k INT, v STRING) WITH ('connector' = 'datagen', 'rows-per-second' = '50000', "
                "'fields.k.min' = '0', 'fields.k.max' = '99')")
env.execute_sql("CREATE TABLE snk (k INT, n BIGINT) WITH ('connector' = 'blackhole')")
statement = "INSERT INTO snk SELECT k, COUNT(*) FROM src GROUP BY k"
cpflink.record_plan(env, out, statement)
result = env.execute_sql(statement)
print("RUNNING", flush=True)
result.wait()
"""


def test_a_driver_stopped_mid_job_still_leaves_a_report_marked_partial(tmp_path: Path) -> None:
    """An unbounded streaming job whose PyFlink driver gets SIGTERM: the mini cluster's JVM exits with the job
    running, and the reporter writes what it has, says where it stops, and starts the analysis."""
    import json
    import os
    import signal
    import subprocess
    import sys

    pytest.importorskip("pyflink")
    out = tmp_path / "out"
    errors = tmp_path / "driver.err"
    with errors.open("w") as stderr:
        # a fresh program: no PyFlink state of this process's earlier jobs (PYFLINK_GATEWAY_DISABLED after a UDF ran)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYFLINK_", "_PYFLINK"))}
        driver = subprocess.Popen([sys.executable, "-c", STOPPED_DRIVER, str(out)], stdout=subprocess.PIPE,
                                  stderr=stderr, text=True, env=env)
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "RUNNING", errors.read_text()[-3000:]
        time.sleep(6)  # the job runs a while
        driver.send_signal(signal.SIGTERM)
        driver.wait(timeout=60)
    finally:
        driver.kill()
    report_path = out / "crystalperf-report.json"
    deadline = time.monotonic() + 120
    while not report_path.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    logs = "".join(p.read_text() for p in out.glob("crystalperf-flink-*.log"))
    assert report_path.exists(), logs
    report = json.loads(report_path.read_text())
    assert report["partial"].startswith("the JVM exited while the job ran"), report["partial"]
    assert report["application"]["status"] == "cancelled"
    assert any("src" in op["name"] for op in report["operations"])
