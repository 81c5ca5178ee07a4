"""The Flink integration's contract (``config.INTEGRATION``) with the environment faked: PyFlink missing, an
unsupported version, a supported one. ``importlib.util.find_spec`` / ``importlib.metadata.version`` are what
``Integration`` reads; no PyFlink is needed, and none of this claims the framework works."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from crystalperf.core.errors import FrameworkNotInstalledError, UnsupportedFrameworkVersionError
from crystalperf.integrations import flink as cpflink
from crystalperf.integrations.flink import cli
from crystalperf.integrations.flink.config import INTEGRATION
from tests.unit.helpers import fake_installed

ROOT = Path(__file__).resolve().parents[2]


def _fake_flink(monkeypatch: pytest.MonkeyPatch, version: str | None) -> None:
    fake_installed(monkeypatch, INTEGRATION, None if version is None else {"apache-flink": version})


class FakeConfiguration:
    """The two methods of ``pyflink.common.Configuration`` that ``configure`` uses."""

    def __init__(self, **entries: str) -> None:
        self.entries = dict(entries)

    def get_string(self, key: str, default: str) -> str:
        return self.entries.get(key, default)

    def set_string(self, key: str, value: str) -> None:
        self.entries[key] = value


def test_the_supported_range_is_the_extras_pin() -> None:
    pin = re.search(r'^flink = \["([^"]+)"\]', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert pin is not None and pin.group(1) == INTEGRATION.supported == "apache-flink>=2.0,<2.4"
    assert cpflink.INTEGRATION is INTEGRATION and INTEGRATION.extra == "flink"
    assert INTEGRATION.scaling == ("parallelism",) and INTEGRATION.jar == "crystalperf-flink.jar"


def test_not_installed_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_flink(monkeypatch, None)
    with pytest.raises(FrameworkNotInstalledError, match=re.escape("pip install 'crystalperf[flink]'")):
        cpflink.configure(FakeConfiguration())


def test_wrong_version_names_the_supported_range_and_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_flink(monkeypatch, "1.20.0")
    for call in (lambda: cpflink.configure(FakeConfiguration()), cpflink.configuration):
        with pytest.raises(UnsupportedFrameworkVersionError) as raised:
            call()
        message = str(raised.value)
        assert "1.20.0" in message and "apache-flink>=2.0,<2.4" in message
        assert "pip install 'crystalperf[flink]'" in message
    _fake_flink(monkeypatch, "2.4.0")
    with pytest.raises(UnsupportedFrameworkVersionError, match=re.escape("apache-flink>=2.0,<2.4")):
        cpflink.configure(FakeConfiguration())


def test_a_supported_version_is_configured_keeping_the_jars_already_listed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_flink(monkeypatch, "2.3.0")
    assert INTEGRATION.check() == "2.3.0"
    config = cpflink.configure(FakeConfiguration(**{"pipeline.jars": "file:///other.jar"}), tmp_path)
    # configure() with an output directory starts this process's Python worker sampler: stopped here, so that
    # no sampling thread outlives the test (later tests fork, which a running thread forbids)
    from crystalperf.integrations.flink import pyworkers

    with pyworkers._lock:
        sampler = pyworkers._samplers.pop(tmp_path.resolve())
    pyworkers._stop(sampler)
    jar = cpflink.jar_path()
    assert jar.name == "crystalperf-flink.jar" and jar.is_file()
    assert config.entries == {
        "pipeline.jars": f"file:///other.jar;{jar.as_uri()}",
        "metrics.reporter.crystalperf.factory.class": cpflink.FACTORY_CLASS,
        "metrics.reporter.crystalperf.output.dir": str(tmp_path.resolve()),
        "metrics.reporter.crystalperf.analyze.python": sys.executable,
        # where the TaskManager's embedded interpreter (thread mode) imports crystalperf from: this one's
        "metrics.reporter.crystalperf.python.path": str(Path(cpflink.__file__).resolve().parents[3]),
        # the mini cluster's JobManager finds the job status listener in the same jar
        "execution.job-status-changed-listeners": "org.crystalperf.flink.JobStatusRecorder",
    }


def test_flink_conf_without_pyflink_prints_the_entries_and_says_the_version_is_unchecked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # settings for a cluster elsewhere: no PyFlink here is not an error
    _fake_flink(monkeypatch, None)
    assert cli._flink_conf(argparse.Namespace(output_dir=None, no_analyze=True, sample_interval_ms=None,
                                              cpu_budget=None, job_status=False)) == 0
    captured = capsys.readouterr()
    lines = dict(line.split(": ", 1) for line in captured.out.splitlines())
    assert lines == {
        "metrics.reporter.crystalperf.factory.class": cpflink.FACTORY_CLASS,
        "pipeline.jars": cpflink.jar_path().as_uri(),
    }
    assert "not installed" in captured.err and "apache-flink>=2.0,<2.4" in captured.err


def test_the_reporter_starts_the_finish_command_of_the_contract() -> None:
    # the Java reporter builds <analyze.python> -m crystalperf.integrations.flink.finish <part>
    assert INTEGRATION.finish_command("part.json", python="py") == [
        "py", "-m", "crystalperf.integrations.flink.finish", "part.json"
    ]
    java = (ROOT / "crystalperf/integrations/flink/java/org/crystalperf/flink/CrystalPerfReporter.java").read_text()
    assert 'FINISH_MODULE = "crystalperf.integrations.flink.finish"' in java
    assert 'analyzePython, "-m", FINISH_MODULE, part.toString()' in java
