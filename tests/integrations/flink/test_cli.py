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
    # PyFlink is installed here, so its version was checked and nothing is said about it
    assert "not installed" not in result.stderr


def test_the_installed_pyflink_is_a_supported_version() -> None:
    from importlib import metadata

    pytest.importorskip("pyflink")
    assert cpflink.INTEGRATION.check() == metadata.version("apache-flink")
