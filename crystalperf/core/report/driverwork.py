"""The report's ``bottleneck.driver_work`` in HTML: the driver's own work outside every operation
(``crystalperf.core.profile.driver``), function by function, under the verdict."""

from __future__ import annotations

from typing import Any

from crystalperf.core.report.svg import esc, seconds


def driver_work_html(work: Any) -> str:
    """The section's block, or "" when the report has no driver work (every string from the trace escaped)."""
    if not isinstance(work, dict) or not work.get("functions"):
        return ""
    rows = "".join(f"<tr><td><code>{esc(f.get('name', ''))}</code></td><td>{esc(f.get('where') or '')}</td>"
                   f"<td>{esc(seconds(f.get('seconds')))}</td><td>{esc(f.get('resource', ''))}</td></tr>"
                   for f in work["functions"] if isinstance(f, dict))
    return (f'<div id="driver-work"><p>{esc(work.get("sentence", ""))}</p><table><tr><th>function</th>'
            f"<th>where</th><th>about</th><th>resource</th></tr>{rows}</table></div>")
