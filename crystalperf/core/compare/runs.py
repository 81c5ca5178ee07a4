"""Two runs of one job side by side.

``crystalperf diff A B``: what changed between two runs (runtime per operation and its resource split,
operations new or gone, configuration and environment) and which operations on B's critical path explain
the change. ``crystalperf validate TRACE RERUN``: the what-if predicted from TRACE for the resources RERUN
ran with, against what RERUN measured, overall and per operation.

Both read traces (analysed here) or ``crystalperf-report.json`` files (taken as they are); everything
they compare is in the report document, so they work on any framework's runs. Operations are matched
level by level: by id where the id and the operation's name agree, else by name and call site in start
order (a Spark stage's id shifts when another job runs first), else by name alone in start order, else by
the name without the place it was called from (``collect at /home/a/job.py:12`` and ``collect at
/tmp/job_v2.py:14``: the same script run from another path or edited above the call) in start order.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crystalperf.core import limits
from crystalperf.core import trace as tr
from crystalperf.core.errors import BadInputError
from crystalperf.core.resources import CATEGORIES
from crystalperf.core.trace.load import not_json_problem

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
# Where a Spark action or a TensorFlow call was made from, at the end of its name: " at FILE:LINE".
CALLED_FROM = re.compile(r"\s+at\s+\S.*:\d+\s*$")
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
        raise BadInputError(not_json_problem(path, exc.lineno, exc.colno, exc.msg), path) from None
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
    def action(self) -> str:
        """The base name without where it was called from."""
        return CALLED_FROM.sub("", self.base_name)

    @property
    def signature(self) -> tuple[str, str, str]:
        return (self.kind, self.base_name, self.call_site)


@dataclass
class Pair:
    a: Op | None
    b: Op | None
    matched_by: str  # "id", "name and call site", "name", "action", or "" for an operation in one run only


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
    for how, key in (("name and call site", lambda o: o.signature), ("name", lambda o: (o.kind, o.base_name)),
                     ("action", lambda o: (o.kind, o.action))):
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
