"""The what-if accuracy benchmark, framework-independent part.

For each workload: run the baseline configuration with the hook (one trace), predict every target
configuration from that one trace with ``crystalperf predict --json`` (crystalperf and its two
baselines, linear scaling and task replay without vectors), re-run the job for real at each target
(several repetitions, median; interleaved with the baseline's, see ``run_workload``) and compare:
deviation = |predicted - actual| / actual (paper §7).

A workload supplies ``run(config, out_dir) -> Run`` (it runs the job with the hook and returns the
measured runtime and the trace) and its targets. A target the machine cannot apply (no cgroup write
access, no ``tc``...) says why in ``unavailable()`` and is reported as skipped, never dropped.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

PREDICTORS = ("crystalperf", "linear", "replay")
PAPER_MEAN_DEVIATION = {"spark": 0.1349, "flink": 0.1270, "tensorflow": 0.1422}


@dataclass
class Run:
    runtime_s: float  # the job's runtime as its trace defines it (latency for streaming jobs)
    trace: Path | None = None
    wall_s: float = 0.0


@dataclass
class Target:
    name: str  # e.g. "cores 2->1"
    kind: str  # resource kind: cores, memory, cpu_share, network, disk, device, parallelism
    config: dict[str, Any]  # how the workload runs it for real
    changes: list[str]  # what crystalperf predict is told: ["cores=1"]
    unavailable: Callable[[], str | None] = lambda: None


class Workload(Protocol):
    name: str
    framework: str
    baseline: dict[str, Any]

    def targets(self, quick: bool) -> list[Target]: ...

    def run(self, config: dict[str, Any], out_dir: Path) -> Run: ...


@dataclass
class CaseResult:
    framework: str
    workload: str
    target: str
    kind: str
    actual_s: float | None = None
    actual_runs_s: list[float] = field(default_factory=list)
    predicted_s: dict[str, float] = field(default_factory=dict)
    band_s: tuple[float, float] | None = None
    deviation: dict[str, float] = field(default_factory=dict)
    skipped: str | None = None
    baseline_s: float | None = None  # measured baseline (median), what predictions are expressed against
    trace: str | None = None  # the baseline trace the predictions came from


def predict(trace: Path, changes: Sequence[str]) -> dict[str, Any]:
    """Ask the CLI, as a user would."""
    args = [sys.executable, "-m", "crystalperf.core.cli", "predict", str(trace), "--json"]
    for change in changes:
        args += ["--set", change]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"crystalperf predict failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def run_workload(workload: Workload, out_dir: Path, *, repetitions: int, quick: bool,
                 log: Callable[[str], None] = print) -> list[CaseResult]:
    """Every configuration of a workload, the baseline (traced) and its targets, ``repetitions`` times
    (``interleave``), each target predicted from the traced baseline run nearest the baseline's median."""
    results, measured, baseline_runs, runs = interleave(workload, out_dir, repetitions=repetitions, quick=quick,
                                                        log=log)
    if not measured:
        return results
    baseline_s = statistics.median(r.runtime_s for r in baseline_runs)
    traced = nearest_median([r for r in baseline_runs if r.trace is not None], baseline_s)
    log(f"  baseline runtime {baseline_s:.2f} s (trace {traced.trace})")
    for target, case in measured:
        case.baseline_s, case.trace = baseline_s, str(traced.trace)
        apply_prediction(case, predict(traced.trace, target.changes))  # type: ignore[arg-type]
        case.actual_runs_s = [r.runtime_s for r in runs[target.name]]
        case.actual_s = statistics.median(case.actual_runs_s)
        case.deviation = deviations(case)
        log(f"  {target.name}: actual {case.actual_s:.2f} s; "
            + ", ".join(f"{n} {case.predicted_s[n]:.2f} s ({case.deviation[n]:.1%})" for n in PREDICTORS))
    return results


def interleave(workload: Workload, out_dir: Path, *, repetitions: int, quick: bool,
               log: Callable[[str], None] = print
               ) -> tuple[list[CaseResult], list[tuple[Target, CaseResult]], list[Run], dict[str, list[Run]]]:
    """Runs the baseline and every available target ``repetitions`` times; returns every target's case (the
    unavailable ones marked skipped), the measured (target, case) pairs, the baseline's runs and each target's.

    The repetitions are interleaved: each round runs the baseline and every target once, the odd rounds in reverse
    order. A machine whose speed drifts over the hour a workload takes (a VM's neighbours: the same Flink job took
    25 s on one day and 34 s on another) then slows the baseline and its targets alike; running each
    configuration's repetitions back to back would compare a baseline of one period with targets of another."""
    out_dir.mkdir(parents=True, exist_ok=True)
    log(f"[{workload.framework}/{workload.name}] baseline {workload.baseline}")
    results: list[CaseResult] = []
    measured: list[tuple[Target, CaseResult]] = []
    for target in workload.targets(quick):
        case = CaseResult(workload.framework, workload.name, target.name, target.kind)
        results.append(case)
        reason = target.unavailable()
        if reason:
            case.skipped = reason
            log(f"  {target.name}: skipped ({reason})")
        else:
            measured.append((target, case))
    baseline_runs: list[Run] = []
    runs: dict[str, list[Run]] = {target.name: [] for target, _ in measured}
    for i in range(repetitions):
        order: list[Target | None] = [None, *(target for target, _ in measured)]
        for target in order if i % 2 == 0 else reversed(order):
            name, config = ("baseline", workload.baseline) if target is None else (target.name, target.config)
            run = workload.run(config, fresh(out_dir / run_folder(name) / f"rep{i}"))
            (baseline_runs if target is None else runs[name]).append(run)
            log(f"  round {i + 1}: {name} {run.runtime_s:.2f} s")
    return results, measured, baseline_runs, runs


def run_folder(name: str) -> str:
    """A configuration's folder name: its name with what a path cannot hold well (``/`` of ``MB/s``, spaces,
    ``->``) as ``_``."""
    return re.sub(r"[^\w.+=-]+", "_", name).strip("_") or "run"


def nearest_median(runs: Sequence[Run], median: float) -> Run:
    """Of several traced runs, the one nearest the median: predictions are scaled to the median, and that scaling is
    close to 1 from it, whereas it is wrong for the parts of a prediction that do not scale with the traced run's
    noise (a transfer at a link's rate)."""
    return min(runs, key=lambda r: abs(r.runtime_s - median))


def fresh(run_dir: Path) -> Path:
    """An empty directory for one run: a hook's files left by an earlier benchmark must not be taken for this run's
    (the Flink reporter's parts carry the job id, so an old part sat beside the new one and, sorting first, was read
    as the new run's trace)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    return run_dir


def apply_prediction(case: CaseResult, doc: dict[str, Any]) -> None:
    """Predictions are of the traced run's runtime; they are expressed against the measured baseline
    (median of the repetitions) so that one traced run's noise does not count against every case."""
    scale = case.baseline_s / doc["baseline_runtime_s"] if case.baseline_s and doc.get("baseline_runtime_s") else 1.0
    for name in PREDICTORS:
        case.predicted_s[name] = doc[name]["runtime_s"] * scale
    if "low_s" in doc["crystalperf"]:
        case.band_s = (doc["crystalperf"]["low_s"] * scale, doc["crystalperf"]["high_s"] * scale)


def deviations(case: CaseResult) -> dict[str, float]:
    assert case.actual_s
    return {n: abs(p - case.actual_s) / case.actual_s for n, p in case.predicted_s.items()}


def repredict(cases: Sequence[CaseResult], changes_of: Callable[[CaseResult], Sequence[str]]) -> None:
    """Predict the measured cases again from their baseline traces (after a model change): the real
    runs stay as they were measured."""
    for case in cases:
        if case.skipped or not case.trace or not case.actual_s:
            continue
        apply_prediction(case, predict(Path(case.trace), changes_of(case)))
        case.deviation = deviations(case)


def summarize(results: Sequence[CaseResult]) -> dict[str, Any]:
    """Mean deviation per framework and per resource kind, for each predictor."""
    measured = [r for r in results if r.skipped is None and r.actual_s]
    summary: dict[str, Any] = {"per_framework": {}, "per_kind": {}, "cases": len(measured),
                               "skipped": len(results) - len(measured)}
    # "up" cases (kind "<resource>-up") are traced on a throttled resource and predicted on more of it
    def direction(r: CaseResult) -> str:
        return "up" if r.kind.endswith("-up") else "down"

    summary["per_direction"] = {}
    for group, key in (("per_framework", lambda r: r.framework), ("per_kind", lambda r: f"{r.framework}/{r.kind}"),
                       ("per_direction", lambda r: f"{r.framework}/{direction(r)}")):
        buckets: dict[str, list[CaseResult]] = {}
        for r in measured:
            buckets.setdefault(key(r), []).append(r)
        for name, rows in sorted(buckets.items()):
            summary[group][name] = {
                "cases": len(rows),
                **{p: statistics.fmean(r.deviation[p] for r in rows) for p in PREDICTORS},
            }
    return summary


def write_outputs(results: Sequence[CaseResult], out_dir: Path, *, machine: str) -> list[Path]:
    summary = summarize(results)
    data = {"machine": machine, "date": time.strftime("%Y-%m-%d"), "summary": summary,
            "cases": [asdict(r) for r in results]}
    json_path = out_dir / "whatif-results.json"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    md_path = out_dir / "whatif-results.md"
    md_path.write_text(markdown(results, summary, machine))
    written = [json_path, md_path]
    plot = plot_predicted_vs_actual(results, out_dir / "whatif-predicted-vs-actual.png")
    if plot:
        written.append(plot)
    return written


def markdown(results: Sequence[CaseResult], summary: dict[str, Any], machine: str) -> str:
    lines = [f"Machine: {machine}. Date: {time.strftime('%Y-%m-%d')}.", "",
             "| framework | cases | crystalperf | linear scaling | task replay | paper |", "|---|---|---|---|---|---|"]
    for fw, row in summary["per_framework"].items():
        paper = PAPER_MEAN_DEVIATION.get(fw)
        lines.append(f"| {fw} | {row['cases']} | {row['crystalperf']:.1%} | {row['linear']:.1%} | "
                     f"{row['replay']:.1%} | {paper:.1%} |" if paper is not None else
                     f"| {fw} | {row['cases']} | {row['crystalperf']:.1%} | {row['linear']:.1%} | {row['replay']:.1%} | – |")
    lines += ["", "| framework/direction | cases | crystalperf | linear | replay |", "|---|---|---|---|---|"]
    for name, row in summary.get("per_direction", {}).items():
        lines.append(f"| {name} | {row['cases']} | {row['crystalperf']:.1%} | {row['linear']:.1%} | {row['replay']:.1%} |")
    lines += ["", "| framework/resource | cases | crystalperf | linear | replay |", "|---|---|---|---|---|"]
    for kind, row in summary["per_kind"].items():
        lines.append(f"| {kind} | {row['cases']} | {row['crystalperf']:.1%} | {row['linear']:.1%} | {row['replay']:.1%} |")
    lines += ["", "| workload | target | actual (median) | crystalperf (band) | linear | replay |",
              "|---|---|---|---|---|---|"]
    for r in results:
        if r.skipped:
            lines.append(f"| {r.framework}/{r.workload} | {r.target} | skipped: {r.skipped} | | | |")
            continue
        band = f" ({r.band_s[0]:.2f}–{r.band_s[1]:.2f})" if r.band_s else ""
        lines.append(
            f"| {r.framework}/{r.workload} | {r.target} | {r.actual_s:.2f} s | "
            f"{r.predicted_s['crystalperf']:.2f} s{band}, {r.deviation['crystalperf']:.1%} | "
            f"{r.predicted_s['linear']:.2f} s, {r.deviation['linear']:.1%} | "
            f"{r.predicted_s['replay']:.2f} s, {r.deviation['replay']:.1%} |"
        )
    return "\n".join(lines) + "\n"


def plot_predicted_vs_actual(results: Sequence[CaseResult], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    measured = [r for r in results if r.skipped is None and r.actual_s]
    if not measured:
        return None
    fig, ax = plt.subplots(figsize=(6, 6))
    markers = {"crystalperf": "o", "linear": "x", "replay": "^"}
    for name in PREDICTORS:
        ax.scatter([r.actual_s for r in measured], [r.predicted_s[name] for r in measured],
                   marker=markers[name], label=name, alpha=0.8)
    values = [v for r in measured for v in (r.actual_s or 0, *r.predicted_s.values()) if v > 0]
    # log axes: linear scaling's misses are 10-30x off and would squeeze every other point into a corner
    low, top = min(values) / 1.3, max(values) * 1.3
    ax.plot([low, top], [low, top], color="grey", linewidth=1, linestyle="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, top)
    ax.set_ylim(low, top)
    ax.set_xlabel("actual runtime (s, log)")
    ax.set_ylabel("predicted runtime (s, log)")
    ax.set_title("What-if predictions against real re-runs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
