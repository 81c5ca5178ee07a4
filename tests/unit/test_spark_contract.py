"""The Spark integration's contract (crystalperf.integrations.base.Integration) with the environment faked:
pyspark missing, pyspark of an unsupported version, the bundled jar missing or stale. These test the messages
and the checks, not that Spark works (tests/integrations/spark does that)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from crystalperf.core.errors import (
    FrameworkNotInstalledError,
    IntegrationSetupError,
    UnsupportedFrameworkVersionError,
)
from crystalperf.core.trace import SCHEMA_VERSION
from crystalperf.integrations import base
from crystalperf.integrations.spark import config
from tests.unit.helpers import fake_installed

ROOT = Path(__file__).resolve().parents[2]
LISTENER_JAVA = ROOT / "crystalperf/integrations/spark/java/org/crystalperf/spark/CrystalPerfListener.java"


def _fake_pyspark(monkeypatch: pytest.MonkeyPatch, version: str | None) -> None:
    fake_installed(monkeypatch, config.INTEGRATION, None if version is None else {"pyspark": version})


def test_pyspark_not_installed_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pyspark(monkeypatch, None)
    for check in (config.INTEGRATION.check, config.check_installation, config.spark_version):
        with pytest.raises(FrameworkNotInstalledError, match=re.escape("pip install 'crystalperf[spark]'")):
            check()


@pytest.mark.parametrize("version", ["3.5.1", "4.4.0", "5.0.0.dev0"])
def test_unsupported_pyspark_names_the_range_and_the_command(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    _fake_pyspark(monkeypatch, version)
    with pytest.raises(UnsupportedFrameworkVersionError) as caught:
        config.check_installation()
    message = str(caught.value)
    assert f"pyspark {version} is installed" in message
    assert "pyspark>=4.0,<4.4" in message and "pip install 'crystalperf[spark]'" in message


@pytest.mark.parametrize("version", ["4.0.0", "4.1.1", "4.3.0", "4.3.0rc1"])
def test_supported_pyspark_passes(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    _fake_pyspark(monkeypatch, version)
    assert config.INTEGRATION.check() == version == config.spark_version()
    assert config.check_installation().name == "crystalperf-spark.jar"


def test_supported_range_is_the_extras_pin() -> None:
    pin = re.search(r'^spark = \["([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert pin is not None and pin.group(1) == config.INTEGRATION.supported == "pyspark>=4.0,<4.4"


def test_stale_jar_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pyspark(monkeypatch, "4.1.0")
    monkeypatch.setattr(base, "sources_hash", lambda _directory: "0" * 64)
    with pytest.raises(IntegrationSetupError, match=r"does not match its Java sources: rebuild it with python hatch_build\.py"):
        config.check_installation()


def test_missing_jar_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pyspark(monkeypatch, "4.1.0")
    monkeypatch.setattr(config, "INTEGRATION", dataclasses.replace(config.INTEGRATION, jar="no-such.jar"))
    with pytest.raises(IntegrationSetupError, match=re.escape("no-such.jar is missing: reinstall crystalperf (pip install 'crystalperf[spark]')")):
        config.check_installation()


def test_setup_errors_are_one_line_from_the_cli(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from crystalperf.core.cli import main

    assert issubclass(config.SparkSetupError, IntegrationSetupError)
    _fake_pyspark(monkeypatch, "3.5.1")
    assert main(["spark-conf", "--no-python-sampling"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pyspark>=4.0,<4.4" in err


def test_java_fallback_schema_version_is_the_traces() -> None:
    found = re.search(r'static final String SCHEMA_VERSION = "([^"]+)";', LISTENER_JAVA.read_text())
    assert found is not None and found.group(1) == SCHEMA_VERSION


def test_java_starts_the_finish_command() -> None:
    # The listener builds [python, "-m", <package>.finish, TRACE, "--out", DIR, ...] itself.
    python, flag, module, *_ = config.INTEGRATION.finish_command("TRACE", python="python3")
    source = LISTENER_JAVA.read_text()
    assert (python, flag) == ("python3", "-m")
    assert f'cmd.add("{flag}");\n        cmd.add("{module}");' in source
    assert 'cmd.add("--out");' in source and 'cmd.add("--spool");' in source and 'cmd.add("--no-analysis");' in source
