"""What the fleet's rows add up to, gathered a row at a time, and the terminal's account of it.

:class:`FleetSummary` keeps counts and totals, the applications whose best setting saves the most machine-hours
(:data:`TOP` of them), the largest applications for the page's plot (:data:`POINTS`) and the first errors: its
size does not grow with the fleet's. The HTML page (:mod:`.page`) and :func:`print_summary` read it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from crystalperf.core.errors import one_line
from crystalperf.core.units import format_seconds

TOP = 200
POINTS = 3000
ERRORS = 100
RESOURCES = ("cpu", "disk", "network", "waiting")
# The row's fields the ranking and the plot show.
SHOWN = ("source", "app_id", "app_name", "framework", "status", "runtime_s", "cores", "machine_hours", "bottleneck",
         "bottleneck_share", "advice", "advice_changes", "advice_runtime_s", "advice_cores", "machine_hours_saved",
         "skewed_operations", "skew", "warnings")


@dataclass
class FleetSummary:
    applications: int = 0
    errors: int = 0
    analysed: int = 0  # this run, the rest came from the cache
    machine_hours: float = 0.0
    saved: float = 0.0  # machine-hours the positive savings add up to
    with_advice: int = 0
    skewed: int = 0
    failed: int = 0
    bottlenecks: dict[str, list[float]] = field(default_factory=dict)  # resource -> [applications, machine-hours]
    _top: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)
    _points: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)
    first_errors: list[tuple[str, str]] = field(default_factory=list)

    def add(self, row: dict[str, Any]) -> None:
        self.applications += 1
        order = self.applications
        if row.get("error"):
            self.errors += 1
            if len(self.first_errors) < ERRORS:
                self.first_errors.append((str(row.get("source")), str(row["error"])))
            return
        hours = float(row.get("machine_hours") or 0.0)
        self.machine_hours += hours
        resource = str(row.get("bottleneck") or "unknown")
        counts = self.bottlenecks.setdefault(resource, [0, 0.0])
        counts[0] += 1
        counts[1] += hours
        saved = float(row.get("machine_hours_saved") or 0.0)
        if row.get("advice"):
            self.with_advice += 1
        if saved > 0:
            self.saved += saved
        self.skewed += bool(row.get("skewed_operations"))
        self.failed += row.get("status") == "failed"
        shown = {k: row.get(k) for k in SHOWN}
        _keep(self._top, (saved, -order, shown), TOP)
        _keep(self._points, (hours, -order, shown), POINTS)

    def ranking(self) -> list[dict[str, Any]]:
        """The applications whose best setting saves the most machine-hours, most first."""
        return [row for _, _, row in sorted(self._top, key=lambda t: (-t[0], -t[1]))]

    def points(self) -> list[dict[str, Any]]:
        """The largest applications by machine-hours (all of them in a fleet of at most POINTS)."""
        return [row for _, _, row in self._points]

    def mix(self) -> list[tuple[str, int, float]]:
        """(resource, applications, machine-hours) for each bottleneck, in RESOURCES order."""
        known = [r for r in RESOURCES if r in self.bottlenecks]
        others = sorted(r for r in self.bottlenecks if r not in RESOURCES)
        return [(r, int(self.bottlenecks[r][0]), self.bottlenecks[r][1]) for r in known + others]


def _keep(heap: list[tuple[float, int, dict[str, Any]]], item: tuple[float, int, dict[str, Any]], size: int) -> None:
    if len(heap) < size:
        heapq.heappush(heap, item)
    elif item[:2] > heap[0][:2]:
        heapq.heapreplace(heap, item)


def hours(value: float) -> str:
    """Machine-hours as the page and the terminal show them (small ones with three significant digits)."""
    return f"{value:,.2f} h" if abs(value) >= 0.1 or value == 0 else f"{value:.3g} h"


def name_of(row: dict[str, Any]) -> str:
    return str(row.get("app_name") or row.get("app_id") or row.get("source") or "?")


def print_summary(summary: FleetSummary, console: Any, files: list[str], *, top: int = 10) -> None:
    """The fleet in a few lines on the terminal (``console``: a rich Console)."""
    from rich.table import Table
    from rich.text import Text

    analysed = summary.applications - summary.errors
    console.print(Text(f"crystalperf fleet: {summary.applications:,} applications ({analysed:,} analysed, "
                       f"{summary.errors:,} could not be; {summary.analysed:,} analysed in this run, the rest "
                       f"from the cache): {hours(summary.machine_hours)} of machine time", style="bold"))
    if summary.machine_hours > 0 or summary.bottlenecks:
        parts = [f"{r} {h / summary.machine_hours:.0%} of machine-hours ({n:,} apps)" if summary.machine_hours
                 else f"{r} ({n:,} apps)" for r, n, h in summary.mix()]
        console.print(Text("bottlenecks: " + " · ".join(parts)))
    console.print(Text(f"best settings save {hours(summary.saved)} ({summary.with_advice:,} applications have "
                       f"advice); {summary.skewed:,} have skewed operations; {summary.failed:,} failed"))
    ranking = [r for r in summary.ranking() if (r.get("machine_hours_saved") or 0) > 0][:top]
    if ranking:
        table = Table(title="most machine-hours saved", title_justify="left", show_edge=False, pad_edge=False)
        for column, justify in (("application", "left"), ("bottleneck", "left"), ("runtime", "right"),
                                ("machine-h", "right"), ("best setting", "left"), ("predicted", "right"),
                                ("saved", "right")):
            table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
        for row in ranking:
            share = row.get("bottleneck_share")
            table.add_row(one_line(name_of(row), 60),
                          f"{row.get('bottleneck')} {share:.0%}" if isinstance(share, float) else "-",
                          format_seconds(float(row.get("runtime_s") or 0.0)), hours(float(row.get("machine_hours") or 0)),
                          one_line(str(row.get("advice") or ""), 80),
                          format_seconds(float(row.get("advice_runtime_s") or 0.0)),
                          hours(float(row.get("machine_hours_saved") or 0.0)))
        console.print(table)
    for source, error in summary.first_errors[:5]:
        console.print(Text(f"error: {one_line(source, 200)}: {one_line(error, 300)}"))
    if summary.errors > 5:
        console.print(Text(f"... and {summary.errors - 5:,} more errors (the table's error column)"))
    for path in files:
        console.print(Text(f"wrote {one_line(path)}"))
