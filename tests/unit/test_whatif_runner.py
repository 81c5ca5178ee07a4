"""The what-if benchmark runner's own logic: deviation, summaries, skip reporting (no framework)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

RUNNER = Path(__file__).resolve().parents[2] / "bench" / "whatif" / "runner.py"


@pytest.fixture(scope="module")
def runner() -> Any:
    spec = importlib.util.spec_from_file_location("whatif_runner_under_test", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _case(runner: Any, fw: str, kind: str, actual: float, predicted: dict[str, float]) -> Any:
    case = runner.CaseResult(fw, "w", f"{kind} change", kind, actual_s=actual, actual_runs_s=[actual])
    case.predicted_s = predicted
    case.deviation = {n: abs(p - actual) / actual for n, p in predicted.items()}
    return case


def test_summary_means_per_framework_and_kind_and_ignores_skipped(runner: Any) -> None:
    cases = [
        _case(runner, "spark", "cores", 10.0, {"crystalperf": 11.0, "linear": 20.0, "replay": 10.0}),
        _case(runner, "spark", "disk", 20.0, {"crystalperf": 17.0, "linear": 20.0, "replay": 10.0}),
        runner.CaseResult("spark", "w", "network 100mbit", "network", skipped="no tc"),
    ]
    summary = runner.summarize(cases)
    assert summary["cases"] == 2 and summary["skipped"] == 1
    spark = summary["per_framework"]["spark"]
    assert spark["cases"] == 2
    assert spark["crystalperf"] == pytest.approx((0.1 + 0.15) / 2)
    assert spark["linear"] == pytest.approx((1.0 + 0.0) / 2)
    assert spark["replay"] == pytest.approx((0.0 + 0.5) / 2)
    assert set(summary["per_kind"]) == {"spark/cores", "spark/disk"}
    assert summary["per_kind"]["spark/disk"]["crystalperf"] == pytest.approx(0.15)


def test_markdown_lists_skipped_cases_with_their_reason(runner: Any) -> None:
    cases = [
        _case(runner, "spark", "cores", 10.0, {"crystalperf": 11.0, "linear": 20.0, "replay": 10.0}),
        runner.CaseResult("spark", "w", "network 100mbit", "network", skipped="tc: operation not permitted"),
    ]
    text = runner.markdown(cases, runner.summarize(cases), "test machine")
    assert "skipped: tc: operation not permitted" in text
    assert "| spark | 1 | 10.0% | 100.0% | 0.0% | 13.5% |" in text


def test_run_workload_reports_an_unavailable_target_as_skipped(runner: Any, tmp_path: Path) -> None:
    ran: list[dict[str, Any]] = []

    class Workload:
        name = "toy"
        framework = "spark"
        baseline: dict[str, Any] = {"cores": 2}

        def targets(self, quick: bool) -> list[Any]:
            return [runner.Target("network 100mbit", "network", {"net": 100}, ["network=100mbit"],
                                  unavailable=lambda: "no network namespace")]

        def run(self, config: dict[str, Any], out_dir: Path) -> Any:
            ran.append(config)
            return runner.Run(runtime_s=1.0, trace=tmp_path / "trace.json.gz")

    results = runner.run_workload(Workload(), tmp_path, repetitions=3, quick=True, log=lambda _: None)
    assert [r.skipped for r in results] == ["no network namespace"]
    assert ran == [{"cores": 2}] * 3  # the skipped target never ran
    written = runner.write_outputs(results, tmp_path, machine="test")
    data = json.loads((tmp_path / "whatif-results.json").read_text())
    assert data["summary"]["skipped"] == 1 and data["cases"][0]["skipped"] == "no network namespace"
    assert tmp_path / "whatif-results.md" in written


def _timed_workload(runner: Any, baseline: dict[str, Any], target: Any, baseline_runtimes: list[float],
                    target_runtimes: list[float]) -> Any:
    """A workload of one target whose baseline and target runs take those runtimes in turn, each traced into its run
    directory."""
    times = {id(baseline): iter(baseline_runtimes), id(target.config): iter(target_runtimes)}

    class Workload:
        name = "toy"
        framework = "spark"

        def __init__(self) -> None:
            self.baseline = baseline

        def targets(self, quick: bool) -> list[Any]:
            return [target]

        def run(self, config: dict[str, Any], out_dir: Path) -> Any:
            return runner.Run(runtime_s=next(times[id(config)]), trace=out_dir / "trace.json.gz")

    return Workload()


def test_predictions_are_expressed_against_the_measured_baseline(runner: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # The traced run took 12 s, the three baseline runs 9, 10 and 11 s (median 10): a prediction of
    # 24 s from the trace (twice as slow) is 20 s against the measured baseline.
    workload = _timed_workload(runner, {"cores": 2}, runner.Target("cores 2->1", "cores", {"cores": 1}, ["cores=1"]),
                               [12.0, 10.0, 9.0], [19.0, 21.0, 20.0])
    monkeypatch.setattr(runner, "predict", lambda trace, changes: {
        "baseline_runtime_s": 12.0, "crystalperf": {"runtime_s": 24.0, "low_s": 18.0, "high_s": 30.0},
        "linear": {"runtime_s": 24.0}, "replay": {"runtime_s": 12.0}})
    [case] = runner.run_workload(workload, tmp_path, repetitions=3, quick=True, log=lambda _: None)
    assert case.predicted_s == {"crystalperf": 20.0, "linear": 20.0, "replay": 10.0}
    assert case.band_s == (15.0, 25.0) and case.actual_s == 20.0
    assert case.deviation["crystalperf"] == 0.0 and case.deviation["replay"] == pytest.approx(0.5)


def test_of_several_traced_baseline_runs_the_one_nearest_the_median_is_predicted_from(
        runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workload = _timed_workload(
        runner, {"parallelism": 2},
        runner.Target("parallelism 2->1", "parallelism", {"parallelism": 1}, ["parallelism=1"]),
        [12.0, 9.0, 10.0], [20.0, 20.0, 20.0])
    asked: list[Path] = []
    monkeypatch.setattr(runner, "predict", lambda trace, changes: asked.append(trace) or {
        "baseline_runtime_s": 10.0, "crystalperf": {"runtime_s": 20.0}, "linear": {"runtime_s": 20.0},
        "replay": {"runtime_s": 10.0}})
    [case] = runner.run_workload(workload, tmp_path, repetitions=3, quick=True, log=lambda _: None)
    assert asked == [tmp_path / "baseline" / "rep2" / "trace.json.gz"] and case.trace == str(asked[0])


def test_the_repetitions_of_the_baseline_and_its_targets_are_interleaved(runner: Any, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    class Workload:
        name = "toy"
        framework = "flink"
        baseline: dict[str, Any] = {"share": 1.0}

        def targets(self, quick: bool) -> list[Any]:
            return [runner.Target(f"share {s}", "cpu_share", {"share": s}, [f"cpu_share={s}"]) for s in (0.5, 0.75)]

        def run(self, config: dict[str, Any], out_dir: Path) -> Any:
            assert out_dir.is_dir() and not any(out_dir.iterdir())  # each run starts in an empty directory
            (out_dir / "part.json").write_text("{}")
            ran.append(f"{config['share']}:{out_dir.name}")
            return runner.Run(runtime_s=10.0 / config["share"], trace=out_dir / "trace.json.gz")

    monkeypatch.setattr(runner, "predict", lambda trace, changes: {
        "baseline_runtime_s": 10.0, "crystalperf": {"runtime_s": 20.0}, "linear": {"runtime_s": 20.0},
        "replay": {"runtime_s": 10.0}})
    (tmp_path / "baseline" / "rep0").mkdir(parents=True)
    (tmp_path / "baseline" / "rep0" / "old-part.json").write_text("{}")  # an earlier benchmark's
    cases = runner.run_workload(Workload(), tmp_path, repetitions=3, quick=True, log=lambda _: None)
    # each round runs every configuration once, every other round in reverse
    assert ran == ["1.0:rep0", "0.5:rep0", "0.75:rep0", "0.75:rep1", "0.5:rep1", "1.0:rep1",
                   "1.0:rep2", "0.5:rep2", "0.75:rep2"]
    assert [c.actual_runs_s for c in cases] == [[20.0] * 3, [10.0 / 0.75] * 3]


@pytest.mark.parametrize("module_name", ["spark", "tensorflow", "flink"])
def test_a_framework_that_is_not_installed_skips_every_target_with_the_reason(
        module_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    module = importlib.import_module(f"bench.whatif.{module_name}")
    for name in ("spark_python", "tf_python", "flink_python"):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, lambda: None)
    for workload in module.workloads(tmp_path, quick=False):
        targets = workload.targets(False)
        if "-rtt-" in workload.name:
            assert [t.kind for t in targets] == ["network-rtt"]  # the round-trip case, on relayed links
        elif workload.name.startswith("window-cluster"):
            assert [t.kind for t in targets] == ["network", "network"]  # the links' cases, on a cluster
        else:
            assert len(targets) >= (3 if workload.name.startswith("shuffle-cluster") else 5)
            assert len({t.kind for t in targets}) >= 2
        reasons = {t.unavailable() for t in targets}
        assert all(r and "not installed" in r for r in reasons), reasons


def test_spark_lists_the_network_variation_it_cannot_apply_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.whatif import spark

    monkeypatch.setattr(spark, "spark_python", lambda: "/usr/bin/true")  # Spark "present": the reason is ours
    for workload in spark.workloads(tmp_path, quick=False):
        if not workload.name.startswith("tpch"):
            continue  # the cluster workloads are where the network cases run
        [network] = [t for t in workload.targets(False) if t.kind == "network"]
        assert network.changes == ["network=100mbit"]
        assert network.unavailable() == spark.NETWORK_NOT_WIRED
    assert not [t for w in spark.workloads(tmp_path, quick=True) for t in w.targets(True) if t.kind == "network"]
    # ... on a two-worker cluster in network namespaces, traced on 1 Gbit/s links and predicted on slower ones
    cluster, rtt = [w for w in spark.workloads(tmp_path, quick=False) if w.name.startswith("shuffle-cluster")]
    assert [t.changes for t in cluster.targets(False)] == [["network=200mbit"], ["network=50mbit"], ["executors=1"]]
    assert all(t.config["rate_mbit"] < cluster.baseline["rate_mbit"] for t in cluster.targets(False)[:2])
    # ... and on relayed links, traced with no delay added and re-run with 5 ms on each link
    [round_trip] = rtt.targets(False)
    assert rtt.name == "shuffle-cluster-rtt-1000mbit" and round_trip.changes == ["rtt=+10ms", "network=1000mbit:1000mbit"]
    assert (rtt.baseline["delay_ms"], round_trip.config["delay_ms"]) == (0.0, 5.0)


def test_flink_runs_its_network_and_scale_out_cases_on_a_namespaced_cluster(tmp_path: Path) -> None:
    from bench.whatif import flink

    down, rtt = [w for w in flink.workloads(tmp_path, quick=False) if w.name.startswith("window-cluster")]
    assert down.name == "window-cluster-1000mbit"
    assert down.baseline == {"rate_mbit": 1000, "parallelism": 2, "delay_ms": 0.0}
    [round_trip] = rtt.targets(False)
    assert rtt.name == "window-cluster-rtt-1000mbit" and round_trip.changes == ["rtt=+10ms", "network=1000mbit:1000mbit"]
    assert round_trip.config == {"rate_mbit": 1000, "parallelism": 2, "delay_ms": 5.0}
    assert [t.changes for t in down.targets(False)] == [["network=200mbit"], ["network=50mbit"]]
    assert [t.config["rate_mbit"] for t in down.targets(False)] == [200, 50]
    up = {w.name: w for w in flink.up_workloads(tmp_path, quick=False) if w.name.startswith("window-cluster")}
    assert sorted(up) == ["window-cluster-50mbit", "window-cluster-p1"]
    assert [(t.kind, t.changes) for t in up["window-cluster-50mbit"].targets(False)] == [
        ("network-up", ["network=200mbit"]), ("network-up", ["network=1000mbit"])]
    [scale_out] = up["window-cluster-p1"].targets(False)
    assert scale_out.kind == "parallelism-up" and scale_out.changes == ["parallelism=2"]
    assert scale_out.config == {"rate_mbit": 1000, "parallelism": 2, "delay_ms": 0.0}
    assert not [w for w in flink.workloads(tmp_path, quick=True) + flink.up_workloads(tmp_path, quick=True)
                if w.name.startswith("window-cluster")]
