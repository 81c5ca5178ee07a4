"""The terminal summary printed by ``crystalperf analyze`` and by hooks at job end.

Every string that comes from the trace (names, ids, sentences and advice that quote them) goes through
:func:`_safe` before it reaches the console: control characters and bidirectional overrides escaped (a name
must not clear the screen, set the clipboard with OSC 52 or reorder what the reader sees), rich markup
escaped (a ``[/bold]`` in a name is text, not a tag), and long text cut (a megabyte name must not take the
table layout seconds).
"""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crystalperf.core.errors import printable
from crystalperf.core.report.base import Renderer
from crystalperf.core.resources import CATEGORIES
from crystalperf.core.units import format_seconds

MAX_ROWS = 12
MAX_CELL = 120  # characters of a name in a table cell
MAX_LINE = 1000  # characters of a sentence or an advice line


def _safe(value: Any, limit: int = MAX_CELL) -> str:
    """Trace-supplied text as the console may print it: escaped, one line, at most ``limit`` characters."""
    return escape(printable(str(value), limit))


def _vector(v: dict[str, float]) -> str:
    return " ".join(f"{k} {v.get(k, 0.0):.0%}" for k in CATEGORIES)


def _top_busy_function(functions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The most-sampled function whose samples mostly worked; the most-sampled one when all mostly waited.

    A thread parked for a buffer is often an operation's most-sampled frame, yet naming it in the one column a
    reader scans says "the time went here" of time that went nowhere; the JSON and HTML keep every function."""
    for function in functions:
        if (function.get("vector") or {}).get("waiting", 0.0) < 0.5:
            return function
    return functions[0] if functions else None


def _function_cell(function: dict[str, Any] | None) -> str:
    """A function's name, and where the classifier guessed its class (``low_confidence``) while its samples mostly
    worked, that confidence: the operation's split beside it is then no verdict."""
    if function is None:
        return ""
    name = _safe(function["name"])
    confidence = function.get("confidence")
    working = (function.get("vector") or {}).get("waiting", 0.0) < 0.5
    if function.get("low_confidence") and working and isinstance(confidence, (int, float)):
        return f"{name} (guess: confidence {confidence:.0%})"
    return name


class TerminalRenderer(Renderer):
    name = "terminal"
    extension = ".txt"

    def __init__(self, width: int = 110, color: bool = False) -> None:
        self.width = width
        self.color = color

    def print(self, report: dict[str, Any], console: Console) -> None:
        app = report["application"]
        b = report["bottleneck"]
        console.print(f"[bold]crystalperf[/bold] {_safe(app['framework'])} application "
                      f"{_safe(app['name'] or app['id'], 300)}: {format_seconds(report['total_runtime_s'])}")
        if report.get("partial"):
            console.print(f"[bold]Partial trace[/bold]: {_safe(report['partial'], MAX_LINE)} — the figures cover "
                          "the run until then")
        iterations = report.get("iterations")
        if iterations:
            console.print(f"Mean step time {format_seconds(iterations['step_time_s'])} over {iterations['steps']} "
                          "profiled steps; predictions below are for all of them")
        console.print(f"[bold]Bottleneck: {_safe(b['resource'])}[/bold] — {_safe(b['sentence'], MAX_LINE)}")
        secs = b["seconds"]
        console.print("Critical path: " + ", ".join(f"{k} {format_seconds(secs.get(k, 0.0))}" for k in CATEGORIES)
                      + (f"; outside operations {format_seconds(b['unattributed_s'])}" if b["unattributed_s"] > 0 else ""))
        ops = sorted((o for o in report["operations"] if o["on_critical_path"] and not o["children"]),
                     key=lambda o: -o["runtime_s"])
        table = Table(title="Operations on the critical path", show_lines=False)
        for col in ("operation", "kind", "runtime", "cpu / disk / network / waiting", "from", "top function"):
            table.add_column(col, overflow="fold")
        for o in ops[:MAX_ROWS]:
            top_cell = _function_cell(_top_busy_function(o["top_functions"]))
            source = o["vector_source"] + (f" ({o['measured_share']:.0%} measured)" if o.get("measured_share") else "")
            table.add_row(_safe(o["name"]), _safe(o["kind"], 40), format_seconds(o["runtime_s"]),
                          _vector(o["vector"]), _safe(source), top_cell)
        if len(ops) > MAX_ROWS:
            table.add_row(f"... {len(ops) - MAX_ROWS} more", "", "", "", "", "")
        console.print(table)
        sources = report.get("sources") or {}
        measured = sources.get("measured_fraction")
        if measured is not None:
            # an imported event log has no stacks: what was not measured follows the bytes the tasks moved
            rest = ("inferred from the sampled functions" if sources.get("samples")
                    else "split by the bytes the tasks moved (no stacks were sampled), else counted as cpu")
            console.print(f"Measured by the framework or the OS: {measured:.0%} of the operations' task time; the "
                          f"rest {rest}.")
        preds = Table(title="What if", show_lines=False)
        for col in ("change", "crystalperf", "band", "linear", "replay"):
            preds.add_column(col)
        for p in report["predictions"]:
            c = p["crystalperf"]
            band = f"{format_seconds(c['low_s'])} – {format_seconds(c['high_s'])}" if "low_s" in c else ""
            preds.add_row(_safe(p["description"]), format_seconds(c["runtime_s"]), band,
                          format_seconds(p["linear"]["runtime_s"]), format_seconds(p["replay"]["runtime_s"]))
        if report["predictions"]:
            console.print(preds)
        queries = sorted((q for q in report.get("sql_queries") or [] if q.get("samples")), key=lambda q: -q["samples"])
        if queries:
            sql = Table(title="SQL queries: task time per plan operator", show_lines=False)
            for col in ("query", "operator", "task time", "cpu / disk / network / waiting"):
                sql.add_column(col, overflow="fold")
            for q in queries[:5]:
                label = f"SQL {q['execution_id']}" + (f": {q['description']}" if q.get("description") else "")
                top = sorted((n for n in q["nodes"] if n.get("samples")), key=lambda n: -n.get("task_seconds", 0.0))
                for i, n in enumerate(top[:5]):
                    sql.add_row(_safe(label, 60) if i == 0 else "", _safe(n["name"], 60),
                                format_seconds(n.get("task_seconds", 0.0)), _vector(n.get("vector") or {}))
            console.print(sql)
        skews = report.get("skew") or []
        if skews:
            skewed = Table(title="Skewed operations", show_lines=False)
            for col in ("operation", "cause", "slowest task", "vs median", "balanced", "job balanced"):
                skewed.add_column(col, overflow="fold")
            for s in skews[:MAX_ROWS]:
                slow = (s.get("slowest") or [{}])[0]
                where = f"task {slow.get('id', '')}" + (f" (partition {slow['index']})"
                                                        if slow.get("index") is not None else "")
                job = s.get("balanced_job_runtime_s")
                skewed.add_row(_safe(s.get("name", "")), _safe(s.get("cause", ""), 20), _safe(where),
                               f"{format_seconds(slow.get('duration_s', 0.0))} vs "
                               f"{format_seconds((s.get('task_time_s') or {}).get('p50', 0.0))}",
                               f"{format_seconds(s['runtime_s'])} -> {format_seconds(s['balanced_runtime_s'])}",
                               f"{format_seconds(s['job_runtime_s'])} -> {format_seconds(job)}" if job is not None else "")
            console.print(skewed)
        suggestions = report.get("settings_advice") or []
        if suggestions:
            settings = Table(title="Settings (searched in the what-if space)", show_lines=False)
            for col in ("setting", "predicted", "band", "speedup", "why", "note"):
                settings.add_column(col, overflow="fold")
            for s in suggestions:
                band = f"{format_seconds(s['low_s'])} – {format_seconds(s['high_s'])}" if "low_s" in s else ""
                settings.add_row(_safe(" ".join(s["typed"]), MAX_LINE), format_seconds(s["runtime_s"]), band,
                                 f"{s['speedup']:.2f}x", _safe(s["kind"], 20), _safe("; ".join(s["notes"]), MAX_LINE))
            console.print(settings)
        for line in report.get("advice", []):
            console.print(f"• {_safe(line, MAX_LINE)}")
        machine = report.get("machine")
        if isinstance(machine, dict) and machine.get("sentence"):
            console.print(f"[bold]What the tasks shared[/bold]: {_safe(str(machine['sentence']), MAX_LINE)}")
        cost = report.get("hook_cost")
        if cost:
            console.print(f"[bold]Cost of the hook[/bold]: {_safe(cost.get('sentence', ''), MAX_LINE)}")

    def render(self, report: dict[str, Any]) -> str:
        buffer = io.StringIO()
        console = Console(file=buffer, width=self.width, force_terminal=self.color, color_system=None if not self.color else "auto")
        self.print(report, console)
        return buffer.getvalue()
