"""The fleet as one self-contained HTML page: ``crystalperf-fleet.html``.

The fleet's mix of bottlenecks (its machine-hours and its applications split by the resource that bounds each
one's critical path), every large application as a dot (machine-hours against how much of its critical path its
bottleneck takes), and the applications ranked by the machine-hours their best setting saves. Like the report
(:mod:`crystalperf.core.report.html`): inline CSS, SVG drawn here, no script, every string from a log escaped.
"""

from __future__ import annotations

import math
from typing import Any

from crystalperf import __version__
from crystalperf.core.report.html import CSS
from crystalperf.core.report.svg import COLOURS, LABELS, esc, seconds
from crystalperf.fleet.summary import FleetSummary, hours, name_of

UNKNOWN_COLOUR = "#8a8f98"
FLEET_CSS = """
.mix text{font-size:12px}.mix .seg-label{fill:#fff;font-weight:600}.mix .row-label{fill:#1f2328}
.scatter .axis{stroke:#9aa3ad}.scatter .grid{stroke:#eef0f3}.scatter text{font-size:11px;fill:#5b6470}
.scatter circle{fill-opacity:.75;stroke:#fff;stroke-width:.6}
.chip{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;vertical-align:0}
#ranking-table td:nth-child(2){min-width:220px}
.small{color:var(--muted);font-size:12px;word-break:break-all}
"""
MIX_W, BAR_H, LABEL_W = 960, 30, 130
PLOT_W, PLOT_H, PAD_L, PAD_B, PAD_T, PAD_R = 960, 380, 60, 40, 14, 20


def _colour(resource: Any) -> str:
    return COLOURS.get(str(resource), UNKNOWN_COLOUR)


def _label(resource: Any) -> str:
    return LABELS.get(str(resource), str(resource))


def mix_svg(summary: FleetSummary) -> str:
    """Two stacked bars: the fleet's machine-hours and its applications, by bottleneck."""
    mix = summary.mix()
    rows = [("machine-hours", [(r, h) for r, _, h in mix]), ("applications", [(r, float(n)) for r, n, _ in mix])]
    width = MIX_W - LABEL_W - 10
    parts = []
    for i, (label, values) in enumerate(rows):
        y = 10 + i * (BAR_H + 16)
        parts.append(f'<text class="row-label" x="0" y="{y + BAR_H / 2 + 4:.1f}">{esc(label)}</text>')
        total = sum(v for _, v in values)
        x = float(LABEL_W)
        for resource, value in values:
            if total <= 0 or value <= 0:
                continue
            w = value / total * width
            parts.append(f'<rect class="seg-{esc(resource)}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{BAR_H}" '
                         f'fill="{_colour(resource)}"><title>{esc(_label(resource))}: {value / total:.0%}</title>'
                         "</rect>")
            text = f"{_label(resource)} {value / total:.0%}"
            if w > len(text) * 7 + 8:
                parts.append(f'<text class="seg-label" x="{x + 6:.1f}" y="{y + BAR_H / 2 + 4:.1f}">{esc(text)}</text>')
            x += w
    height = 10 + len(rows) * (BAR_H + 16)
    return (f'<svg class="mix" id="fleet-mix" xmlns="http://www.w3.org/2000/svg" width="{MIX_W}" height="{height}" '
            f'viewBox="0 0 {MIX_W} {height}" role="img" aria-label="the fleet\'s bottleneck mix">{"".join(parts)}</svg>')


def scatter_svg(rows: list[dict[str, Any]]) -> str:
    """Each application a dot: its machine-hours (log scale) against its bottleneck's share of the critical path,
    coloured by the bottleneck."""
    usable = [r for r in rows if (r.get("machine_hours") or 0) > 0 and isinstance(r.get("bottleneck_share"), float)]
    inner_w, inner_h = PLOT_W - PAD_L - PAD_R, PLOT_H - PAD_T - PAD_B
    parts = [f'<line class="axis" x1="{PAD_L}" y1="{PAD_T + inner_h}" x2="{PAD_L + inner_w}" y2="{PAD_T + inner_h}"/>',
             f'<line class="axis" x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{PAD_T + inner_h}"/>']
    for share in (0.25, 0.5, 0.75, 1.0):
        y = PAD_T + inner_h * (1 - share)
        parts.append(f'<line class="grid" x1="{PAD_L}" y1="{y:.1f}" x2="{PAD_L + inner_w}" y2="{y:.1f}"/>'
                     f'<text x="{PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{share:.0%}</text>')
    if usable:
        logs = [math.log10(float(r["machine_hours"])) for r in usable]
        low, high = math.floor(min(logs)), math.ceil(max(logs))
        high = max(high, low + 1)
        for decade in range(low, high + 1):
            x = PAD_L + inner_w * (decade - low) / (high - low)
            parts.append(f'<text x="{x:.1f}" y="{PAD_T + inner_h + 16}" text-anchor="middle">'
                         f'{10.0 ** decade:g} h</text>')
        for row, value in zip(usable, logs, strict=True):
            x = PAD_L + inner_w * (value - low) / (high - low)
            y = PAD_T + inner_h * (1 - min(1.0, max(0.0, float(row["bottleneck_share"]))))
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{_colour(row.get("bottleneck"))}">'
                         f"<title>{esc(name_of(row))}: {esc(hours(float(row['machine_hours'])))}, "
                         f"{esc(row.get('bottleneck'))} {float(row['bottleneck_share']):.0%}</title></circle>")
    parts.append(f'<text x="{PAD_L + inner_w / 2:.1f}" y="{PLOT_H - 6}" text-anchor="middle">machine-hours '
                 "(cores x runtime)</text>")
    parts.append(f'<text x="12" y="{PAD_T + inner_h / 2:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {PAD_T + inner_h / 2:.1f})">bottleneck share</text>')
    return (f'<svg class="scatter" id="fleet-scatter" xmlns="http://www.w3.org/2000/svg" width="{PLOT_W}" '
            f'height="{PLOT_H}" viewBox="0 0 {PLOT_W} {PLOT_H}" role="img" aria-label="applications by '
            f'machine-hours and bottleneck share">{"".join(parts)}</svg>')


def _legend(summary: FleetSummary) -> str:
    items = [f'<span><i style="background:{_colour(r)}"></i>{esc(_label(r))}</span>' for r, _, _ in summary.mix()]
    return '<div class="legend">' + "".join(items) + "</div>"


def _ranking(summary: FleetSummary) -> str:
    rows = summary.ranking()
    if not rows:
        return "<p class=\"note\">No application was analysed.</p>"
    head = ("<tr><th class=\"num\">#</th><th>application</th><th>bottleneck</th><th class=\"num\">runtime</th>"
            "<th class=\"num\">cores</th><th class=\"num\">machine-hours</th><th>best setting</th>"
            "<th class=\"num\">predicted</th><th class=\"num\">saved</th><th class=\"num\">skewed</th>"
            "<th class=\"num\">warnings</th></tr>")
    body = []
    for rank, row in enumerate(rows, 1):
        saved = float(row.get("machine_hours_saved") or 0.0)
        share = row.get("bottleneck_share")
        resource = row.get("bottleneck")
        advice = row.get("advice")
        body.append(
            "<tr>"
            f'<td class="num">{rank}</td>'
            f'<td><span class="opname">{esc(name_of(row))}</span><div class="small">{esc(row.get("app_id") or "")} · '
            f'{esc(row.get("framework") or "")} · {esc(row.get("status") or "")}</div>'
            f'<div class="small">{esc(row.get("source") or "")}</div></td>'
            f'<td><i class="chip" style="background:{_colour(resource)}"></i>{esc(resource or "—")}'
            + (f' <span class="share">{share:.0%}</span>' if isinstance(share, float) else "") + "</td>"
            f'<td class="num">{esc(seconds(row.get("runtime_s")))}</td>'
            f'<td class="num">{esc(row.get("cores") or "—")}</td>'
            f'<td class="num">{esc(hours(float(row.get("machine_hours") or 0.0)))}</td>'
            + (f'<td><code>{esc(advice)}</code><div class="small">{esc(row.get("advice_changes") or "")}, '
               f'{esc(row.get("advice_cores"))} cores</div></td>'
               f'<td class="num">{esc(seconds(row.get("advice_runtime_s")))}</td>'
               if advice else '<td class="note">none predicted to help</td><td class="num">—</td>')
            + f'<td class="num {"better" if saved > 0 else "worse" if saved < 0 else ""}">{esc(hours(saved))}</td>'
            f'<td class="num">{esc(row.get("skewed_operations") or 0)}</td>'
            f'<td class="num">{len(row.get("warnings") or [])}</td>'
            "</tr>")
    return (f'<div class="scroll"><table id="ranking-table"><thead>{head}</thead><tbody>{"".join(body)}</tbody>'
            "</table></div>")


def _errors(summary: FleetSummary) -> str:
    if not summary.errors:
        return ""
    rows = "".join(f"<tr><td class=\"small\">{esc(source)}</td><td>{esc(error)}</td></tr>"
                   for source, error in summary.first_errors)
    more = (f'<p class="note">The first {len(summary.first_errors)} of {summary.errors:,}; the table\'s '
            "<code>error</code> column has them all.</p>" if summary.errors > len(summary.first_errors) else "")
    return (f'<section id="errors"><h2>Logs that could not be analysed ({summary.errors:,})</h2>'
            f'<table id="errors-table"><thead><tr><th>log</th><th>error</th></tr></thead><tbody>{rows}</tbody></table>'
            f"{more}</section>")


def render(summary: FleetSummary, *, title: str = "fleet") -> str:
    analysed = summary.applications - summary.errors
    figures = [
        (f"{summary.applications:,}", "applications"),
        (f"{analysed:,}", "analysed"),
        (f"{summary.errors:,}", "could not be analysed"),
        (hours(summary.machine_hours), "machine-hours (cores x runtime)"),
        (hours(summary.saved), "saved by each one's best setting"),
        (f"{summary.skewed:,}", "with skewed operations"),
        (f"{summary.failed:,}", "failed"),
    ]
    figure_html = "".join(f'<div class="figure"><b>{esc(v)}</b><span>{esc(k)}</span></div>' for v, k in figures)
    shown = len(summary.points())
    points_note = ("every analysed application" if shown >= analysed
                   else f"the {shown:,} largest of {analysed:,} applications by machine-hours")
    ranked = len(summary.ranking())
    body = (
        f'<section id="overview"><div class="figures">{figure_html}</div></section>'
        '<section id="mix"><h2>Bottleneck mix</h2>'
        "<p class=\"note\">The resource that bounds each application's critical path; the fleet's machine-hours and "
        f"its applications split by it.</p>{_legend(summary)}{mix_svg(summary)}"
        f"<p class=\"note\">Each dot one application ({points_note}): its machine-hours, and how much of its "
        "critical path its bottleneck takes (high: one resource is the whole story).</p>"
        f'{scatter_svg(summary.points())}</section>'
        f'<section id="ranking"><h2>Where a setting saves the most machine-hours</h2>'
        "<p class=\"note\">Each application's best setting (the report's first settings advice: the cheapest setting "
        "predicted within 5% of the fastest found), its predicted runtime and the machine-hours it saves over the "
        f"traced run (negative: faster, at more machine-hours). The first {ranked:,}, most saved first.</p>"
        f"{_ranking(summary)}</section>"
        f"{_errors(summary)}"
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>crystalperf fleet: {esc(title)}</title><style>{CSS}{FLEET_CSS}</style></head><body>"
        f'<header class="top"><h1>crystalperf fleet: {esc(title)}</h1><div class="meta">{summary.applications:,} '
        f"applications · {esc(hours(summary.machine_hours))} of machine time</div></header>"
        f"<main>{body}<footer>Written by crystalperf {esc(__version__)}. One row per application in "
        "<code>crystalperf-fleet.parquet</code> next to this file (columns in docs/fleet.md); "
        "<code>crystalperf analyze</code> on one log gives its full report.</footer></main></body></html>\n"
    )
