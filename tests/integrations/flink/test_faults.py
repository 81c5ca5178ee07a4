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
