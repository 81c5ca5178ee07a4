"""The report's ``bottleneck.driver_work`` in HTML: the driver's own work outside every operation
(``crystalperf.core.profile.driver``), function by function (a JVM call with the functions that did its work),
under the verdict."""

from __future__ import annotations

from typing import Any

from crystalperf.core.report.svg import esc, seconds


def driver_work_html(work: Any) -> str:
    """The section's block, or "" when the report has no driver work (every string from the trace escaped)."""
    if not isinstance(work, dict) or not work.get("functions"):
        return ""
    rows = "".join(f"<tr><td><code>{esc(f.get('name', ''))}</code>{_within(f.get('functions'))}</td>"
                   f"<td>{esc(f.get('where') or '')}</td><td>{esc(seconds(f.get('seconds')))}</td>"
                   f"<td>{esc(f.get('resource', ''))}</td></tr>"
                   for f in work["functions"] if isinstance(f, dict))
    return (f'<div id="driver-work"><p>{esc(work.get("sentence", ""))}</p><table><tr><th>function</th>'
            f"<th>where</th><th>about</th><th>resource</th></tr>{rows}</table></div>")


def _within(functions: Any) -> str:
    """The functions that did a JVM call's work, under its name."""
    if not isinstance(functions, list):
        return ""
    named = [f"<code>{esc(f.get('name', ''))}</code> {esc(seconds(f.get('seconds')))}"
             for f in functions if isinstance(f, dict)]
    return f"<br><small>mostly in {', '.join(named)}</small>" if named else ""
