"""The fidelity benchmark's arithmetic, framework-free (unit-tested in tests/unit/test_fidelity_scoring.py).

Ground truth of a job: the shares of <cpu, disk, network, waiting> its OS counters give over its measured
window, and the dominant resource its construction intends (confirmed when the measured shares agree).
A method (crystalperf's attribution, or the paper's) is scored on three things: the job's verdict
(``bottleneck.resource``), each constructed operation's dominant resource, and the mean absolute error
of the job's vector components against the measured shares.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

RESOURCES = ("cpu", "disk", "network", "waiting")
METHODS = ("crystalperf", "paper")


@dataclass
class Measurement:
    """OS counters over a job's measured window, and the limits the job ran under."""

    wall_s: float
    slots: int  # threads that can work at once (task slots, parallelism, TF's cores)
    cpu_s: float = 0.0  # CPU time of the job's whole process tree (cpuacct), children included
    read_bytes: float = 0.0  # bytes the process tree read from the throttled device
    read_bps: float | None = None  # the throttle, bytes/s (None: not throttled)
    rx_bytes: float = 0.0  # bytes received through the shaped link
    link_bps: float | None = None  # the link's rate, bytes/s (None: no shaped link)
    waits: bool = False  # by construction, the time no resource accounts for is waiting


def measured_shares(m: Measurement) -> dict[str, float]:
    """<cpu, disk, network, waiting> shares of the job's window, summing to 1.

    cpu: CPU-seconds over the slots' seconds. disk / network: how long the throttled device / shaped link
    was busy with the job's bytes (bytes / limit) over the window: a saturated device or link is what every
    slot waits on. waiting: for jobs built to wait (sleeping input, rate-limited source), the rest of the
    slots' time. Each fraction is capped at 1, then the four are normalised, so time lost to other
    processes on the machine (a CPU-bound job gets less than its slots) is not counted as a resource.
    """
    if m.wall_s <= 0:
        raise ValueError("a measured window must have a positive wall time")
    raw = {
        "cpu": m.cpu_s / (m.wall_s * max(m.slots, 1)),
        "disk": m.read_bytes / m.read_bps / m.wall_s if m.read_bps else 0.0,
        "network": m.rx_bytes / m.link_bps / m.wall_s if m.link_bps else 0.0,
    }
    raw = {k: min(max(v, 0.0), 1.0) for k, v in raw.items()}
    raw["waiting"] = max(0.0, 1.0 - sum(raw.values())) if m.waits else 0.0
    return normalise(raw)


def normalise(vector: Mapping[str, float]) -> dict[str, float]:
    """The four components, missing ones 0 (reports written before the waiting category), summing to 1
    (all zeros stay zeros)."""
    values = {r: max(float(vector.get(r, 0.0) or 0.0), 0.0) for r in RESOURCES}
    total = sum(values.values())
    return {r: v / total for r, v in values.items()} if total > 0 else values


def dominant(vector: Mapping[str, float]) -> str:
    """The largest component (ties go to the earlier of cpu, disk, network, waiting)."""
    values = normalise(vector)
    return max(RESOURCES, key=lambda r: (values[r], -RESOURCES.index(r)))


def mean_absolute_error(predicted: Mapping[str, float], truth: Mapping[str, float]) -> float:
    p, t = normalise(predicted), normalise(truth)
    return sum(abs(p[r] - t[r]) for r in RESOURCES) / len(RESOURCES)


def report_vector(report: Mapping[str, Any]) -> dict[str, float]:
    """A report's job vector: the critical path's resource shares (``bottleneck.share``), else its seconds."""
    bottleneck = report.get("bottleneck") or {}
    return normalise(bottleneck.get("share") or bottleneck.get("seconds") or {})


@dataclass
class OperationTruth:
    """Operations whose name matches ``pattern`` (a regular expression) use ``resource`` by construction."""

    pattern: str
    resource: str
    # (attribute, regular expression): only operations whose attribute matches use the resource by construction
    # (the stages of a Spark scan that read the file, not the aggregation after its shuffle).
    only_if: tuple[str, str] | None = None


def score_operations(operations: Iterable[Mapping[str, Any]], truths: Sequence[OperationTruth],
                     kinds: Sequence[str] = ()) -> list[dict[str, str]]:
    """One row per operation name (of the given kinds, if any) that a truth names: the name, the resource
    the method gave it (the dominant component of its vector; operations sharing a name, such as a layer in
    every training step, are one row, their vectors weighted by runtime) and the constructed one. A name is
    scored against the first truth it matches."""
    summed: dict[str, dict[str, float]] = {}
    truth_of: dict[str, str] = {}
    for op in operations:
        name = str(op.get("name", ""))
        if (kinds and op.get("kind") not in kinds) or not op.get("vector"):
            continue
        truth = next((t for t in truths if re.search(t.pattern, name)), None)
        if truth is None:
            continue
        if truth.only_if is not None:
            attribute, pattern = truth.only_if
            if not re.search(pattern, str((op.get("attributes") or {}).get(attribute, ""))):
                continue
        weight = float(op.get("runtime_s") or 0.0) or 1e-9
        vector = normalise(op["vector"])
        total = summed.setdefault(name, dict.fromkeys(RESOURCES, 0.0))
        for r in RESOURCES:
            total[r] += weight * vector[r]
        truth_of[name] = truth.resource
    return [{"name": n, "predicted": dominant(v), "truth": truth_of[n]} for n, v in summed.items()]


@dataclass
class MethodResult:
    verdict: str | None = None  # bottleneck.resource
    vector: dict[str, float] = field(default_factory=dict)
    operations: list[dict[str, str]] = field(default_factory=list)
    report: str | None = None
    error: str | None = None


@dataclass
class JobResult:
    framework: str
    job: str
    kind: str  # cpu, disk, network, idle, mixed, pyudf
    intended: str | None  # the dominant resource by construction; None: the measured one decides (mixed)
    measurement: dict[str, Any] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)
    methods: dict[str, MethodResult] = field(default_factory=dict)
    trace: str | None = None
    skipped: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def truth(self) -> str | None:
        if self.intended is not None:
            return self.intended
        return dominant(self.shares) if self.shares else None

    @property
    def confirmed(self) -> bool:
        """The measured shares agree with the construction (always, for a job without an intended one)."""
        return bool(self.shares) and dominant(self.shares) == self.truth


def scored(results: Iterable[JobResult]) -> list[JobResult]:
    """Jobs that ran and whose ground truth the OS confirmed: the only ones that count in the scores."""
    return [r for r in results if r.skipped is None and r.error is None and r.confirmed]


def summarise(results: Sequence[JobResult]) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """Per framework and ``overall``, per method: ``jobs``, ``verdict_accuracy``, ``operations``,
    ``operation_accuracy``, ``mae`` (mean over jobs of the vector's mean absolute error)."""
    counted = scored(results)
    groups: dict[str, list[JobResult]] = {}
    for r in counted:
        groups.setdefault(r.framework, []).append(r)
    groups["overall"] = counted
    summary: dict[str, dict[str, dict[str, float | int | None]]] = {}
    for name, rows in groups.items():
        summary[name] = {}
        for method in METHODS:
            runs = [(r, r.methods[method]) for r in rows if method in r.methods and r.methods[method].error is None]
            verdicts = [m.verdict == r.truth for r, m in runs]
            ops = [o["predicted"] == o["truth"] for _, m in runs for o in m.operations]
            errors = [mean_absolute_error(m.vector, r.shares) for r, m in runs if m.vector]
            summary[name][method] = {
                "jobs": len(runs),
                "verdict_accuracy": sum(verdicts) / len(verdicts) if verdicts else None,
                "operations": len(ops),
                "operation_accuracy": sum(ops) / len(ops) if ops else None,
                "mae": statistics.fmean(errors) if errors else None,
            }
    return summary


def _pct(value: float | int | None) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def summary_table(summary: Mapping[str, Mapping[str, Mapping[str, float | int | None]]]) -> str:
    """Markdown: one row per framework (and overall), both methods side by side."""
    lines = ["| framework | jobs | verdict: crystalperf | verdict: paper | operations | ops: crystalperf "
             "| ops: paper | vector MAE: crystalperf | vector MAE: paper |",
             "|---|---|---|---|---|---|---|---|---|"]
    order = [k for k in summary if k != "overall"] + (["overall"] if "overall" in summary else [])
    for name in order:
        ours, paper = summary[name].get("crystalperf", {}), summary[name].get("paper", {})
        mae = [f"{m['mae']:.3f}" if m.get("mae") is not None else "-" for m in (ours, paper)]
        lines.append(f"| {name} | {ours.get('jobs', 0)} | {_pct(ours.get('verdict_accuracy'))} "
                     f"| {_pct(paper.get('verdict_accuracy'))} | {ours.get('operations', 0)} "
                     f"| {_pct(ours.get('operation_accuracy'))} | {_pct(paper.get('operation_accuracy'))} "
                     f"| {mae[0]} | {mae[1]} |")
    return "\n".join(lines)


def _vec(vector: Mapping[str, float]) -> str:
    if not vector:
        return "-"
    v = normalise(vector)
    return "/".join(f"{v[r]:.2f}" for r in RESOURCES)


def jobs_table(results: Sequence[JobResult]) -> str:
    """Markdown: one row per job: truth, confirmation, both methods' verdicts and vectors
    (<cpu/disk/network/waiting>)."""
    lines = ["| job | truth | measured c/d/n/w | confirmed | crystalperf | vector | ops ok | paper | vector "
             "| ops ok |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        name = f"{r.framework}/{r.job}"
        if r.skipped or r.error:
            lines.append(f"| {name} | {r.truth or '-'} | - | - | {'skipped: ' + r.skipped if r.skipped else 'error: ' + str(r.error)[:80]} |"
                         " | | | | |")
            continue
        cells = []
        for method in METHODS:
            m = r.methods.get(method)
            if m is None or m.error:
                cells += [f"error: {m.error[:60]}" if m and m.error else "-", "-", "-"]
                continue
            ok = sum(o["predicted"] == o["truth"] for o in m.operations)
            cells += [m.verdict or "-", _vec(m.vector), f"{ok}/{len(m.operations)}"]
        lines.append(f"| {name} | {r.truth} | {_vec(r.shares)} | {'yes' if r.confirmed else 'NO'} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)
