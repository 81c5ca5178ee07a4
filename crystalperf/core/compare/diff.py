"""``crystalperf diff A B``: what changed between two runs of a job — runtime per operation and its resource
split, operations new or gone, configuration and environment — and which operations on B's critical path
explain the change."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from typing import Any

from crystalperf.core.compare.runs import (
    DIFF_VERSION,
    MAX_EXPLANATIONS,
    MAX_NAME,
    SAME_WITHIN,
    VOLATILE_DIGITS,
    VOLATILE_KEYS,
    Pair,
    Run,
    _dict,
    _num,
    _text,
    match_operations,
    operations_of,
)
from crystalperf.core.errors import BadInputError
from crystalperf.core.resources import CATEGORIES
from crystalperf.core.units import format_bandwidth, format_byte_rate, format_size


def _change(a: float, b: float) -> float | None:
    return (b - a) / a if a > 0 else None


def _op_row(pair: Pair) -> dict[str, Any]:
    a, b = pair.a, pair.b
    shown = b or a
    assert shown is not None
    a_res = a.resource_seconds if a else dict.fromkeys(CATEGORIES, 0.0)
    b_res = b.resource_seconds if b else dict.fromkeys(CATEGORIES, 0.0)
    a_s, b_s = (a.runtime_s if a else 0.0), (b.runtime_s if b else 0.0)
    return {
        "path": shown.path,
        "a_path": a.path if a else None,
        "b_path": b.path if b else None,
        "name": shown.name,
        "kind": shown.kind,
        "status": "matched" if a and b else "new" if b else "missing",
        "matched_by": pair.matched_by,
        "leaf": shown.leaf,
        "a_runtime_s": round(a_s, 6) if a else None,
        "b_runtime_s": round(b_s, 6) if b else None,
        "delta_s": round(b_s - a_s, 6),
        "change": _round(_change(a_s, b_s)) if a and b else None,
        "a_resource_seconds": {c: round(v, 6) for c, v in a_res.items()},
        "b_resource_seconds": {c: round(v, 6) for c, v in b_res.items()},
        "resource_delta_s": {c: round(b_res[c] - a_res[c], 6) for c in CATEGORIES},
        "a_on_critical_path": bool(a and a.on_critical_path),
        "b_on_critical_path": bool(b and b.on_critical_path),
    }


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def changed(rows: Sequence[dict[str, Any]], slower: bool) -> list[dict[str, Any]]:
    """The finest operations whose time moved most one way: ``slower``, those on B's critical path whose time
    grew most (an operation new in B grew from nothing); else those on A's critical path whose time shrank
    most. Each with the resource whose time moved most the same way."""
    sign = 1.0 if slower else -1.0
    on_path = "b_on_critical_path" if slower else "a_on_critical_path"
    chosen = sorted((r for r in rows if r["leaf"] and r[on_path] and sign * r["delta_s"] > 0),
                    key=lambda r: -sign * r["delta_s"])[:MAX_EXPLANATIONS]
    out = []
    for r in chosen:
        resource = max(CATEGORIES, key=lambda c: sign * r["resource_delta_s"][c])
        moved = r["resource_delta_s"][resource]
        status = {"new": " (new in B)", "missing": " (not in B)"}.get(r["status"], "")
        out.append({
            "path": r["path"], "name": r["name"], "kind": r["kind"], "delta_s": r["delta_s"],
            "resource": resource, "resource_delta_s": moved,
            "sentence": f"{r['name'] or r['path']}{status}: {r['delta_s']:+.2f} s, {resource} {moved:+.2f} s",
        })
    return out


def explain(slowed: list[dict[str, Any]], sped_up: list[dict[str, Any]], outside_delta_s: float,
            delta_s: float) -> list[dict[str, Any]]:
    """What explains the change of the runtime: the operations that moved the way the runtime did, and the
    time outside every operation (driver code, start-up) when it moved that way too, largest first."""
    slower = delta_s >= 0
    entries = list(slowed if slower else sped_up)
    if (outside_delta_s > 0) == slower and abs(outside_delta_s) >= 0.005:
        entries.append({"path": None, "name": "outside any operation", "kind": "", "delta_s": round(outside_delta_s, 6),
                        "resource": None, "resource_delta_s": None,
                        "sentence": f"outside any operation (driver code, scheduling, start-up): {outside_delta_s:+.2f} s"})
    return sorted(entries, key=lambda e: -abs(e["delta_s"]))[:MAX_EXPLANATIONS]


def diff(a: Run, b: Run) -> dict[str, Any]:
    """What changed from run A to run B, as a JSON-ready document."""
    pairs = match_operations(operations_of(a), operations_of(b))
    rows = [_op_row(p) for p in pairs]
    delta = b.runtime_s - a.runtime_s
    a_path = _bottleneck_seconds(a)
    b_path = _bottleneck_seconds(b)
    notes = _sameness_notes(a, b, rows)
    settings, ignored = setting_differences(a, b)
    slowed, sped_up = changed(rows, slower=True), changed(rows, slower=False)
    outside = {"a": _outside(a), "b": _outside(b)}
    outside["delta"] = outside["b"] - outside["a"]
    return {
        "diff_version": DIFF_VERSION,
        "a": a.summary(),
        "b": b.summary(),
        "runtime": {"a_s": round(a.runtime_s, 6), "b_s": round(b.runtime_s, 6), "delta_s": round(delta, 6),
                    "change": _round(_change(a.runtime_s, b.runtime_s))},
        "critical_path_seconds": {c: {"a": round(a_path[c], 6), "b": round(b_path[c], 6),
                                      "delta": round(b_path[c] - a_path[c], 6)} for c in CATEGORIES},
        "explanation": explain(slowed, sped_up, outside["delta"], delta),
        "slowed": slowed,
        "sped_up": sped_up,
        "outside_operations_s": {k: round(v, 6) for k, v in outside.items()},
        "operations": rows,
        "new": [r["path"] for r in rows if r["status"] == "new"],
        "missing": [r["path"] for r in rows if r["status"] == "missing"],
        "settings": settings,
        "settings_ignored": ignored,
        "notes": notes,
    }


def _outside(run: Run) -> float:
    return _num(_dict(run.report.get("bottleneck")).get("unattributed_s"))


def _bottleneck_seconds(run: Run) -> dict[str, float]:
    b = run.report.get("bottleneck") or {}
    seconds = _dict(b.get("seconds"))
    return {c: _num(seconds.get(c)) for c in CATEGORIES}


def _sameness_notes(a: Run, b: Run, rows: Sequence[dict[str, Any]]) -> list[str]:
    notes = []
    fa, fb = _text(a.application.get("framework")), _text(b.application.get("framework"))
    if fa != fb:
        notes.append(f"the runs are of different frameworks ({fa or '?'} and {fb or '?'})")
    na, nb = _text(a.application.get("name")), _text(b.application.get("name"))
    if na != nb:
        notes.append(f"the applications' names differ ({na!r} and {nb!r}): the runs may not be of the same job")
    matched = sum(1 for r in rows if r["status"] == "matched")
    if rows and not matched:
        notes.append("no operation of one run matches an operation of the other: not the same job?")
    for run, label in ((a, "A"), (b, "B")):
        if run.report.get("partial"):
            notes.append(f"run {label} is partial: {_text(run.report.get('partial'), 1000)}")
    return notes


# -- settings ----------------------------------------------------------------------------------------

def _shown_bandwidth(key: str, value: Any, origin: Any) -> str | None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    rate = format_bandwidth if key == "network" else format_byte_rate
    return f"{rate(float(value))} ({_text(origin, 20) or '?'})"


def settings_of(run: Run) -> dict[str, tuple[str, float | None]]:
    """What a run ran with, by name: the shown value, and the number when one is compared with a tolerance."""
    out: dict[str, tuple[str, float | None]] = {}
    app = run.application
    version = " ".join(_text(x, 60) for x in (app.get("framework"), app.get("framework_version")) if _text(x))
    if version:
        out["framework"] = (version, None)
    producer = _dict(run.report.get("producer"))
    if _text(producer.get("version")):
        out["crystalperf"] = (_text(producer.get("version"), 60), None)
    base = _dict(run.report.get("baseline"))
    origins = _dict(base.get("bandwidth_origins"))
    for key, label in (("slots", "task slots"), ("executors", "executors"), ("cores_per_executor", "cores per executor")):
        if isinstance(base.get(key), int):
            out[label] = (str(base[key]), None)
    if isinstance(base.get("memory_bytes"), (int, float)) and base["memory_bytes"] > 0:
        out["memory"] = (format_size(float(base["memory_bytes"])), float(base["memory_bytes"]))
    for key in ("network", "disk"):
        shown = _shown_bandwidth(key, base.get(f"{key}_bandwidth"), origins.get(key))
        if shown:
            out[f"{key} bandwidth"] = (shown, float(base[f"{key}_bandwidth"]))
    if _text(base.get("device")):
        out["device"] = (_text(base.get("device"), 20), None)
    if run.trace is not None:
        env = run.trace.environment
        out["hosts"] = (str(len(env.hosts)), None)
        if env.cpu_count:
            out["CPUs"] = (str(env.cpu_count), None)
        if env.cpu_speed != 1.0:
            out["CPU speed"] = (f"{env.cpu_speed:g}", None)
        memories = sorted({e.memory_bytes for e in env.executors if e.memory_bytes})
        if memories:
            out["executor memory"] = (", ".join(format_size(float(m)) for m in memories), None)
        for key, value in env.properties.items():
            out[f"setting {key[:MAX_NAME]}"] = (value[:MAX_NAME], None)
    return out


def _volatile(name: str, a: str, b: str) -> bool:
    """A setting that differs between any two runs (an id, a port, a time stamp, a temporary directory)."""
    last = name.rsplit(".", 1)[-1].lower()
    if last.endswith(VOLATILE_KEYS):
        return True
    masked = [VOLATILE_DIGITS.sub("#", v) for v in (a, b)]
    if masked[0] == masked[1]:
        return True
    temp = tempfile.gettempdir().rstrip("/") + "/"
    return all(v.startswith(temp) or v.startswith("/tmp/") for v in (a, b))


def setting_differences(a: Run, b: Run) -> tuple[list[dict[str, str | None]], int]:
    """The settings that differ (value in A, in B; None: not recorded), and how many differences were left out
    as run-specific (ids, ports, time stamps, temporary directories)."""
    sa, sb = settings_of(a), settings_of(b)
    out: list[dict[str, str | None]] = []
    ignored = 0
    for name in list(sa) + [n for n in sb if n not in sa]:
        va, vb = sa.get(name), sb.get(name)
        if va is None or vb is None:
            if name.startswith("setting ") or name in ("hosts", "CPUs", "executor memory", "CPU speed"):
                # a trace records these, a report does not: absent on one side only because it is a report
                if (a.trace is None) != (b.trace is None):
                    continue
            if va is not None and vb is None and name.startswith("setting ") and _volatile(name, va[0], ""):
                ignored += 1
                continue
            out.append({"name": name, "a": va[0] if va else None, "b": vb[0] if vb else None})
            continue
        if va[0] == vb[0]:
            continue
        if va[1] is not None and vb[1] is not None and _close(va[1], vb[1]):
            continue
        if name.startswith("setting ") and _volatile(name[len("setting "):], va[0], vb[0]):
            ignored += 1
            continue
        out.append({"name": name, "a": va[0], "b": vb[0]})
    return out, ignored


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= SAME_WITHIN * max(abs(a), abs(b))


def exceeds(result: dict[str, Any], percent: float) -> bool:
    """Whether B's runtime exceeds A's by more than ``percent`` per cent."""
    a, b = result["runtime"]["a_s"], result["runtime"]["b_s"]
    return b > a * (1 + percent / 100.0)


def parse_percent(text: str) -> float:
    """``10%``, ``10`` or ``2.5%`` -> per cent; BadInputError otherwise."""
    raw = text.strip().rstrip("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise BadInputError(f"--fail-if-slower {text[:40]!r}: expected a percentage such as 10%") from None
    if not math.isfinite(value) or value < 0 or value > 1e6:
        raise BadInputError(f"--fail-if-slower {text[:40]!r}: expected a percentage from 0% up")
    return value


# -- validate ----------------------------------------------------------------------------------------
