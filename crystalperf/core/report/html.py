"""The human report: one self-contained ``crystalperf-report.html``.

No network fetches: the CSS is inline and every chart is SVG drawn here, in Python; the page needs no
script at all (links between the DAG, the bars and the operation table are plain anchors). Every
string that comes from the trace is escaped (:func:`crystalperf.core.report.svg.esc`).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from crystalperf.core.attribution.classify import LOW_CONFIDENCE
from crystalperf.core.report.base import Renderer
from crystalperf.core.report.driverwork import driver_work_html
from crystalperf.core.report.machine import machine_section
from crystalperf.core.report.svg import (
    COLOURS,
    LABELS,
    RESOURCES,
    Hierarchy,
    band_plot,
    esc,
    mini_bar,
    render_bars,
    render_dag,
    render_split,
    seconds,
)
from crystalperf.core.units import format_bandwidth, format_byte_rate, format_size

MAX_DAG_NODES = 200
MAX_BARS = 50
MAX_TABLE_ROWS = 200

VECTOR_SOURCES = {
    "samples": "stack samples: each sample's first non-plumbing function, classified, with a thread that was "
               "not running counted as waiting; what the framework measured (CPU time, idle, backpressure, fetch "
               "wait) is taken as measured and the samples split only the rest",
    "metrics": "the framework's own task metrics (CPU time, idle/backpressure, fetch wait, disk time) — no samples",
    "children": "the time-weighted mean of its child operations",
    "default": "nothing known: counted as CPU, treat it as unknown",
}

CSS = """
:root{--ink:#1f2328;--muted:#5b6470;--line:#d8dde3;--soft:#f5f7fa;--cpu:#0072B2;--disk:#E69F00;--net:#009E73}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--ink);
  background:#fff}
header.top{background:#14213d;color:#fff;padding:18px 32px}
header.top h1{margin:0;font-size:22px;font-weight:600}
header.top .meta{color:#c9d2e3;margin-top:4px;font-size:13px}
main{max-width:1400px;margin:0 auto;padding:8px 32px 40px}
section{margin-top:28px}
h2{font-size:18px;margin:0 0 10px;padding-bottom:4px;border-bottom:2px solid var(--line)}
p.note,.note{color:var(--muted);font-size:13px}
.verdict{font-size:18px;font-weight:600;margin:0 0 12px;padding:12px 16px;background:var(--soft);
  border-left:5px solid #14213d;border-radius:4px}
.figures{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.figure{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:8px 14px;min-width:150px}
.figure b{display:block;font-size:20px}
.figure span{color:var(--muted);font-size:12px}
.legend{display:flex;flex-wrap:wrap;gap:16px;align-items:center;font-size:13px;margin:6px 0 10px}
.legend i{display:inline-block;width:14px;height:14px;border-radius:2px;vertical-align:-2px;margin-right:5px}
.legend i.crit{background:#fff;border:3px solid #1b1b1b}
.legend i.implicit{background:none;border-top:2px dashed #8a8f98;height:0;width:22px;border-radius:0}
ul.advice{padding-left:20px;margin:0}ul.advice li{margin:4px 0;font-size:15px}
.scroll{overflow:auto;border:1px solid var(--line);border-radius:6px;padding:10px;background:#fff;max-height:1100px}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
.dag .op-node rect.box{fill:#fff;stroke:#9aa3ad;stroke-width:1.2}
.dag .op-node.critical rect.box{stroke:#1b1b1b;stroke-width:3}
.dag .op-node:hover rect.box{fill:#eef4ff}
.dag .cluster rect.box{fill:#f3f5f8;stroke:#b9c1cb;stroke-width:1.2}
.dag .cluster.critical rect.box{stroke:#1b1b1b;stroke-width:2.5;stroke-dasharray:none}
.dag .node-name{font-size:12px;font-weight:600;fill:#1f2328}
.dag .node-sub{font-size:11px;fill:#5b6470}
.dag .node-note{font-size:11px;fill:#5b6470;font-style:italic}
.dag .edge{fill:none;stroke:#8a8f98;stroke-width:1.4}
.dag .edge.implicit{stroke-dasharray:5 4}
.dag .edge.critical{stroke:#1b1b1b;stroke-width:3}
.bars .grid{stroke:#e6e9ee}
.bars .tick{font-size:11px;fill:#5b6470;text-anchor:middle}
.bars .bar-label{font-size:12px;fill:#1f2328}
.bars .critical .bar-label{font-weight:700}
.bars .bar-value{font-size:11px;fill:#5b6470}
.bars .crit-mark{fill:#1b1b1b}
.bars .bar-row:hover .bar-label{fill:#0b3d91;text-decoration:underline}
.seg-text{font-size:12px;font-weight:600}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--soft);font-weight:600;position:sticky;top:0}
#operations-table td:first-child{min-width:240px}
#operations-table td:nth-child(4){min-width:110px}
td.num,th.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
tr.critical td:first-child{border-left:4px solid #1b1b1b}
tr:target td{background:#fff6d6}
.opname{font-weight:600;word-break:break-word}
.kind{color:var(--muted);font-size:12px}
.attrs{color:var(--muted);font-size:12px;word-break:break-word}
code,.fn{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
ol.fns{margin:0;padding-left:18px}ol.fns li{margin:1px 0}
.share{color:var(--muted);font-size:12px;white-space:nowrap}
.guess{color:#7a3b00;font-size:12px;white-space:nowrap}
.better{color:#0b6e3d;font-weight:600}.worse{color:#a3361a;font-weight:600}
details summary{cursor:pointer;color:var(--muted)}
.warnings li{color:#7a3b00}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:4px 18px;margin:0}
dl.kv dt{color:var(--muted)}dl.kv dd{margin:0}
footer{color:var(--muted);font-size:12px;margin-top:36px;border-top:1px solid var(--line);padding-top:8px}
"""


MAX_SQL_QUERIES = 50
MAX_SQL_NODES = 300


def _legend(critical: bool = True, implicit: bool = False, outside: bool = False) -> str:
    keys = RESOURCES + (("outside",) if outside else ())
    items = [f'<span><i style="background:{COLOURS[r]}"></i>{esc(LABELS[r])}</span>' for r in keys]
    if critical:
        items.append('<span><i class="crit"></i>on the critical path</span>')
    if implicit:
        items.append('<span><i class="implicit"></i>order inferred from time (no declared dependency)</span>')
    return '<div class="legend">' + "".join(items) + "</div>"


def _finite_or_nan(value: Any) -> float:
    """A report number as a float for plotting; anything missing becomes NaN, which the plots skip."""
    return float(value) if isinstance(value, (int, float)) else math.nan


def _num(value: Any, fmt: str = "{:.2f}") -> str:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "—"
    return fmt.format(value)


def _guess(function: dict[str, Any]) -> str:
    """The mark of a top function whose busy share rests on a class the classifier guessed (low confidence)."""
    if not function.get("low_confidence") or (function.get("vector") or {}).get("waiting", 0.0) >= 1.0:
        return ""
    return (' <span class="guess" title="the classifier is unsure of this function&#x27;s class: the resource shown '
            f'for it is a guess">guess: confidence {esc(_num(function.get("confidence"), "{:.0%}"))}</span>')


def _mini_svg(vector: dict[str, float] | None, width: int = 90) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="10" viewBox="0 0 {width} 10">'
            + mini_bar(vector, 0, 1, width, 8) + "</svg>")


class HtmlRenderer(Renderer):
    """Renders the report document as a single self-contained HTML page."""

    name = "html"
    extension = ".html"

    def render(self, report: dict[str, Any]) -> str:
        app = report.get("application") or {}
        title = str(app.get("name") or app.get("id") or "application")
        hierarchy = Hierarchy.of(report)  # the DAG, the bars and the table read it (20,000 operations at a time)
        body = "".join((
            self._verdict(report),
            self._advice(report),
            self._dag(report, hierarchy),
            self._bars(report, hierarchy),
            self._whatif(report),
            self._settings(report),
            self._sql(report),
            self._skew(report),
            self._operations(report, hierarchy),
            self._sources(report),
            machine_section(report),
            self._hook_cost(report),
            self._warnings(report),
        ))
        producer = report.get("producer") or {}
        framework = " ".join(str(x) for x in (app.get("framework"), app.get("framework_version")) if x)
        meta = " · ".join(esc(x) for x in (
            framework, f"id {app.get('id', '')}", f"status {app.get('status', '?')}",
            f"runtime {seconds(report.get('total_runtime_s'))}") if x)
        return (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>crystalperf report: {esc(title)}</title><style>{CSS}</style></head><body>"
            f'<header class="top"><h1>crystalperf: {esc(title)}</h1><div class="meta">{meta}</div></header>'
            f"<main>{body}"
            f"<footer>Written by {esc(producer.get('name', 'crystalperf'))} {esc(producer.get('version', ''))}"
            f" (report {esc(report.get('report_version', ''))}, trace schema "
            f"{esc(report.get('trace_schema_version', ''))}). Every figure here is computed from the trace "
            "alone; <code>crystalperf-report.json</code> next to this file holds the same numbers.</footer>"
            "</main></body></html>\n"
        )

    # -- sections ---------------------------------------------------------------------------------

    def _verdict(self, report: dict[str, Any]) -> str:
        b = report.get("bottleneck") or {}
        secs = b.get("seconds") or {}
        outside = float(b.get("unattributed_s") or 0.0)
        parts = [(r, float(secs.get(r) or 0.0)) for r in RESOURCES] + [("outside", outside)]
        on_path = sum(float(secs.get(r) or 0.0) for r in RESOURCES)
        figures = [
            (seconds(report.get("total_runtime_s")), "total runtime"),
            (seconds(on_path), "in operations on the critical path"),
            (str(b.get("resource") or "—"), "bottleneck resource"),
        ] + [(seconds(secs.get(r)), f"{LABELS[r]} on the critical path") for r in RESOURCES]
        if outside > 0:
            figures.append((seconds(outside), "outside any operation"))
        iterations = report.get("iterations")
        if iterations:
            figures.insert(1, (seconds(iterations.get("step_time_s")),
                               f"mean step time ({iterations.get('steps')} steps)"))
        extra = ""
        if report.get("partial"):
            extra += (f'<p class="warnings" id="partial"><strong>Partial trace:</strong> {esc(report["partial"])} — '
                      "the figures cover the run until then.</p>")
        streaming = report.get("streaming")
        if streaming:
            rows = "".join(f"<dt>{esc(k.replace('_', ' '))}</dt><dd>{esc(_num(v, '{:.4g}') if isinstance(v, (int, float)) else v)}</dd>"
                           for k, v in streaming.items())
            extra += f'<h3>Streaming</h3><dl class="kv" id="streaming">{rows}</dl>'
        bound = report.get("input_bound")
        if bound:
            wait = bound.get("input_wait_fraction")
            verdict = "highly input-bound" if bound.get("highly_input_bound") else "not input-bound"
            extra += (f'<p id="input-bound">Input pipeline: {esc(_num(wait, "{:.0%}"))} of step time waits for '
                      f"input — {esc(verdict)} (TensorBoard's line is 20 %).</p>")
        extra += driver_work_html(b.get("driver_work"))
        return (
            '<section id="bottleneck"><h2>Bottleneck</h2>'
            f'<p class="verdict">{esc(b.get("sentence", ""))}</p>'
            '<div class="figures">'
            + "".join(f'<div class="figure"><b>{esc(v)}</b><span>{esc(k)}</span></div>' for v, k in figures)
            + "</div>"
            "<p class=\"note\">Where the wall-clock time of the run went: the critical path's seconds split by "
            "resource, plus the time outside every traced operation (driver code, scheduling, start-up).</p>"
            + render_split(parts) + _legend(critical=False, outside=True)
            + extra + "</section>"
        )

    def _advice(self, report: dict[str, Any]) -> str:
        lines = report.get("advice") or []
        if not lines:
            return ('<section id="advice"><h2>Advice</h2><p class="note">No resource change the predictor tried '
                    "helps this job noticeably.</p></section>")
        return ('<section id="advice"><h2>Advice</h2><ul class="advice">'
                + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul></section>")

    def _dag(self, report: dict[str, Any], hierarchy: Hierarchy) -> str:
        svg, drawn, count = render_dag(report, MAX_DAG_NODES, hierarchy)
        if not count:
            return '<section id="dag-section"><h2>Operations DAG</h2><p class="note">The trace has no operations.</p></section>'
        implicit = any(e.get("implicit") for e in report.get("edges", []))
        note = (f"All {count} operations are drawn." if drawn == count else
                f"{drawn} of {count} operations are drawn: every top-level operation (while they fit), then the "
                f"critical path, then the largest by resource time. The {count - drawn} left out are listed in "
                f"the operations table below (if among the largest) and in crystalperf-report.json; edges to "
                f"them are not drawn.")
        return (
            '<section id="dag-section"><h2>Operations DAG</h2>'
            '<p class="note">Top-level operations run top to bottom in dependency order; the operations inside '
            "each run left to right. Each box shows the runtime and, as a thin bar, its resource vector. "
            f"Click a box for its details. {esc(note)}</p>"
            + _legend(implicit=implicit) + f'<div class="scroll">{svg}</div></section>'
        )

    def _bars(self, report: dict[str, Any], hierarchy: Hierarchy) -> str:
        svg, drawn, count, omitted = render_bars(report, MAX_BARS, hierarchy)
        if not drawn:
            return ""
        note = (f"The {count - drawn} smaller operations left out add up to {seconds(omitted)}."
                if drawn < count else "")
        return (
            '<section id="resource-time"><h2>Resource time per operation</h2>'
            "<p class=\"note\">Wall-clock seconds of each finest-level operation split by its resource vector, "
            f"largest first ({drawn} of {count}). Hover a bar for the task seconds summed over all slots. "
            f"{esc(note)}</p>" + _legend() + f'<div class="scroll">{svg}</div></section>'
        )

    def _whatif(self, report: dict[str, Any]) -> str:
        preds = report.get("predictions") or []
        if not preds:
            return ('<section id="what-if"><h2>What if</h2><p class="note">No what-if scenarios were computed.'
                    "</p></section>")
        assumptions = set((report.get("baseline") or {}).get("assumptions") or [])
        values = []
        for p in preds:
            c = p.get("crystalperf") or {}
            values += [c.get("high_s"), c.get("runtime_s"), p.get("baseline_runtime_s")]
        finite = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
        axis_max = max(finite) * 1.08 if finite and max(finite) > 0 else 1.0
        rows = []
        for p in preds:
            c = p.get("crystalperf") or {}
            base = p.get("baseline_runtime_s")
            mid = c.get("runtime_s")
            low, high = c.get("low_s", mid), c.get("high_s", mid)
            speedup = p.get("speedup")
            cls = ""
            if isinstance(speedup, (int, float)) and math.isfinite(speedup):
                cls = "better" if speedup > 1.02 else "worse" if speedup < 0.98 else ""
            lin = (p.get("linear") or {}).get("runtime_s")
            rep = (p.get("replay") or {}).get("runtime_s")
            notes = [n for n in p.get("notes") or [] if n not in assumptions]
            plot = band_plot(_finite_or_nan(low), _finite_or_nan(mid), _finite_or_nan(high), _finite_or_nan(base),
                             [("linear scaling", _finite_or_nan(lin)), ("task replay", _finite_or_nan(rep))],
                             axis_max)
            rows.append(
                f"<tr><td><b>{esc(p.get('description', ''))}</b></td>"
                f'<td class="num"><b>{esc(seconds(mid))}</b></td>'
                f'<td class="num">{esc(seconds(low))} – {esc(seconds(high))}</td>'
                f'<td class="num {cls}">{esc(_num(speedup))}×</td>'
                f'<td class="num">{esc(seconds(lin))}</td><td class="num">{esc(seconds(rep))}</td>'
                f"<td>{plot}</td><td class=\"note\">{'<br>'.join(esc(n) for n in notes)}</td></tr>"
            )
        return (
            '<section id="what-if"><h2>What if</h2>'
            f"<p class=\"note\">Predicted runtime of the whole job after one change, against the measured "
            f"{esc(seconds(preds[0].get('baseline_runtime_s')))}. <b>crystalperf</b> replays the tasks with "
            "their resource vectors (band: from the spread of task durations and vector uncertainty); "
            "<b>linear scaling</b> scales the whole runtime by the changed resource; <b>task replay</b> "
            "re-schedules the tasks on the new slots and CPU speed but, without resource vectors, cannot see "
            "disk or network changes. In the plot: grey tick = measured, blue band and dot = crystalperf, "
            "diamonds = the two baselines.</p>"
            '<table id="whatif-table"><thead><tr><th>change</th><th class="num">crystalperf</th>'
            '<th class="num">band</th><th class="num">speed-up</th><th class="num">linear scaling</th>'
            '<th class="num">task replay (no vectors)</th><th>on one axis</th><th>notes</th></tr></thead>'
            "<tbody>" + "".join(rows) + "</tbody></table></section>"
        )

    def _settings(self, report: dict[str, Any]) -> str:
        """The settings the search suggests (crystalperf.core.predict.settings), as the user types them; no section
        when nothing was searched."""
        search = report.get("settings_search") or {}
        if not search.get("searched"):
            return ""
        rows = []
        for s in report.get("settings_advice") or []:
            band = f"{seconds(s.get('low_s'))} – {seconds(s.get('high_s'))}" if "low_s" in s else ""
            rows.append(
                f"<tr><td><code>{'<br>'.join(esc(t) for t in s.get('typed') or [])}</code></td>"
                f"<td>{esc(s.get('description', ''))}</td>"
                f'<td class="num"><b>{esc(seconds(s.get("runtime_s")))}</b></td><td class="num">{esc(band)}</td>'
                f'<td class="num better">{esc(_num(s.get("speedup")))}×</td><td>{esc(s.get("kind", ""))}</td>'
                f"<td class=\"note\">{'<br>'.join(esc(n) for n in s.get('notes') or [])}</td></tr>")
        table = ('<table id="settings-table"><thead><tr><th>setting</th><th>what-if</th><th class="num">predicted'
                 '</th><th class="num">band</th><th class="num">speed-up</th><th>why</th><th>notes</th></tr></thead>'
                 "<tbody>" + "".join(rows) + "</tbody></table>") if rows else (
            '<p class="note">No setting tried is predicted more than a few percent faster at no more resources.</p>')
        skipped = "".join(f"<li>{esc(n)}</li>" for n in search.get("not_searched") or [])
        return (
            '<section id="settings"><h2>Settings</h2>'
            f"<p class=\"note\">Searched: {esc(', '.join(search.get('searched') or []))} — doubling and halving "
            f"each around the traced value, then combinations: {esc(search.get('tried'))} settings tried, {esc(search.get('predictions'))} new "
            "predictions. "
            "<b>cheapest</b>: the fewest resources within a few percent of the fastest found; <b>fastest</b>: the "
            "best predicted runtime. None is predicted slower than the traced run.</p>"
            + table + (f'<ul class="note">{skipped}</ul>' if skipped else "") + "</section>"
        )

    def _sql(self, report: dict[str, Any]) -> str:
        """Spark SQL queries as their plan operators, each with the task time its samples were given
        (crystalperf.core.profile.sqlplan); no section without SQL."""
        queries = [q for q in report.get("sql_queries") or [] if q.get("samples")]
        if not queries:
            return ""
        parts = []
        for q in queries[:MAX_SQL_QUERIES]:
            nodes = q.get("nodes") or []
            depth: dict[int, int] = {}
            rows = []
            for node in nodes[:MAX_SQL_NODES]:
                parent = node.get("parent")
                depth[node["id"]] = depth.get(parent, -1) + 1 if parent is not None else 0
                indent = min(depth[node["id"]], 30)
                has = node.get("samples")
                rows.append(
                    f'<tr><td style="padding-left:{6 + 14 * indent}px">{esc(node.get("name", ""))}'
                    f'<div class="note">{esc(str(node.get("detail", ""))[:160])}</div></td>'
                    f'<td>{esc(", ".join(node.get("operations") or {}))}</td>'
                    f'<td class="num">{_num(node.get("task_seconds")) + " s" if has else ""}</td>'
                    f'<td class="num">{esc(has) if has else ""}</td>'
                    f"<td>{_mini_svg(node.get('vector')) if has else ''}</td></tr>")
            if len(nodes) > MAX_SQL_NODES:
                rows.append(f'<tr><td colspan="5">… {len(nodes) - MAX_SQL_NODES} more nodes</td></tr>')
            title = f"SQL {q.get('execution_id', '')}" + (f": {q['description']}" if q.get("description") else "")
            parts.append(
                f"<h3>{esc(title)}</h3><p class='note'>{q.get('attributed_fraction', 0.0):.0%} of its stages' "
                f"{esc(q.get('samples', 0))} samples went to a plan operator; "
                f"{esc(sum(r.get('overhead_samples', 0) for r in q.get('stages') or []))} were the tasks' start-up "
                "and hand-over (closure deserialisation, result serialisation), which no operator runs.</p>"
                '<table class="sql-plan"><thead><tr><th>plan operator</th><th>stages</th>'
                '<th class="num">task time</th><th class="num">samples</th><th>cpu / disk / network / waiting</th>'
                "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
        if len(queries) > MAX_SQL_QUERIES:
            parts.append(f'<p class="note">… {len(queries) - MAX_SQL_QUERIES} more queries in the JSON report.</p>')
        return ('<section id="sql"><h2>SQL queries and their plan operators</h2>'
                '<p class="note">Each sampled stack of a SQL stage is given to the physical-plan node that ran it '
                "(generated code by its whole-stage-codegen stage and operator prefix, operator classes, shuffle "
                "write and read to the Exchange); a node's task time is its stages' task time by its share of "
                "their samples.</p>" + "".join(parts) + "</section>")

    def _skew(self, report: dict[str, Any]) -> str:
        """The skewed operations (crystalperf.core.profile.skew); no section when there are none."""
        skews = report.get("skew") or []
        if not skews:
            return ""
        rows = []
        for s in skews:
            times = s.get("task_time_s") or {}
            slow = (s.get("slowest") or [{}])[0]
            where = f"task {slow.get('id', '')}" + (f" (partition {slow['index']})" if slow.get("index") is not None
                                                    else "")
            read = times.get("read") or {}
            size = format_size if read.get("unit") == "bytes" else (lambda n: f"{n:,.0f} records")
            read_text = (f"{size(slow['read'])} vs {size(read['p50'])}"
                         if isinstance(slow.get("read"), (int, float)) and isinstance(read.get("p50"), (int, float))
                         else "")
            job = s.get("balanced_job_runtime_s")
            job_text = f"{seconds(s.get('job_runtime_s'))} → {seconds(job)}" if job is not None else ""
            rows.append(
                f"<tr><td>{esc(s.get('name', ''))}</td><td>{esc(s.get('cause', ''))}</td>"
                f"<td>{esc(where)} of {esc(s.get('slow_tasks', ''))} slow</td>"
                f'<td class="num">{esc(seconds(slow.get("duration_s")))} vs {esc(seconds(times.get("p50")))}</td>'
                f"<td>{esc(read_text)}</td>"
                f'<td class="num">{esc(seconds(s.get("runtime_s")))} → {esc(seconds(s.get("balanced_runtime_s")))}</td>'
                f'<td class="num">{esc(job_text)}</td></tr>'
            )
        return (
            '<section id="skew"><h2>Skew and stragglers</h2>'
            '<p class="note">Operations whose slowest tasks (over 1.5× the 75th percentile) held them up by at least '
            "10 % of their runtime. <b>data</b>: the slow tasks read more than the others, and balanced, every task "
            "takes the mean; <b>straggler</b>: they read no more, and re-run, take the median; <b>time</b>: no read "
            "figures, taken as data. The job's runtime balanced is the predictor's replay of the DAG with that "
            "operation's tasks balanced.</p>"
            '<table id="skew-table"><thead><tr><th>operation</th><th>cause</th><th>slowest task</th>'
            '<th class="num">its time vs the median</th><th>read vs the median</th>'
            '<th class="num">operation balanced</th><th class="num">job balanced</th></tr></thead>'
            "<tbody>" + "".join(rows) + "</tbody></table></section>"
        )

    def _operations(self, report: dict[str, Any], h: Hierarchy) -> str:
        order = list(h.ops)
        if len(order) > MAX_TABLE_ROWS:
            ranks = h.ranks  # critical path first, then by resource time (not by runtime: ties keep their order)
            chosen = set(heapq.nsmallest(MAX_TABLE_ROWS, order, key=lambda p: ranks[p][:2]))
            order = [p for p in order if p in chosen]
            note = (f"{len(order)} of {len(h.ops)} operations: the critical path first, then the largest by "
                    "resource time; crystalperf-report.json lists them all.")
        else:
            note = f"All {len(order)} operations, in the trace's order."
        rows = []
        for path in order:
            op = h.ops[path]
            depth = h.depth(path)
            attrs = op.get("attributes") or {}
            attr_text = "; ".join(f"{k}: {v}" for k, v in list(attrs.items())[:6])
            fns = []
            for f in op.get("top_functions") or []:
                where = " · ".join(str(x) for x in (f.get("language"), f.get("origin"), f.get("location")) if x)
                caller = f.get("called_from")
                fns.append(
                    f'<li><span class="fn" title="{esc(where)}">{esc(f.get("name", ""))}</span> '
                    + (f'<span class="share">from {esc(caller)}</span> ' if caller else "")
                    + f'<span class="share">{esc(_num(f.get("share"), "{:.0%}"))} of samples</span> '
                    f'{_mini_svg(f.get("vector"), 60)}{_guess(f)}</li>')
            functions = f'<ol class="fns">{"".join(fns)}</ol>' if fns else '<span class="note">no samples</span>'
            share = op.get("share_of_critical_path")
            crit = op.get("on_critical_path")
            row_class = ' class="critical"' if crit else ""
            rows.append(
                f'<tr id="{h.anchors[path]}"{row_class}>'
                f'<td style="padding-left:{8 + 18 * min(depth, 6)}px"><div class="opname">{esc(op.get("name", ""))}</div>'
                f'<div class="kind">{esc(op.get("kind", ""))} · <code>{esc(path)}</code>'
                f'{" · " + esc(op.get("status")) if op.get("status") not in (None, "", "success", "succeeded") else ""}</div>'
                + (f'<div class="attrs">{esc(attr_text)}</div>' if attr_text else "")
                + f'</td><td class="num">{esc(seconds(op.get("runtime_s")))}</td>'
                f'<td class="num">{esc(op.get("tasks", 0))}</td>'
                f'<td>{_mini_svg(op.get("vector"))}<div class="share">{esc(_vector_pct(op.get("vector")))}</div></td>'
                f'<td>{esc(op.get("vector_source", ""))}<div class="share">{esc(op.get("samples", 0))} samples</div>'
                f'{_measured_note(op)}</td>'
                f'<td class="num">{esc(_num(share, "{:.0%}")) if crit else ""}</td>'
                f"<td>{functions}</td></tr>"
            )
        return (
            '<section id="operations"><h2>Operations and their top functions</h2>'
            f'<p class="note">{esc(note)} The top functions are the frames the stack scan stopped at (the first '
            "with available source below any lock, sleep, queue, thread-pool or event-loop frame, else the top "
            "such frame's name), with their share of the operation's samples and their resource vector; \"guess\" "
            f"marks one whose class the classifier is unsure of (confidence under {LOW_CONFIDENCE:.0%}). Waiting "
            "(for input, for downstream, for nothing) is its own colour, never CPU, disk or network. Under "
            "\"vector from\", \"measured\" is the share of the operation's time the framework or the OS measured "
            "(CPU time, idle, backpressure, fetch wait); the samples split only the rest. Hover a function for its "
            "language, how it was found and where.</p>"
            + _legend() +
            '<table id="operations-table"><thead><tr><th>operation</th><th class="num">runtime</th>'
            '<th class="num">tasks</th><th>cpu / disk / network / waiting</th><th>vector from</th>'
            '<th class="num">share of critical path</th><th>top functions</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></section>"
        )

    def _sources(self, report: dict[str, Any]) -> str:
        s = report.get("sources") or {}
        items = [("classifier", esc(s.get("classifier", "?")))]
        if "measured_fraction" in s:
            items.append(("measured, not inferred", esc(
                f"{_num(s.get('measured_fraction'), '{:.0%}')} of the operations' task time was measured by the "
                "framework or the OS (CPU time, idle, backpressure, fetch wait); the rest was split by the samples' "
                f"functions ({s.get('attribution', 'evidence')} attribution)")))
        if "samples" in s:
            items.append(("stack samples", esc(f"{int(s.get('samples') or 0):,}")))
            items.append(("samples located in source", esc(
                f"{int(s.get('located_samples') or 0):,} ({_num(s.get('located_fraction'), '{:.0%}')}) — the rest "
                "were classified by their frame name alone")))
            by_origin = s.get("samples_by_origin") or {}
            if by_origin:
                items.append(("samples by how the function was found",
                              ", ".join(f"{esc(k)}: {esc(f'{int(v):,}')}" for k, v in by_origin.items())))
        else:
            items.append(("stack samples", "none in the trace: vectors come from the framework's metrics"))
        counts = s.get("vector_sources") or {}
        vs = "".join(f"<li><b>{esc(k)}</b> ({esc(v)} operations): {esc(VECTOR_SOURCES.get(str(k), ''))}</li>"
                     for k, v in counts.items())
        base = report.get("baseline") or {}
        env = []
        for key, label, fmt in (
            ("slots", "task slots", str), ("executors", "executors", str),
            ("cores_per_executor", "cores per executor", str),
            ("network_bandwidth", "network", lambda v: format_bandwidth(float(v))),
            ("disk_bandwidth", "disk", lambda v: format_byte_rate(float(v))),
            ("memory_bytes", "memory", lambda v: format_size(float(v))),
            ("data_bytes", "data size", lambda v: format_size(float(v))),
            ("device", "device", str), ("warmup_factor", "first-wave warm-up factor", str),
        ):
            if base.get(key) is not None:
                try:
                    env.append((label, esc(fmt(base[key]))))
                except (TypeError, ValueError):
                    env.append((label, esc(base[key])))
        for seen in (base.get("observed") or {}).values():
            if isinstance(seen, dict) and seen.get("note"):
                env.append(("observed", esc(seen["note"])))
        for a in base.get("assumptions") or []:
            env.append(("assumed", esc(a)))
        problems = s.get("problems") or []
        prob = ("<details><summary>" + esc(f"{len(problems)} problems locating sources") + "</summary><ul>"
                + "".join(f"<li><code>{esc(p)}</code></li>" for p in problems) + "</ul></details>") if problems else ""
        return (
            '<section id="sources"><h2>Sources of the figures</h2><dl class="kv">'
            + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items)
            + "</dl><h3>Where each operation's resource vector came from</h3>"
            f'<ul id="vector-sources">{vs}</ul>{prob}'
            '<h3>The resources the predictions start from</h3><dl class="kv">'
            + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in env) + "</dl></section>"
        )

    def _hook_cost(self, report: dict[str, Any]) -> str:
        cost = report.get("hook_cost")
        if not cost:
            return ('<section id="hook-cost"><h2>Cost of the hook</h2><p class="note">The trace does not say what '
                    "the hook cost (written before schema 1.9, or imported from the framework's own logs).</p></section>")
        items = [("CPU time", esc(seconds(cost.get("cpu_s"))))]
        if cost.get("share") is not None:
            items.append(("share of the job's CPU time", esc(f"{_num(cost['share'], '{:.2%}')} of "
                                                             f"{seconds(cost.get('job_cpu_s'))}")))
        parts = cost.get("parts") or {}
        if parts:
            items.append(("where it went", esc(", ".join(f"{k} {seconds(v)}" for k, v in parts.items()))))
        if cost.get("budget_share"):
            items.append(("CPU budget", esc(f"{_num(cost['budget_share'], '{:.1%}')} of the cores each process may "
                                            "use")))
        if isinstance(slow := cost.get("step_slowdown"), dict):
            items.append(("profiled steps against later ones", esc(f"{_num(slow.get('ratio'), '{:+.1%}')}")))
        if cost.get("samples_planned"):
            items.append(("sampling rounds", esc(f"{int(cost.get('samples_taken') or 0):,} taken of "
                                                 f"{int(cost['samples_planned']):,} at the configured interval")))
        return ('<section id="hook-cost"><h2>Cost of the hook</h2>'
                f'<p>{esc(cost.get("sentence", ""))}</p><dl class="kv">'
                + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items) + "</dl></section>")

    def _warnings(self, report: dict[str, Any]) -> str:
        warnings = report.get("warnings") or []
        if not warnings:
            return '<section id="warnings"><h2>Warnings</h2><p class="note">None: the hook recorded cleanly.</p></section>'
        return ('<section id="warnings"><h2>Warnings</h2><ul class="warnings">'
                + "".join(f"<li>{esc(w)}</li>" for w in warnings) + "</ul></section>")


def _measured_note(op: dict[str, Any]) -> str:
    measured = op.get("measured") or {}
    if not measured:
        return ""
    parts = ", ".join(f"{k} {_num(v, '{:.0%}')}" for k, v in measured.items())
    return f'<div class="share">measured {esc(_num(op.get("measured_share"), "{:.0%}"))}: {esc(parts)}</div>'


def _vector_pct(vector: dict[str, float] | None) -> str:
    vector = vector or {}
    return " / ".join(f"{float(vector.get(r) or 0.0):.0%}" for r in RESOURCES)
