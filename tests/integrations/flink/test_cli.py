"""The ``crystalperf`` commands of the Flink integration, run as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from crystalperf.integrations import flink as cpflink


def _crystalperf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crystalperf.core.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_flink_conf_prints_the_reporter_and_its_jar(tmp_path: Path) -> None:
    result = _crystalperf("flink-conf", "--output-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert lines["metrics.reporter.crystalperf.factory.class"] == cpflink.FACTORY_CLASS
    assert lines["pipeline.jars"] == cpflink.jar_path().as_uri()
    assert cpflink.jar_path().exists()
    assert lines["metrics.reporter.crystalperf.output.dir"] == str(tmp_path.resolve())
    # the reporter starts the analysis with this interpreter when a job ends
    assert lines["metrics.reporter.crystalperf.analyze.python"] == sys.executable
    quiet = _crystalperf("flink-conf", "--no-analyze")
    assert "analyze.python" not in quiet.stdout
    # the job status listener only when asked for: a jar in plugins/ instead of lib/ would fail every job with it
    assert "job-status-changed-listeners" not in result.stdout
    status = dict(line.split(": ", 1) for line in _crystalperf("flink-conf", "--job-status").stdout.splitlines())
    assert status["execution.job-status-changed-listeners"] == "org.crystalperf.flink.JobStatusRecorder"
    # PyFlink is installed here, so its version was checked and nothing is said about it
    assert "not installed" not in result.stderr


def test_the_installed_pyflink_is_a_supported_version() -> None:
    from importlib import metadata

    pytest.importorskip("pyflink")
    assert cpflink.INTEGRATION.check() == metadata.version("apache-flink")


def test_flink_conf_sets_the_sampling_interval_and_the_cpu_budget() -> None:
    result = _crystalperf("flink-conf", "--no-analyze", "--sample-interval-ms", "20", "--cpu-budget", "0.05")
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert lines["metrics.reporter.crystalperf.sample.interval.ms"] == "20"
    assert lines["metrics.reporter.crystalperf.cpu.budget"] == "0.05"
    wrong = _crystalperf("flink-conf", "--cpu-budget", "2")
    assert wrong.returncode == 2
    assert "--cpu-budget: '2' is not a share between 0 and 1" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def test_configure_gives_the_python_worker_sampler_the_reporters_interval_and_budget(tmp_path: Path) -> None:
    """A local job's Python functions run in the configuring process, whose sampler must keep to the budget and
    the interval the reporter was given, whether as arguments or as entries already in the configuration."""
    pytest.importorskip("pyflink")
    from pyflink.common import Configuration

    from crystalperf.integrations.flink import pyworkers

    config = cpflink.configure(Configuration(), tmp_path / "given", analyze=False, sample_interval_ms=20,
                               cpu_budget=0.05)
    assert config.get_string("metrics.reporter.crystalperf.cpu.budget", "") == "0.05"
    preset = Configuration()
    preset.set_string("metrics.reporter.crystalperf.cpu.budget", "0.2")
    preset.set_string("metrics.reporter.crystalperf.sample.interval.ms", "250")
    cpflink.configure(preset, tmp_path / "preset", analyze=False)
    off = Configuration()
    off.set_string("metrics.reporter.crystalperf.sample.interval.ms", "0")
    cpflink.configure(off, tmp_path / "off", analyze=False)
    given = pyworkers._samplers.pop((tmp_path / "given").resolve())
    kept = pyworkers._samplers.pop((tmp_path / "preset").resolve())
    try:
        assert (given.budget.share, given.pace.base_s) == (0.05, 0.02)
        assert (kept.budget.share, kept.pace.base_s) == (0.2, 0.25)
        # sampling turned off in the reporter is off for the Python workers too
        assert (tmp_path / "off").resolve() not in pyworkers._samplers
    finally:
        for sampler in (given, kept):
            pyworkers._stop(sampler)


def test_configure_keeps_the_users_job_status_listeners(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    from pyflink.common import Configuration

    config = Configuration()
    config.set_string("execution.job-status-changed-listeners", "com.example.LineageListenerFactory")
    cpflink.configure(config, tmp_path, analyze=False)
    cpflink.configure(config, tmp_path, analyze=False)  # a second call adds nothing twice
    assert config.get_string("execution.job-status-changed-listeners", "") == \
        "com.example.LineageListenerFactory;org.crystalperf.flink.JobStatusRecorder"
