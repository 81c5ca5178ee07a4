"""The scale cases' runner (``python -m bench.whatif --scale``), framework-independent.

A scale case is a job run at two settings that change how much of the machine it gets: task slots (Spark's
``local[N]`` or executors, Flink's parallelism, TensorFlow's threads) and, for the ceiling-bound cases, a
setting that cannot help because a device, a link or the cores already bind. Each case runs both settings
``repetitions`` times, interleaved (``runner.interleave``), **every run traced**; the prediction is the one a
user gets from ``crystalperf validate <baseline trace> <target trace>``: the what-if is derived from the two
traces, not told. The baseline trace is the run nearest the baseline's median, the target trace the run
nearest the target's; each of the other baseline traces predicts the same target too, and their spread says
how much a prediction depends on which run was traced.

Predictions are of the traced run's own runtime and are expressed against the measured baseline (``p × median
/ traced``), as the rest of the what-if bench does (``runner.apply_prediction``). The runtime of a run is the
job's own measure (``Run.runtime_s``), the one the other what-if cases use.

This module imports nothing from the benchmark's framework modules: the unit tests load it by itself.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.whatif.runner import PREDICTORS, Run, Target, interleave, nearest_median

RESULTS_JSON = "scale-results.json"
RESULTS_MD = "scale-results.md"
# A ceiling-bound case predicts "no gain" when its predicted speed-up is at most this above 1 (issue 42): what the
# ceiling forbids is promising a gain; a predicted loss (more JVMs on the same cores or link) is no gain too.
NO_GAIN_WITHIN = 0.10


class ScaleCase(Protocol):
    """A workload (``runner.Workload``) of one target, every run traced, and what the case is about."""

    name: str
    framework: str
    baseline: dict[str, Any]
    where: str  # "local" or "cluster"
    ceiling: str | None  # the resource that binds whatever the slots ("disk", "link", "cores"); None: CPU-bound
    expect: tuple[str, ...]  # the what-if keys validate must derive from the two traces (e.g. ("cores",))
    python: str | None

    def targets(self, quick: bool) -> list[Target]: ...

    def run(self, config: dict[str, Any], out_dir: Path) -> Run: ...


@dataclass
class TracePrediction:
    """One baseline trace's prediction of the target: as ``crystalperf validate`` printed it (of that run's own
    runtime as its trace defines it) and expressed against the baseline's median."""

    trace: str
    trace_runtime_s: float
    crystalperf_s: float
    scaled_s: float


@dataclass
class ScaleResult:
    framework: str
    case: str
    target: str
    kind: str
    where: str = "local"
    direction: str = "up"  # "up": the target has more slots than the baseline; "down": fewer
    ceiling: str | None = None
    expect: list[str] = field(default_factory=list)
    baseline_runs_s: list[float] = field(default_factory=list)
    actual_runs_s: list[float] = field(default_factory=list)
    baseline_s: float | None = None
    actual_s: float | None = None
    baseline_traces: list[str] = field(default_factory=list)
    target_traces: list[str] = field(default_factory=list)
    trace: str | None = None  # the baseline trace nearest the baseline's median
    target_trace: str | None = None  # the target trace nearest the target's median
    derived: dict[str, Any] = field(default_factory=dict)  # what validate derived: values and description
    missing: list[str] = field(default_factory=list)  # expected keys validate did not derive
    unexpected: list[str] = field(default_factory=list)  # keys it derived that the case does not change
    not_expressed: list[str] = field(default_factory=list)
    predicted_s: dict[str, float] = field(default_factory=dict)  # against the baseline's median
    band_s: tuple[float, float] | None = None
    deviation: dict[str, float] = field(default_factory=dict)
    within_band: bool | None = None
    per_trace: list[TracePrediction] = field(default_factory=list)
    spread: float | None = None  # (max - min) / median of the baseline traces' raw predictions
    spread_scaled: float | None = None  # the same, each expressed against the baseline's median
    notes: list[str] = field(default_factory=list)
    # the target run's task threads' CPU over the traced run's, less one (validate's ``work``): work the prediction
    # keeps constant that changed
    task_change: float | None = None
    load: list[float] = field(default_factory=list)  # the 1-minute load average as each run started
    commit: str | None = None  # the checkout that ran the jobs
    date: str | None = None
    skipped: str | None = None
    error: str | None = None

    @property
    def measured(self) -> bool:
        return self.skipped is None and self.error is None and bool(self.actual_s) and bool(self.predicted_s)

    def gain(self, predictor: str = "crystalperf") -> float | None:
        """Predicted speed-up of the target over the baseline (``baseline / predicted``)."""
        p = self.predicted_s.get(predictor)
        return self.baseline_s / p if self.baseline_s and p else None

    @property
    def real_gain(self) -> float | None:
        return self.baseline_s / self.actual_s if self.baseline_s and self.actual_s else None


def validate(trace: Path | str, rerun: Path | str) -> dict[str, Any]:
    """``crystalperf validate TRACE RERUN --json``, as a user runs it; its JSON document."""
    with tempfile.TemporaryDirectory(prefix="crystalperf-scale-") as tmp:
        out = Path(tmp) / "validate.json"
        args = [sys.executable, "-m", "crystalperf.core.cli", "validate", str(trace), str(rerun), "--json", str(out)]
        done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=1800)
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"crystalperf validate failed (exit {done.returncode}): "
                               f"{(done.stderr or done.stdout).strip()[-1500:]}")
        document: dict[str, Any] = json.loads(out.read_text())
        return document


@contextmanager
def team_lock(path: Path | None) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``path`` (None: no lock) — a shared machine's convention for heavy jobs."""
    if path is None:
        yield
        return
    import fcntl

    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class _LoadRecorder:
    """The case with the load average recorded as each run starts (the machine is shared)."""

    def __init__(self, case: ScaleCase, load: list[float]) -> None:
        self.case, self.load = case, load
        self.name, self.framework, self.baseline = case.name, case.framework, case.baseline

    def targets(self, quick: bool) -> list[Target]:
        return self.case.targets(quick)

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        self.load.append(round(os.getloadavg()[0], 2))
        return self.case.run(config, out_dir)


def run_case(case: ScaleCase, out_dir: Path, *, repetitions: int, log: Callable[[str], None] = print,
             validate_fn: Callable[[Path | str, Path | str], dict[str, Any]] | None = None) -> ScaleResult:
    """Runs one scale case (both settings, interleaved, every run traced) and predicts its target with validate."""
    [target] = case.targets(False)
    result = ScaleResult(case.framework, case.name, target.name, target.kind, where=case.where,
                         direction="up" if target.kind.endswith("-up") else "down", ceiling=case.ceiling,
                         expect=list(case.expect))
    if case.python is None:
        result.skipped = f"{case.framework} is not installed in any environment the benchmark knows"
        return result
    reason = target.unavailable()
    if reason:
        result.skipped = reason
        log(f"[{case.framework}/{case.name}] skipped: {reason}")
        return result
    recorder = _LoadRecorder(case, result.load)
    try:
        _, measured, baseline_runs, runs = interleave(recorder, out_dir, repetitions=repetitions, quick=False, log=log)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        result.error = f"a run failed: {str(exc)[-1500:]}"
        log(f"[{case.framework}/{case.name}] {result.error}")
        return result
    target_runs = runs[target.name]
    result.baseline_runs_s = [round(r.runtime_s, 4) for r in baseline_runs]
    result.actual_runs_s = [round(r.runtime_s, 4) for r in target_runs]
    result.baseline_s = statistics.median(r.runtime_s for r in baseline_runs)
    result.actual_s = statistics.median(r.runtime_s for r in target_runs)
    traced = [r for r in baseline_runs if r.trace is not None]
    rerun = [r for r in target_runs if r.trace is not None]
    result.baseline_traces = [str(r.trace) for r in traced]
    result.target_traces = [str(r.trace) for r in rerun]
    if not traced or not rerun:
        result.error = "no trace written by a baseline run" if not traced else "no trace written by a target run"
        return result
    result.trace = str(nearest_median(traced, result.baseline_s).trace)
    result.target_trace = str(nearest_median(rerun, result.actual_s).trace)
    predict_case(result, validate_fn or validate, log)
    return result


def predict_case(result: ScaleResult, validate_fn: Callable[[Path | str, Path | str], dict[str, Any]],
                 log: Callable[[str], None] = print) -> None:
    """Validate the target trace against every baseline trace (the one nearest the median first: its prediction is
    the case's); fills the prediction, the derived changes and the spread. ``--repredict`` calls it again."""
    assert result.trace is not None and result.target_trace is not None and result.baseline_s and result.actual_s
    result.per_trace, result.notes, result.error = [], [], None
    for path in [result.trace] + [t for t in result.baseline_traces if t != result.trace]:
        try:
            doc = validate_fn(path, result.target_trace)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            result.error = str(exc)[-1500:]
            log(f"[{result.framework}/{result.case}] validate {path}: {result.error}")
            return
        trace_runtime = float(doc["traced_runtime_s"])
        factor = result.baseline_s / trace_runtime if trace_runtime > 0 else 1.0
        raw = float(doc["predicted"]["crystalperf"]["runtime_s"])
        result.per_trace.append(TracePrediction(path, round(trace_runtime, 4), round(raw, 4), round(raw * factor, 4)))
        if path != result.trace:
            continue
        predicted = doc["predicted"]
        result.predicted_s = {name: round(float(predicted[name]["runtime_s"]) * factor, 4) for name in PREDICTORS}
        c = predicted["crystalperf"]
        result.band_s = ((round(c["low_s"] * factor, 4), round(c["high_s"] * factor, 4))
                         if c.get("low_s") is not None else None)
        values = dict(doc["changes"]["values"])
        result.derived = {"values": values, "description": doc["changes"].get("description", "")}
        result.missing = [k for k in result.expect if k not in values]
        result.unexpected = sorted(k for k in values if k not in result.expect)
        result.not_expressed = list(doc.get("not_expressed") or [])
        result.notes = list(doc.get("notes") or [])
        work = doc.get("work") or {}
        result.task_change = work.get("task_change") if isinstance(work, dict) else None
    result.deviation = {n: round(abs(p - result.actual_s) / result.actual_s, 4) for n, p in result.predicted_s.items()}
    result.within_band = (result.band_s[0] <= result.actual_s <= result.band_s[1]) if result.band_s else None
    raw = [p.crystalperf_s for p in result.per_trace]
    scaled = [p.scaled_s for p in result.per_trace]
    if len(raw) >= 2:
        result.spread = round((max(raw) - min(raw)) / statistics.median(raw), 4)
        result.spread_scaled = round((max(scaled) - min(scaled)) / statistics.median(scaled), 4)
    log(f"[{result.framework}/{result.case}] {result.target}: baseline {result.baseline_s:.2f} s, actual "
        f"{result.actual_s:.2f} s; derived {result.derived.get('description') or result.derived.get('values')}; "
        + ", ".join(f"{n} {result.predicted_s[n]:.2f} s ({result.deviation[n]:.1%})" for n in PREDICTORS)
        + (f"; spread {result.spread:.1%}" if result.spread is not None else ""))


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def summarize(results: Sequence[ScaleResult]) -> dict[str, Any]:
    """The issue's figures: mean and max deviation, band coverage, the ceiling-bound cases' predicted gain against
    the real one, and the spread of the baseline traces' predictions; per framework, place and direction too."""
    measured = [r for r in results if r.measured]

    def block(rows: Sequence[ScaleResult]) -> dict[str, Any]:
        banded = [r for r in rows if r.within_band is not None]
        return {
            "cases": len(rows),
            **{f"mean_{p}": _mean([r.deviation[p] for r in rows]) for p in PREDICTORS},
            "max_crystalperf": max((r.deviation["crystalperf"] for r in rows), default=None),
            "band_coverage": round(sum(1 for r in banded if r.within_band) / len(banded), 4) if banded else None,
        }

    summary: dict[str, Any] = {**block(measured), "skipped": sum(1 for r in results if r.skipped),
                               "failed": sum(1 for r in results if r.error)}
    for group, key in (("per_framework", lambda r: r.framework), ("per_place", lambda r: r.where),
                       ("per_direction", lambda r: r.direction),
                       ("per_bound", lambda r: r.ceiling or "cpu (slots)")):
        buckets: dict[str, list[ScaleResult]] = {}
        for r in measured:
            buckets.setdefault(key(r), []).append(r)
        summary[group] = {name: block(rows) for name, rows in sorted(buckets.items())}
    ceiling = [r for r in measured if r.ceiling]
    summary["ceiling"] = {
        "cases": len(ceiling),
        "no_gain_predicted": sum(1 for r in ceiling if (r.gain() or 0) <= 1 + NO_GAIN_WITHIN),
        "rows": [{"case": r.case, "ceiling": r.ceiling, "predicted_gain": _round(r.gain()),
                  "linear_gain": _round(r.gain("linear")), "real_gain": _round(r.real_gain)} for r in ceiling],
    }
    spreads = [r.spread for r in measured if r.spread is not None]
    scaled = [r.spread_scaled for r in measured if r.spread_scaled is not None]
    summary["spread"] = {"cases": len(spreads), "mean": _mean(spreads), "max": max(spreads, default=None),
                         "within_5pct": sum(1 for s in spreads if s <= 0.05),
                         "mean_scaled": _mean(scaled), "max_scaled": max(scaled, default=None)}
    summary["derivation"] = {"missing": {r.case: r.missing for r in measured if r.missing},
                             "unexpected": {r.case: r.unexpected for r in measured if r.unexpected}}
    return summary


def _round(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


def _pct(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "–"


def markdown(results: Sequence[ScaleResult], summary: dict[str, Any], header: dict[str, str]) -> str:
    lines = [" · ".join(f"{k}: {v}" for k, v in header.items()), "",
             "| cases | crystalperf mean | max | linear mean | replay mean | band covers the real run | "
             "ceiling cases predicting no gain (≤ 1.1×) | 3-trace spread mean (max; ≤ 5 %) |",
             "|---|---|---|---|---|---|---|---|"]
    s, c, sp = summary, summary["ceiling"], summary["spread"]
    lines.append(f"| {s['cases']} (+{s['skipped']} skipped, {s['failed']} failed) | **{_pct(s['mean_crystalperf'])}** | "
                 f"{_pct(s['max_crystalperf'])} | {_pct(s['mean_linear'])} | {_pct(s['mean_replay'])} | "
                 f"{_pct(s['band_coverage'])} | {c['no_gain_predicted']} of {c['cases']} | "
                 f"{_pct(sp['mean'])} ({_pct(sp['max'])}; {sp['within_5pct']} of {sp['cases']}) |")
    for group, title in (("per_framework", "framework"), ("per_place", "where"), ("per_direction", "direction"),
                         ("per_bound", "bound by")):
        lines += ["", f"| {title} | cases | crystalperf | max | linear | replay | band covers |",
                  "|---|---|---|---|---|---|---|"]
        for name, row in summary[group].items():
            lines.append(f"| {name} | {row['cases']} | {_pct(row['mean_crystalperf'])} | {_pct(row['max_crystalperf'])} | "
                         f"{_pct(row['mean_linear'])} | {_pct(row['mean_replay'])} | {_pct(row['band_coverage'])} |")
    lines += ["", "| case | change | where | bound by | baseline runs (s) | target runs (s) | derived by validate | "
              "crystalperf (band) | linear | replay | gain predicted / real | 3-trace predictions (spread) | "
              "task threads' CPU, target against traced |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        head = f"| {r.framework}/{r.case} | {r.target} | {r.where} | {r.ceiling or 'cpu (slots)'} |"
        if not r.measured:
            why = f"skipped: {r.skipped}" if r.skipped else f"failed: {(r.error or 'no prediction')[:200]}"
            lines.append(f"{head} {why} | | | | | | | | |")
            continue
        assert r.actual_s is not None and r.baseline_s is not None
        band = f" ({r.band_s[0]:.2f}–{r.band_s[1]:.2f}{'' if r.within_band else ', misses'})" if r.band_s else ""
        derived = r.derived.get("description") or ", ".join(f"{k}={v}" for k, v in r.derived.get("values", {}).items())
        if r.missing:
            derived += f" (**missing: {', '.join(r.missing)}**)"
        trio = " / ".join(f"{p.crystalperf_s:.2f}" for p in r.per_trace)
        lines.append(
            f"{head} {' / '.join(f'{x:.2f}' for x in r.baseline_runs_s)} (median {r.baseline_s:.2f}) | "
            f"{' / '.join(f'{x:.2f}' for x in r.actual_runs_s)} (median {r.actual_s:.2f}) | {derived or '–'} | "
            f"{r.predicted_s['crystalperf']:.2f}{band}, {_pct(r.deviation['crystalperf'])} | "
            f"{r.predicted_s['linear']:.2f}, {_pct(r.deviation['linear'])} | "
            f"{r.predicted_s['replay']:.2f}, {_pct(r.deviation['replay'])} | "
            f"{r.gain() or 0:.2f}× / {r.real_gain or 0:.2f}× | {trio} ({_pct(r.spread)}) | "
            f"{'–' if r.task_change is None else f'{r.task_change:+.0%}'} |")
    loads = [x for r in results for x in r.load]
    if loads:
        lines += ["", f"Load average (1 min) as the runs started: median {statistics.median(loads):.2f}, "
                      f"max {max(loads):.2f} ({len(loads)} runs)."]
    return "\n".join(lines) + "\n"


def write_outputs(results: Sequence[ScaleResult], out_dir: Path, header: dict[str, str]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(results)
    data = {**header, "summary": summary, "cases": [asdict(r) for r in results]}
    json_path, md_path = out_dir / RESULTS_JSON, out_dir / RESULTS_MD
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    md_path.write_text(markdown(results, summary, header))
    return [json_path, md_path]


def load_results(path: Path) -> tuple[dict[str, str], list[ScaleResult]]:
    """A results file written by ``write_outputs``: its header and its cases."""
    data = json.loads(path.read_text())
    header = {k: v for k, v in data.items() if k not in ("summary", "cases")}
    cases = []
    for c in data["cases"]:
        c = dict(c)
        c["band_s"] = tuple(c["band_s"]) if c.get("band_s") else None
        c["per_trace"] = [TracePrediction(**p) for p in c.get("per_trace", [])]
        cases.append(ScaleResult(**c))
    return header, cases


def repredict(path: Path, *, log: Callable[[str], None] = print,
              validate_fn: Callable[[Path | str, Path | str], dict[str, Any]] | None = None,
              only: set[str] | None = None) -> list[Path]:
    """Predict every measured case of ``path`` again from its traces (after a model change) and rewrite its outputs;
    the real runs stay as they were measured. ``only``: the case names to predict again (the others are kept)."""
    header, cases = load_results(path)
    for case in cases:
        if case.skipped or case.trace is None or case.target_trace is None or not case.actual_s:
            continue
        if only and case.case not in only:
            continue
        predict_case(case, validate_fn or validate, log)
    header = {**header, "predicted_by": commit(), "predicted_on": time.strftime("%Y-%m-%d %H:%M")}
    return write_outputs(cases, path.parent, header)


def commit(root: Path | None = None) -> str:
    """The checkout's commit (with ``+dirty`` when it has uncommitted changes), or ``unknown``."""
    where = str(root or Path(__file__).resolve().parents[3])
    try:
        sha = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")
