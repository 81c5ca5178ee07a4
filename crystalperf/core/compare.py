"""Two runs of one job side by side.

``crystalperf diff A B``: what changed between two runs (runtime per operation and its resource split,
operations new or gone, configuration and environment) and which operations on B's critical path explain
the change. ``crystalperf validate TRACE RERUN``: the what-if predicted from TRACE for the resources RERUN
ran with, against what RERUN measured, overall and per operation.

Both read traces (analysed here) or ``crystalperf-report.json`` files (taken as they are); everything
they compare is in the report document, so they work on any framework's runs. Operations are matched
level by level: by id where the id and the operation's name agree, else by name and call site in start
order (a Spark stage's id shifts when another job runs first), else by name alone in start order.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crystalperf.core import limits
from crystalperf.core import trace as tr
from crystalperf.core.errors import BadInputError
from crystalperf.core.resources import CATEGORIES
from crystalperf.core.units import format_bandwidth, format_byte_rate, format_size

DIFF_VERSION = "1.0"
VALIDATE_VERSION = "1.0"
REPORT_NAME = "crystalperf-report.json"
MAX_EXPLANATIONS = 5
# Bandwidths and memory closer than this are the same configuration (observed rates wobble from run to run).
SAME_WITHIN = 0.10
# Property values equal once digit runs this long are masked differ only in an id, a port or a time stamp.
VOLATILE_DIGITS = re.compile(r"\d{5,}")
VOLATILE_KEYS = ("id", "port", "starttime", "submittime", "pid")
# "stage 12: count at X.java:0", "job 3: ..." -> "count at X.java:0": the number is the run's, not the job's.
NUMBERED_NAME = re.compile(r"^\s*[A-Za-z][\w ]{0,30}?[ _#-]?\d+\s*:\s*")
MAX_NAME = 300  # characters of an operation's name kept for matching and display


# -- one run -----------------------------------------------------------------------------------------

@dataclass
class Run:
    """One side of a comparison: its report document, and its trace when it was given one."""

    path: str
    report: dict[str, Any]
    trace: tr.Trace | None = None
    analysis: Any = None  # core.analysis.Analysis of the trace, kept for a prediction from it

    @property
    def kind(self) -> str:
        return "trace" if self.trace is not None else "report"

    @property
    def runtime_s(self) -> float:
        return _num(self.report.get("total_runtime_s"))

    @property
    def application(self) -> dict[str, Any]:
        app = self.report.get("application")
        return app if isinstance(app, dict) else {}

    def summary(self) -> dict[str, Any]:
        b = _dict(self.report.get("bottleneck"))
        return {
            "path": self.path,
            "kind": self.kind,
            "application": {k: self.application.get(k) for k in ("framework", "framework_version", "id", "name")},
            "total_runtime_s": round(self.runtime_s, 6),
            "bottleneck": _text(b.get("resource")),
            "partial": self.report.get("partial"),
        }


def _num(value: Any) -> float:
    """A number from a document that may be hostile: anything not a finite number is 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0.0
    return float(value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any, limit: int = MAX_NAME) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _read_document(path: Path) -> Any:
    raw = limits.read_regular(path, limits.MAX_TRACE_BYTES, "trace or report file")
    if raw[:2] == b"\x1f\x8b":
        raw = limits.gunzip(raw, path)
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInputError("neither a crystalperf trace nor a report (not UTF-8 text)", path) from None
    except json.JSONDecodeError as exc:
        raise BadInputError(f"not valid JSON (truncated or corrupt?) at line {exc.lineno} column {exc.colno}: "
                            f"{exc.msg}", path) from None
    except (ValueError, RecursionError) as exc:
        raise BadInputError(f"neither a crystalperf trace nor a report ({type(exc).__name__})", path) from None


def _check_report(document: dict[str, Any], path: Path) -> dict[str, Any]:
    for key, kind in (("operations", list), ("application", dict), ("bottleneck", dict)):
        if not isinstance(document.get(key), kind):
            raise BadInputError(f"not a crystalperf report ({key!r} is missing or not a JSON {kind.__name__})", path)
    if not isinstance(document.get("total_runtime_s"), (int, float)):
        raise BadInputError("not a crystalperf report (no total_runtime_s)", path)
    document["operations"] = [op for op in document["operations"] if isinstance(op, dict)]
    return document


def load_run(path: str | Path, *, classifier: Any = None, need_trace: bool = False,
             with_predictions: bool = False) -> Run:
    """A trace (analysed here; with the default what-ifs only when ``with_predictions``) or a report, told apart
    by content. A directory holds one (the trace first). ``need_trace``: a report is refused (a prediction
    needs the trace)."""
    path = Path(path)
    if limits.is_directory(path):
        names = tr.TRACE_FILENAMES + (() if need_trace else (REPORT_NAME,))
        found = next((path / n for n in names if limits.is_regular_file(path / n)), None)
        if found is None:
            raise BadInputError(f"no {' or '.join(names)} in this directory", path)
        path = found
    elif not limits.exists(path):
        raise BadInputError("no such file", path)
    document = _read_document(path)
    if not isinstance(document, dict):
        raise BadInputError("neither a crystalperf trace nor a report (the top level is not a JSON object)", path)
    if "report_version" in document and "schema_version" not in document:
        if need_trace:
            raise BadInputError("is a report; a prediction needs the trace it was made from", path)
        return Run(str(path), _check_report(document, path))
    if "schema_version" not in document:
        raise BadInputError("neither a crystalperf trace nor a report (no schema_version or report_version)", path)
    trace = tr.parse_trace(document, path)
    del document
    from crystalperf.core.analysis import analyze

    try:
        analysis = analyze(trace, classifier=classifier, scenarios=None if with_predictions else [],
                           band=with_predictions)
    except BadInputError as exc:
        raise BadInputError(exc.problem, path) from None
    return Run(str(path), analysis.report, trace, analysis)


# -- matching operations -----------------------------------------------------------------------------

@dataclass
class Op:
    """An operation of a report, read defensively."""

    path: str
    id: str
    name: str
    kind: str
    parent: str | None
    start: float
    runtime_s: float
    resource_seconds: dict[str, float]
    on_critical_path: bool
    leaf: bool
    call_site: str

    @classmethod
    def of(cls, entry: dict[str, Any]) -> Op:
        attributes = _dict(entry.get("attributes"))
        seconds = _dict(entry.get("resource_seconds"))
        op_id = _text(entry.get("id")) or _text(entry.get("path"))
        return cls(
            path=_text(entry.get("path"), 4 * MAX_NAME) or op_id,
            id=op_id,
            name=_text(entry.get("name")),
            kind=_text(entry.get("kind"), 60),
            parent=entry.get("parent") if isinstance(entry.get("parent"), str) else None,
            start=_num(entry.get("start")),
            runtime_s=_num(entry.get("runtime_s")),
            resource_seconds={c: _num(seconds.get(c)) for c in CATEGORIES},
            on_critical_path=entry.get("on_critical_path") is True,
            leaf=not entry.get("children"),
            call_site=_text(attributes.get("call_site")),
        )

    @property
    def base_name(self) -> str:
        return NUMBERED_NAME.sub("", self.name, count=1)

    @property
    def signature(self) -> tuple[str, str, str]:
        return (self.kind, self.base_name, self.call_site)


@dataclass
class Pair:
    a: Op | None
    b: Op | None
    matched_by: str  # "id", "name and call site", "name", or "" for an operation in one run only


def _levels(ops: Iterable[Op]) -> dict[str | None, list[Op]]:
    known = {op.path for op in ops}
    levels: dict[str | None, list[Op]] = {}
    for op in ops:
        parent = op.parent if op.parent in known else None
        levels.setdefault(parent, []).append(op)
    for level in levels.values():
        level.sort(key=lambda o: o.start)
    return levels


def match_operations(a_ops: Sequence[Op], b_ops: Sequence[Op]) -> list[Pair]:
    """Every operation of A and of B, paired where they are the same operation of the job (see the module's
    docstring); in B's order, each level after its parent, A's unmatched operations after their level."""
    a_levels, b_levels = _levels(a_ops), _levels(b_ops)
    pairs: list[Pair] = []

    def walk(a_parent: str | None, b_parent: str | None) -> None:
        for pair in _match_level(a_levels.get(a_parent, []), b_levels.get(b_parent, [])):
            pairs.append(pair)
            if pair.a is not None and pair.b is not None:
                walk(pair.a.path, pair.b.path)
            elif pair.b is not None:
                _unmatched_below(b_levels, pair.b.path, pairs, side="b")
            elif pair.a is not None:
                _unmatched_below(a_levels, pair.a.path, pairs, side="a")

    walk(None, None)
    return pairs


def _unmatched_below(levels: dict[str | None, list[Op]], parent: str, pairs: list[Pair], side: str) -> None:
    for op in levels.get(parent, []):
        pairs.append(Pair(None, op, "") if side == "b" else Pair(op, None, ""))
        _unmatched_below(levels, op.path, pairs, side)


def _match_level(a: list[Op], b: list[Op]) -> list[Pair]:
    partner: dict[int, tuple[Op, str]] = {}  # index in b -> (A's operation, how)
    taken: set[int] = set()  # indices in a
    b_by_id = {op.id: i for i, op in enumerate(b)}
    for i, op in enumerate(a):
        j = b_by_id.get(op.id)
        if j is not None and j not in partner and b[j].signature == op.signature:
            partner[j] = (op, "id")
            taken.add(i)
    for how, key in (("name and call site", lambda o: o.signature), ("name", lambda o: (o.kind, o.base_name))):
        waiting: dict[Any, list[int]] = {}
        for j, op in enumerate(b):
            if j not in partner:
                waiting.setdefault(key(op), []).append(j)
        for i, op in enumerate(a):
            if i in taken:
                continue
            queue = waiting.get(key(op))
            if queue:
                partner[queue.pop(0)] = (op, how)
                taken.add(i)
    pairs = [Pair(partner[j][0], op, partner[j][1]) if j in partner else Pair(None, op, "") for j, op in enumerate(b)]
    pairs += [Pair(op, None, "") for i, op in enumerate(a) if i not in taken]
    return pairs


def operations_of(run: Run) -> list[Op]:
    return [Op.of(entry) for entry in run.report.get("operations", [])]


# -- diff --------------------------------------------------------------------------------------------

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

@dataclass
class DerivedChanges:
    values: dict[str, float | str] = field(default_factory=dict)
    not_expressed: list[str] = field(default_factory=list)


def derive_changes(traced: Run, rerun: Run) -> DerivedChanges:
    """The what-if that turns TRACE's resources into RERUN's, from the two reports' ``baseline`` (what the
    predictor starts from) and, where both are traces, their environments. Differences a what-if cannot
    express are listed, not guessed."""
    assert traced.trace is not None
    from crystalperf.core.predict.base import scaling_keys

    a = _dict(traced.report.get("baseline"))
    b = _dict(rerun.report.get("baseline"))
    out = DerivedChanges()

    def whole(base: dict[str, Any], key: str) -> int | None:
        value = base.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None

    slots_b = whole(b, "slots")
    resized = [k for k in ("slots", "cores_per_executor", "executors") if whole(b, k) and whole(a, k) != whole(b, k)]
    if resized and slots_b:
        if "parallelism" in scaling_keys(traced.trace):
            out.values["parallelism"] = slots_b
        else:
            cores, executors = whole(b, "cores_per_executor"), whole(b, "executors")
            if cores and executors and cores * executors == slots_b:
                # said the way the user configures it: the cores and executors that changed
                if cores != whole(a, "cores_per_executor"):
                    out.values["cores"] = cores
                if executors != whole(a, "executors"):
                    out.values["executors"] = executors
            if not out.values:
                out.values["slots"] = slots_b
    ma, mb = a.get("memory_bytes"), b.get("memory_bytes")
    if isinstance(ma, (int, float)) and isinstance(mb, (int, float)) and ma > 0 and mb > 0:
        if not _close(float(ma), float(mb)):
            out.values["memory"] = float(mb)
    elif bool(ma) != bool(mb):
        out.not_expressed.append("the memory for the job's data is recorded in one run only")
    if _text(a.get("device")) and _text(b.get("device")) and a.get("device") != b.get("device"):
        out.values["device"] = _text(b.get("device"), 10)
    for key in ("network", "disk"):
        _bandwidth_change(key, a, b, out)
    if rerun.trace is not None:
        ea, eb = traced.trace.environment, rerun.trace.environment
        if ea.cpu_speed != eb.cpu_speed:
            out.values["cpu_speed"] = eb.cpu_speed / ea.cpu_speed
        if ea.cpu_count and eb.cpu_count and ea.cpu_count != eb.cpu_count:
            out.not_expressed.append(f"the machines' CPUs differ ({ea.cpu_count} and {eb.cpu_count}); the "
                                     "prediction keeps the traced run's CPUs beyond the task slots")
        if len(ea.hosts) != len(eb.hosts):
            out.not_expressed.append(f"the runs used {len(ea.hosts)} and {len(eb.hosts)} hosts")
    settings, _ = setting_differences(traced, rerun)
    covered = {"task slots", "executors", "cores per executor", "memory", "network bandwidth", "disk bandwidth",
               "device", "crystalperf", "CPU speed", "CPUs", "hosts"}
    others = [s for s in settings if s["name"] not in covered]
    if others:
        shown = "; ".join(f"{s['name']}: {s['a']} -> {s['b']}" for s in others[:8])
        more = f" (+{len(others) - 8} more)" if len(others) > 8 else ""
        out.not_expressed.append(f"{len(others)} other difference(s), part of the prediction only as far as they "
                                 f"changed the resources above: {shown}{more}")
    return out


def _bandwidth_change(key: str, a: dict[str, Any], b: dict[str, Any], out: DerivedChanges) -> None:
    va, vb = a.get(f"{key}_bandwidth"), b.get(f"{key}_bandwidth")
    if not (isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va > 0 and vb > 0):
        return
    if _close(float(va), float(vb)):
        return
    oa, ob = _dict(a.get("bandwidth_origins")).get(key), _dict(b.get("bandwidth_origins")).get(key)

    def configured(base: dict[str, Any], origin: Any) -> bool:
        # a declared bandwidth, or a cgroup limit the job ran under, is configuration; a rate the job was seen
        # moving data at is its demand as much as the device's supply
        seen = _dict(base.get("observed")).get(key)
        return origin in ("declared", "stated") or (origin == "observed" and isinstance(seen, dict)
                                                     and seen.get("limit") is not None)

    rate = format_bandwidth if key == "network" else format_byte_rate
    if configured(a, oa) and configured(b, ob):
        out.values[key] = float(vb)
    else:
        out.not_expressed.append(
            f"the {key} bandwidth differs ({rate(float(va))}, {oa or '?'}; {rate(float(vb))}, {ob or '?'}) but "
            "is not a declared bandwidth or a cgroup limit in both runs: what a job is seen moving is its "
            "demand, not a configuration, so it is left out of the prediction")


def _measured(run: Run, streaming: bool) -> float:
    latency = _dict(run.report.get("streaming")).get("latency_s")
    if streaming and isinstance(latency, (int, float)) and latency > 0:
        return float(latency)
    return run.runtime_s


def _error(predicted: float, measured: float) -> float | None:
    return (predicted - measured) / measured if measured > 0 else None


def validate(traced: Run, rerun: Run, *, classifier: Any = None, band: bool = True) -> dict[str, Any]:
    """The prediction made from ``traced`` for ``rerun``'s resources, against ``rerun``'s measurement."""
    from crystalperf.core.analysis import analyze
    from crystalperf.core.predict import Changes, Predictor

    assert traced.trace is not None
    fa, fb = _text(traced.application.get("framework")), _text(rerun.application.get("framework"))
    if fa != fb:
        raise BadInputError(f"the runs are of different frameworks ({fa or '?'} and {fb or '?'}): "
                            "nothing to validate", rerun.path)
    pairs = match_operations(operations_of(traced), operations_of(rerun))
    if pairs and not any(p.a is not None and p.b is not None for p in pairs):
        raise BadInputError("no operation of the rerun matches one of the trace: not a run of the same job",
                            rerun.path)
    derived = derive_changes(traced, rerun)
    changes = Changes(dict(derived.values))
    analysis = traced.analysis or analyze(traced.trace, classifier=classifier, scenarios=[], band=False)
    predictor = Predictor(analysis.profile)
    prediction = predictor.predict(changes, band=band)
    points = _operation_points(predictor)
    streaming = predictor.streaming and predictor.runtime != traced.trace.application.duration
    measured = _measured(rerun, streaming)
    c = prediction.crystalperf
    estimates = {"crystalperf": c, "linear": prediction.linear, "replay": prediction.replay}
    rows = []
    for pair in pairs:
        if pair.a is None or pair.b is None or not pair.a.leaf or pair.a.path not in points:
            continue
        predicted = points[pair.a.path]
        rows.append({
            "path": pair.b.path, "trace_path": pair.a.path, "name": pair.b.name, "kind": pair.b.kind,
            "traced_s": round(pair.a.runtime_s, 6), "predicted_s": round(predicted, 6),
            "measured_s": round(pair.b.runtime_s, 6), "error": _round(_error(predicted, pair.b.runtime_s)),
            "on_critical_path": pair.b.on_critical_path,
        })
    notes = list(prediction.notes)
    if _text(traced.application.get("name")) != _text(rerun.application.get("name")):
        notes.append("the applications' names differ: the runs may not be of the same job")
    if rerun.report.get("partial"):
        notes.append(f"the rerun is partial: {_text(rerun.report.get('partial'), 1000)}")
    return {
        "validate_version": VALIDATE_VERSION,
        "trace": traced.summary(),
        "rerun": rerun.summary(),
        "changes": {"values": dict(changes.values), "description": changes.describe()},
        "not_expressed": derived.not_expressed,
        "traced_runtime_s": round(prediction.baseline_runtime_s, 6),
        "measured_runtime_s": round(measured, 6),
        "predicted": {name: {"runtime_s": round(e.runtime_s, 6),
                             **({"low_s": round(e.low_s, 6), "high_s": round(e.high_s or e.runtime_s, 6)}
                                if e.low_s is not None else {})}
                      for name, e in estimates.items()},
        "error": {name: _round(_error(e.runtime_s, measured)) for name, e in estimates.items()},
        "within_band": (c.low_s <= measured <= (c.high_s or c.runtime_s)) if c.low_s is not None else None,
        "operations": rows,
        "operations_unmatched": sum(1 for p in pairs if p.a is None or p.b is None),
        "notes": notes,
    }


def _operation_points(predictor: Any) -> dict[str, float]:
    """Each finest operation's predicted duration in the point prediction the predictor last made (streaming
    predictions have none: they predict the path's latency as a whole)."""
    units = getattr(predictor, "_units", {})
    return {path: float(unit.point) for path, unit in units.items()
            if getattr(unit, "point", None) is not None and math.isfinite(unit.point)}


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def to_json(result: dict[str, Any]) -> str:
    """The result as indented JSON (NaN and infinities as null)."""
    return json.dumps(_finite(result), indent=2) + "\n"


def write_json(result: dict[str, Any], path: str | Path) -> Path:
    """Write the result as JSON; the file appears whole or not at all."""
    from crystalperf.core import atomic

    return atomic.write_bytes(Path(path), to_json(result).encode("utf-8"))


__all__ = ["Op", "Pair", "Run", "changed", "derive_changes", "diff", "explain", "exceeds", "load_run", "match_operations",
           "parse_percent", "setting_differences", "to_json", "validate", "write_json"]
