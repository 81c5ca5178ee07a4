"""The contract every integration implements (crystalperf/integrations/base.py), and how the core chooses
what-ifs by what a trace declares instead of by framework name."""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.errors import (
    CrystalPerfError,
    FrameworkNotInstalledError,
    IntegrationSetupError,
    UnsupportedFrameworkVersionError,
)
from crystalperf.core.predict import default_scenarios
from crystalperf.core.predict.base import Baseline
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.profile.machine import scaling_keys
from crystalperf.integrations import available, base
from crystalperf.integrations.jars import HASH_ENTRY, SHARED_HASH_ENTRY, sources_hash
from tests.unit.helpers import fake_installed, make_trace, op, task

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "parsed"), [
    ("4.1.0", (4, 1, 0)), ("2.21.0rc1", (2, 21, 0)), ("v2.3", (2, 3)), ("4.0.0.dev2", (4, 0, 0)), ("main", ()),
])
def test_parse_version(text: str, parsed: tuple[int, ...]) -> None:
    assert base.parse_version(text) == parsed


FAKE = base.Integration(name="fakeframe", module="fakeframe", distributions=("fake-frame",), minimum=(2, 0),
                        below=(2, 4))


def _fake(monkeypatch: pytest.MonkeyPatch, module_found: bool, version: str | None) -> None:
    fake_installed(monkeypatch, FAKE, {"fake-frame": version} if version is not None else {} if module_found else None)


def test_check_names_the_extra_when_the_framework_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, module_found=False, version=None)
    with pytest.raises(FrameworkNotInstalledError, match=re.escape("pip install 'crystalperf[fakeframe]'")):
        FAKE.check()


@pytest.mark.parametrize("version", ["1.20.0", "2.4.0", "3.0"])
def test_check_names_the_supported_range(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    _fake(monkeypatch, module_found=True, version=version)
    with pytest.raises(UnsupportedFrameworkVersionError) as raised:
        FAKE.check()
    message = str(raised.value)
    assert f"fakeframe {version} is installed" in message
    assert "fake-frame>=2.0,<2.4" in message and "pip install 'crystalperf[fakeframe]'" in message


@pytest.mark.parametrize("version", ["2.0.0", "2.3.9", "2.1.0rc1", "unknown"])
def test_check_accepts_the_supported_range(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    _fake(monkeypatch, module_found=True, version=None if version == "unknown" else version)
    assert FAKE.check() == version


def test_setup_errors_are_crystalperf_errors_the_cli_prints_in_one_line() -> None:
    for error in (IntegrationSetupError, UnsupportedFrameworkVersionError, FrameworkNotInstalledError):
        assert issubclass(error, CrystalPerfError)


def _package_with_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built_from: str | None) -> base.Integration:
    """A package crystalperf.integrations.<name> on sys.path with Java sources and a jar built from them."""
    name = "jartest"
    package = tmp_path / "crystalperf" / "integrations" / name
    (package / "java" / "org").mkdir(parents=True)
    (package / "java" / "org" / "Hook.java").write_text("class Hook {}\n")
    (package / "__init__.py").write_text("")
    if built_from is not None:
        with zipfile.ZipFile(package / "hook.jar", "w") as zf:
            zf.writestr(HASH_ENTRY, built_from + "\n")
    import crystalperf.integrations

    monkeypatch.setattr(crystalperf.integrations, "__path__", [*crystalperf.integrations.__path__,
                                                                str(package.parent)])
    sys.modules.pop(f"crystalperf.integrations.{name}", None)
    return base.Integration(name=name, module=name, distributions=(name,), minimum=(1,), below=(2,), jar="hook.jar")


def test_jar_path_finds_a_current_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import crystalperf.integrations

    integration = _package_with_jar(tmp_path, monkeypatch, built_from="placeholder")
    current = sources_hash(tmp_path / "crystalperf" / "integrations" / "jartest" / "java")
    assert current is not None
    # the Java sources every hook compiles in (crystalperf/integrations/java) have their own hash entry
    shared = sources_hash(Path(crystalperf.integrations.__path__[0]) / "java")
    jar = tmp_path / "crystalperf/integrations/jartest/hook.jar"
    for shared_entry in ("0" * 64, None):
        with zipfile.ZipFile(jar, "w") as zf:
            zf.writestr(HASH_ENTRY, current + "\n")
            if shared is not None:
                zf.writestr(SHARED_HASH_ENTRY, (shared_entry or shared) + "\n")
        if shared is not None and shared_entry is not None:
            with pytest.raises(IntegrationSetupError, match="does not match its Java sources"):
                integration.jar_path()
    assert integration.jar_path() == jar


def test_jar_path_refuses_a_stale_or_missing_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    integration = _package_with_jar(tmp_path, monkeypatch, built_from="0" * 64)
    with pytest.raises(IntegrationSetupError, match="does not match its Java sources: rebuild it"):
        integration.jar_path()
    (tmp_path / "crystalperf/integrations/jartest/hook.jar").unlink()
    with pytest.raises(IntegrationSetupError, match=r"is missing: reinstall crystalperf"):
        integration.jar_path()


def test_bundled_jars_are_current() -> None:
    for integration in available():
        if integration.jar is not None:
            assert integration.jar_path().is_file()


def test_every_integration_is_registered_with_the_extras_pin() -> None:
    """The version range the hook checks is the one `pip install crystalperf[<extra>]` installs."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    found = {integration.name: integration for integration in available()}
    assert set(found) == {"spark", "tensorflow", "flink"}
    for name, integration in found.items():
        pin = re.search(rf'^{name} = \["([^"]+)"', pyproject, re.MULTILINE)
        assert pin is not None, name
        assert pin.group(1) == integration.supported


def test_finish_command_is_the_same_shape_for_every_framework() -> None:
    for integration in available():
        command = integration.finish_command("TRACE", "--out", "DIR", python="/py")
        assert command == ["/py", "-m", f"crystalperf.integrations.{integration.name}.finish", "TRACE", "--out", "DIR"]
        assert (ROOT / "crystalperf" / "integrations" / integration.name / "finish.py").is_file()


def _scenario_keys(trace: tr.Trace) -> list[str]:
    profile = build_profile(trace, KeywordClassifier())
    return [key for changes in default_scenarios(profile, Baseline.of(trace), models=[]) for key in changes.values]


def _two_tasks(**env: object) -> tr.Trace:
    stage = op("s", 0, 4, tasks=[task("t0", 0, 4), task("t1", 0, 4)])
    return make_trace([stage], **env)


def test_scenarios_follow_what_the_trace_declares() -> None:
    trace = _two_tasks(scaling=["parallelism"], total_slots=2)
    assert scaling_keys(trace) == ("parallelism",)
    keys = _scenario_keys(trace)
    assert keys[:2] == ["parallelism", "parallelism"] and "cores" not in keys and "executors" not in keys
    trace = _two_tasks(scaling=["cores", "executors"], cores_per_executor=2)
    assert _scenario_keys(trace)[:3] == ["cores", "cores", "executors"]


def test_tasks_on_several_hosts_add_a_longer_round_trip() -> None:
    def placed(*hosts: str) -> tr.Trace:
        tasks = [task(f"t{i}", 0, 4).model_copy(update={"host": h, "executor": f"e{i}"}) for i, h in enumerate(hosts)]
        executors = [tr.Executor(id=f"e{i}", host=h) for i, h in enumerate(hosts)]
        return make_trace([op("s", 0, 4, tasks=tasks)], scaling=["cores"], executors=executors)

    assert "rtt" not in _scenario_keys(placed("a", "a"))
    assert "rtt" in _scenario_keys(placed("a", "b"))
    answered = {p["description"]: p for p in analyze(placed("a", "b"), classifier=KeywordClassifier()).report["predictions"]}
    # each task is launched over the network: one round trip more, 10 ms
    assert answered["rtt=+10ms"]["crystalperf"]["runtime_s"] == pytest.approx(4.01)
    assert answered["rtt=+10ms"]["changes"] == {"rtt": 0.01} and answered["rtt=+10ms"]["added"] == ["rtt"]


def test_old_traces_take_the_scaling_their_integration_declares() -> None:
    """Traces written before environment.scaling: the registered integration of that framework decides."""
    trace = _two_tasks(cores_per_executor=2)  # helpers' traces say framework="spark"
    assert scaling_keys(trace) == ("cores", "executors")
    foreign = trace.model_copy(update={"application": trace.application.model_copy(update={"framework": "other"})})
    assert scaling_keys(foreign) == ("cores",)
    streaming = foreign.model_copy(update={"streaming": tr.Streaming(latency_s=4.0)})
    assert scaling_keys(streaming) == ("parallelism",)


def test_models_propose_their_own_scenarios() -> None:
    class GpuModel:
        name = "gpu"
        keys = frozenset({"device"})

        def scenarios(self, profile: object, baseline: Baseline) -> list[dict[str, float | str]]:
            return [{"device": "gpu"}]

    class Broken:
        name = "broken"
        keys = frozenset()

        def scenarios(self, profile: object, baseline: Baseline) -> list[dict[str, float | str]]:
            raise RuntimeError("boom")

    trace = _two_tasks(scaling=["cores"])
    profile = build_profile(trace, KeywordClassifier())
    chosen = default_scenarios(profile, Baseline.of(trace), models=[GpuModel(), Broken()])  # type: ignore[list-item]
    assert chosen[-1].values == {"device": "gpu"}
