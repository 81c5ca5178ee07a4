"""The TensorFlow integration's contract with a faked environment: the framework missing, at an unsupported
version, or installed under another distribution name (TensorFlow itself is never imported here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import crystalperf.integrations.tensorflow as package
from crystalperf.core.errors import FrameworkNotInstalledError, UnsupportedFrameworkVersionError
from crystalperf.integrations.tensorflow.config import INTEGRATION
from tests.unit.helpers import fake_installed

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _fake(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str] | None) -> None:
    fake_installed(monkeypatch, INTEGRATION, versions)


def test_not_installed_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, None)
    with pytest.raises(FrameworkNotInstalledError) as raised:
        package.CrystalPerfCallback  # noqa: B018
    assert "pip install 'crystalperf[tensorflow]'" in str(raised.value)
    with pytest.raises(ImportError, match=re.escape("crystalperf[tensorflow]")):
        from crystalperf.integrations.tensorflow import CrystalPerfCallback  # noqa: F401
    assert INTEGRATION.version() is None


def test_wrong_version_names_the_supported_range_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, {"tensorflow-cpu": "2.15.0"})
    with pytest.raises(UnsupportedFrameworkVersionError) as raised:
        package.CrystalPerfCallback  # noqa: B018
    message = str(raised.value)
    assert "tensorflow 2.15.0 is installed" in message
    assert "tensorflow-cpu>=2.19,<2.22" in message and "pip install 'crystalperf[tensorflow]'" in message


@pytest.mark.parametrize(("distribution", "version", "supported"), [
    ("tensorflow", "2.21.0", True), ("tensorflow-cpu", "2.19.1", True), ("tensorflow-intel", "2.20.0", True),
    ("tensorflow", "2.22.0", False), ("tensorflow-cpu", "2.18.1", False), ("tf-nightly", "2.22.0.dev20250101", False),
])
def test_every_tensorflow_distribution_is_checked(monkeypatch: pytest.MonkeyPatch, distribution: str,
                                                  version: str, supported: bool) -> None:
    _fake(monkeypatch, {distribution: version})
    if supported:
        assert INTEGRATION.check() == version
    else:
        with pytest.raises(UnsupportedFrameworkVersionError):
            INTEGRATION.check()


def test_the_supported_range_is_the_extras_pin() -> None:
    pin = re.search(r'^tensorflow = \["([^"]+)"\]', PYPROJECT.read_text(), re.MULTILINE)
    assert pin is not None and pin.group(1) == INTEGRATION.supported == "tensorflow-cpu>=2.19,<2.22"
    assert INTEGRATION.extra == "tensorflow" and INTEGRATION.jar is None


def test_the_finish_command_is_the_packages_module() -> None:
    command = INTEGRATION.finish_command("t.json.gz", "--out", "d", python="py")
    assert command == ["py", "-m", "crystalperf.integrations.tensorflow.finish", "t.json.gz", "--out", "d"]
