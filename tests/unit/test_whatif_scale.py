"""The scale cases' runner (``python -m bench.whatif --scale``) without a framework: toy cases whose runs take given
runtimes and write given traces, and a stand-in for ``crystalperf validate`` whose answers are worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.whatif.runner import Run, Target
from bench.whatif.scale import export_traces
from bench.whatif.scale import runner as scale


class ToyCase:
    """A case of one target whose baseline and target runs take the given runtimes in turn, each traced."""

    framework = "spark"
    where = "local"
    python = "/usr/bin/true"

    def __init__(self, baseline_s: list[float], target_s: list[float], *, ceiling: str | None = None,
                 unavailable: str | None = None) -> None:
        self.name = "toy"
        self.ceiling = ceiling
        self.expect = ("cores",)
        self.baseline: dict[str, Any] = {"cores": 1}
        self.config: dict[str, Any] = {"cores": 2}
        self.times = {id(self.baseline): iter(baseline_s), id(self.config): iter(target_s)}
        self.reason = unavailable
        self.ran: list[str] = []

    def targets(self, quick: bool) -> list[Target]:
        return [Target("cores 1 -> 2", "cores-up", self.config, ["cores=2"], lambda: self.reason)]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        runtime = next(self.times[id(config)])
        trace = out_dir / "crystalperf-trace.json.gz"
        trace.write_text(json.dumps({"runtime": runtime}))
        self.ran.append(f"{config['cores']}:{out_dir.name}")
        return Run(runtime, trace, runtime)


def fake_validate(answers: dict[float, float], *, values: dict[str, Any] | None = None) -> Any:
    """validate(trace, rerun): a trace whose run took r seconds predicts answers[r] (its own runtime in the trace's
    measure is r + 1: the trace also spans the session's start)."""
    asked: list[tuple[str, str]] = []

    def run(trace: Path | str, rerun: Path | str) -> dict[str, Any]:
        asked.append((str(trace), str(rerun)))
        r = json.loads(Path(trace).read_text())["runtime"]
        p = answers[r]
        return {"traced_runtime_s": r + 1.0,
                "predicted": {"crystalperf": {"runtime_s": p, "low_s": p * 0.9, "high_s": p * 1.1},
                              "linear": {"runtime_s": (r + 1.0) / 2}, "replay": {"runtime_s": r + 1.0}},
                "changes": {"values": values if values is not None else {"cores": 2}, "description": "cores=2"},
                "not_expressed": [], "notes": ["a note"], "work": {"task_change": r / 100}}

    run.asked = asked  # type: ignore[attr-defined]
    return run


def test_every_run_is_traced_interleaved_and_predicted_from_the_trace_nearest_the_median(tmp_path: Path) -> None:
    case = ToyCase([10.0, 12.0, 9.0], [6.0, 5.0, 7.0])
    validate = fake_validate({10.0: 7.7, 12.0: 9.1, 9.0: 7.0})
    result = scale.run_case(case, tmp_path, repetitions=3, log=lambda _: None, validate_fn=validate)
    assert case.ran == ["1:rep0", "2:rep0", "2:rep1", "1:rep1", "1:rep2", "2:rep2"]
    assert result.baseline_runs_s == [10.0, 12.0, 9.0] and result.actual_runs_s == [6.0, 5.0, 7.0]
    assert (result.baseline_s, result.actual_s) == (10.0, 6.0)
    assert len(result.baseline_traces) == len(result.target_traces) == 3
    # the prediction's pair: the baseline run nearest its median (10 s, round 0), the target nearest its (6 s)
    assert result.trace == str(tmp_path / "baseline" / "rep0" / "crystalperf-trace.json.gz")
    assert result.target_trace == str(tmp_path / "cores_1_-_2" / "rep0" / "crystalperf-trace.json.gz")
    assert validate.asked[0] == (result.trace, result.target_trace)
    assert {t for t, _ in validate.asked} == set(result.baseline_traces)  # every baseline trace predicts it too
    # 7.7 s of an 11 s trace, against the 10 s median: 7.0 s
    assert result.predicted_s["crystalperf"] == pytest.approx(7.0)
    assert result.band_s == pytest.approx((6.3, 7.7)) and result.within_band is False
    assert result.deviation["crystalperf"] == pytest.approx(1 / 6, abs=1e-4)
    assert result.predicted_s["linear"] == pytest.approx(5.0) and result.predicted_s["replay"] == pytest.approx(10.0)
    assert result.gain() == pytest.approx(10 / 7) and result.real_gain == pytest.approx(10 / 6)
    # spread of the three traces' own predictions: (9.1 - 7.0) / 7.7; against the median: 7.0, 7.0, 7.0
    assert [p.crystalperf_s for p in result.per_trace] == [7.7, 9.1, 7.0]
    assert result.spread == pytest.approx(2.1 / 7.7, abs=1e-4) and result.spread_scaled == pytest.approx(0.0)
    assert result.missing == [] and result.unexpected == [] and result.notes == ["a note"]
    assert result.task_change == pytest.approx(0.1)  # the pair's, not another trace's
    assert len(result.load) == 6


def test_a_key_validate_did_not_derive_is_named(tmp_path: Path) -> None:
    case = ToyCase([10.0, 10.0, 10.0], [6.0, 6.0, 6.0])
    result = scale.run_case(case, tmp_path, repetitions=3, log=lambda _: None,
                            validate_fn=fake_validate({10.0: 7.0}, values={"disk": 5e6}))
    assert result.missing == ["cores"] and result.unexpected == ["disk"]
    assert "missing: cores" in scale.markdown([result], scale.summarize([result]), {"machine": "m"})


def test_an_unavailable_case_is_skipped_with_its_reason_and_never_runs(tmp_path: Path) -> None:
    case = ToyCase([], [], unavailable="no blkio")
    result = scale.run_case(case, tmp_path, repetitions=3, log=lambda _: None, validate_fn=fake_validate({}))
    assert result.skipped == "no blkio" and case.ran == [] and not result.measured
    summary = scale.summarize([result])
    assert summary["cases"] == 0 and summary["skipped"] == 1
    assert "skipped: no blkio" in scale.markdown([result], summary, {"machine": "m"})


def test_a_failing_run_is_reported_not_raised(tmp_path: Path) -> None:
    case = ToyCase([10.0], [])  # the target's first run finds no runtime: the job "failed"

    def failing(config: dict[str, Any], out_dir: Path) -> Run:
        raise RuntimeError("spark job failed: boom")

    case.run = failing  # type: ignore[method-assign]
    result = scale.run_case(case, tmp_path, repetitions=3, log=lambda _: None, validate_fn=fake_validate({}))
    assert result.error and "boom" in result.error and not result.measured


def _measured(name: str, baseline: float, actual: float, predicted: float, *, ceiling: str | None = None,
              band: tuple[float, float] | None = None, spread: float | None = None) -> scale.ScaleResult:
    r = scale.ScaleResult("flink", name, "parallelism 2 -> 4", "parallelism-up", ceiling=ceiling,
                          baseline_s=baseline, actual_s=actual, band_s=band, spread=spread)
    r.predicted_s = {"crystalperf": predicted, "linear": baseline / 2, "replay": baseline}
    r.deviation = {n: abs(p - actual) / actual for n, p in r.predicted_s.items()}
    r.within_band = band[0] <= actual <= band[1] if band else None
    return r


def test_the_summary_gives_mean_max_band_coverage_ceilings_and_spread() -> None:
    results = [
        _measured("a", 10.0, 5.0, 5.5, band=(5.0, 6.0), spread=0.02),
        _measured("b", 10.0, 10.0, 9.5, ceiling="disk", band=(9.0, 9.8), spread=0.08),  # no gain, band misses
        _measured("c", 10.0, 10.0, 6.0, ceiling="cores", band=(5.0, 7.0), spread=0.04),  # predicts a gain
        # more JVMs on the same link: a loss predicted, as the run had one: no gain
        _measured("e", 10.0, 12.0, 11.5, ceiling="link", band=(11.0, 13.0), spread=0.04),
        scale.ScaleResult("tensorflow", "d", "threads", "cores", skipped="TensorFlow is not installed"),
    ]
    s = scale.summarize(results)
    assert s["cases"] == 4 and s["skipped"] == 1
    assert s["mean_crystalperf"] == pytest.approx((0.1 + 0.05 + 0.4 + 0.5 / 12) / 4, abs=1e-4)
    assert s["max_crystalperf"] == pytest.approx(0.4)
    assert s["band_coverage"] == pytest.approx(2 / 4, abs=1e-4)  # a and e
    assert s["ceiling"]["cases"] == 3 and s["ceiling"]["no_gain_predicted"] == 2
    rows = {r["case"]: r for r in s["ceiling"]["rows"]}
    assert rows["b"]["predicted_gain"] == pytest.approx(10 / 9.5, abs=1e-4) and rows["b"]["real_gain"] == 1.0
    assert s["spread"]["within_5pct"] == 3 and s["spread"]["max"] == 0.08
    assert set(s["per_bound"]) == {"cpu (slots)", "disk", "cores", "link"}


def test_repredict_keeps_the_runs_and_predicts_again(tmp_path: Path) -> None:
    case = ToyCase([10.0, 12.0, 9.0], [6.0, 5.0, 7.0])
    result = scale.run_case(case, tmp_path / "runs", repetitions=3, log=lambda _: None,
                            validate_fn=fake_validate({10.0: 7.7, 12.0: 9.1, 9.0: 7.0}))
    [json_path, md_path] = scale.write_outputs([result], tmp_path / "out", {"machine": "test", "runs_commit": "abc"})
    assert md_path.exists() and "| +10% |" in md_path.read_text()
    # a results file written before the task threads' CPU was compared reads as unknown
    old = json.loads(json_path.read_text())
    del old["cases"][0]["task_change"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert scale.load_results(tmp_path / "old.json")[1][0].task_change is None
    # a better model: every trace now predicts the target's 6 s (its own runtime's share of it)
    scale.repredict(json_path, log=lambda _: None, validate_fn=fake_validate({10.0: 6.6, 12.0: 7.8, 9.0: 6.0}))
    header, [again] = scale.load_results(json_path)
    assert header["runs_commit"] == "abc" and "predicted_by" in header
    assert again.actual_runs_s == [6.0, 5.0, 7.0] and again.baseline_traces == result.baseline_traces
    assert again.predicted_s["crystalperf"] == pytest.approx(6.0) and again.deviation["crystalperf"] == 0.0
    assert again.within_band is True


def test_a_case_s_traces_are_exported_with_a_readme_line(tmp_path: Path) -> None:
    case = ToyCase([10.0, 12.0, 9.0], [6.0, 5.0, 7.0], ceiling="disk")
    result = scale.run_case(case, tmp_path / "runs", repetitions=3, log=lambda _: None,
                            validate_fn=fake_validate({10.0: 7.7, 12.0: 9.1, 9.0: 7.0}))
    folder = export_traces(result, tmp_path / "traces", "python -m bench.whatif --scale --workload toy")
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["README.md", "baseline-rep0.json.gz", "baseline-rep1.json.gz", "baseline-rep2.json.gz",
                     "case.json", "target-rep0.json.gz", "target-rep1.json.gz", "target-rep2.json.gz"]
    readme = (folder / "README.md").read_text()
    assert "--workload toy" in readme and "10.00 / 12.00 / 9.00" in readme and "bound by disk" in readme
