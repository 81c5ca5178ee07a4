"""Terminal and HTML renderings of ``crystalperf diff`` and ``crystalperf validate`` results
(:mod:`crystalperf.core.compare`).

Names, paths and settings come from traces and are hostile input: the terminal escapes them as the
analysis summary does (:func:`crystalperf.core.report.terminal._safe`), the HTML page through
:func:`crystalperf.core.report.svg.esc`. The page is self-contained (the report's CSS, no script).
"""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from crystalperf.core.report.html import CSS
from crystalperf.core.report.svg import COLOURS, LABELS, RESOURCES, esc, seconds
from crystalperf.core.report.terminal import MAX_LINE, _safe
from crystalperf.core.units import format_seconds

MAX_ROWS = 15  # operations in the terminal's table (largest change first)
MAX_HTML_ROWS = 500

EXTRA_CSS = """
td.up{color:#a3361a}td.down{color:#0b6e3d}
tr.new td:first-child{border-left:4px solid #0b6e3d}tr.missing td:first-child{border-left:4px solid #a3361a}
.pair{display:flex;flex-direction:column;gap:2px}
"""


def _signed(value: Any) -> str:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "—"
    return f"{value:+.2f} s"


def _percent(value: Any) -> str:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "—"
    return f"{value:+.1%}"


def _split(seconds_by: dict[str, float] | None) -> str:
    seconds_by = seconds_by or {}
    return " / ".join(f"{float(seconds_by.get(r) or 0.0):.2f}" for r in RESOURCES)


def _moved(delta: dict[str, float] | None) -> str:
    """The resources whose time changed, e.g. ``disk +7.90 s, cpu -0.10 s``."""
    delta = delta or {}
    moved = sorted(((r, float(delta.get(r) or 0.0)) for r in RESOURCES), key=lambda x: -abs(x[1]))
    return ", ".join(f"{r} {_signed(v)}" for r, v in moved if abs(v) >= 0.005) or "—"


def _ranked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (not r.get("leaf"), -abs(float(r.get("delta_s") or 0.0))))


# -- terminal ------------------------------------------------------------------------------------------

def print_diff(result: dict[str, Any], console: Console) -> None:
    a, b, runtime = result["a"], result["b"], result["runtime"]
    name = a["application"].get("name") or a["application"].get("id") or "application"
    console.print(f"[bold]crystalperf diff[/bold] {_safe(name, 300)}: {format_seconds(runtime['a_s'])} -> "
                  f"{format_seconds(runtime['b_s'])} ({_signed(runtime['delta_s'])}, {_percent(runtime['change'])})")
    console.print(f"  A: {_safe(a['path'], 300)} ({a['kind']}, bottleneck {_safe(a['bottleneck'])})")
    console.print(f"  B: {_safe(b['path'], 300)} ({b['kind']}, bottleneck {_safe(b['bottleneck'])})")
    for note in result.get("notes") or []:
        console.print(f"[bold]note[/bold]: {_safe(note, MAX_LINE)}")
    path = result["critical_path_seconds"]
    console.print("Critical path A -> B: " + ", ".join(
        f"{r} {format_seconds(path[r]['a'])} -> {format_seconds(path[r]['b'])}" for r in RESOURCES))
    explanation = result.get("explanation") or []
    if explanation:
        console.print("[bold]What explains the change[/bold]:")
        for e in explanation:
            console.print(f"  • {_safe(e['sentence'], MAX_LINE)}")
    else:
        console.print("No operation on the critical path explains a change.")
    other = (result.get("sped_up") if runtime["delta_s"] >= 0 else result.get("slowed")) or []
    if other:
        console.print("Meanwhile " + ("faster" if runtime["delta_s"] >= 0 else "slower") + ": "
                      + "; ".join(_safe(e["sentence"], 300) for e in other[:3]))
    rows = _ranked(result.get("operations") or [])
    table = Table(title="Operations (largest change first)", show_lines=False)
    for col in ("operation", "kind", "A", "B", "change", "by resource"):
        table.add_column(col, overflow="fold")
    for r in rows[:MAX_ROWS]:
        status = {"new": " (new)", "missing": " (missing)"}.get(r["status"], "")
        table.add_row(_safe(r["name"] or r["path"]) + status, _safe(r["kind"], 40),
                      format_seconds(r["a_runtime_s"]) if r["a_runtime_s"] is not None else "—",
                      format_seconds(r["b_runtime_s"]) if r["b_runtime_s"] is not None else "—",
                      _signed(r["delta_s"]), _moved(r["resource_delta_s"]))
    if len(rows) > MAX_ROWS:
        table.add_row(f"... {len(rows) - MAX_ROWS} more (--json lists them all)", "", "", "", "", "")
    console.print(table)
    if result.get("new") or result.get("missing"):
        console.print(f"{len(result.get('new') or [])} operation(s) only in B, {len(result.get('missing') or [])} "
                      "only in A")
    settings = result.get("settings") or []
    if settings:
        st = Table(title="Configuration and environment that differ", show_lines=False)
        for col in ("", "A", "B"):
            st.add_column(col, overflow="fold")
        for s in settings[:40]:
            st.add_row(_safe(s["name"]), _safe(s["a"] if s["a"] is not None else "(not set)"),
                       _safe(s["b"] if s["b"] is not None else "(not set)"))
        if len(settings) > 40:
            st.add_row(f"... {len(settings) - 40} more", "", "")
        console.print(st)
    else:
        console.print("Configuration and environment: no difference recorded.")
    if result.get("settings_ignored"):
        console.print(f"({result['settings_ignored']} setting(s) that differ only in ids, ports, time stamps or "
                      "temporary directories are left out)")


def print_validation(result: dict[str, Any], console: Console) -> None:
    predicted, error = result["predicted"], result["error"]
    c = predicted["crystalperf"]
    band = f" (band {format_seconds(c['low_s'])} – {format_seconds(c['high_s'])})" if "low_s" in c else ""
    console.print(f"[bold]crystalperf validate[/bold]: {_safe(result['changes']['description'], MAX_LINE)}")
    console.print(f"  trace: {_safe(result['trace']['path'], 300)} (traced {format_seconds(result['traced_runtime_s'])})")
    console.print(f"  rerun: {_safe(result['rerun']['path'], 300)} (measured "
                  f"{format_seconds(result['measured_runtime_s'])})")
    console.print(f"[bold]Predicted {format_seconds(c['runtime_s'])}{band}, measured "
                  f"{format_seconds(result['measured_runtime_s'])}: error {_percent(error['crystalperf'])}[/bold]"
                  + ("" if result.get("within_band") is None else
                     " (within the band)" if result["within_band"] else " (outside the band)"))
    console.print(f"  baselines: linear scaling {format_seconds(predicted['linear']['runtime_s'])} "
                  f"(error {_percent(error['linear'])}), task replay without vectors "
                  f"{format_seconds(predicted['replay']['runtime_s'])} (error {_percent(error['replay'])})")
    for line in result.get("not_expressed") or []:
        console.print(f"[bold]not in the prediction[/bold]: {_safe(line, MAX_LINE)}")
    for note in result.get("notes") or []:
        console.print(f"  note: {_safe(note, MAX_LINE)}")
    rows = sorted(result.get("operations") or [], key=lambda r: -abs(r["predicted_s"] - r["measured_s"]))
    if rows:
        table = Table(title="Operations (largest miss first)", show_lines=False)
        for col in ("operation", "traced", "predicted", "measured", "error"):
            table.add_column(col, overflow="fold")
        for r in rows[:MAX_ROWS]:
            table.add_row(_safe(r["name"] or r["path"]), format_seconds(r["traced_s"]),
                          format_seconds(r["predicted_s"]), format_seconds(r["measured_s"]), _percent(r["error"]))
        if len(rows) > MAX_ROWS:
            table.add_row(f"... {len(rows) - MAX_ROWS} more (--json lists them all)", "", "", "", "")
        console.print(table)


# -- HTML ----------------------------------------------------------------------------------------------

def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}{EXTRA_CSS}</style></head><body>"
        f'<header class="top"><h1>{esc(title)}</h1></header><main>{body}'
        "<footer>Written by crystalperf; every figure here comes from the two runs' traces or reports.</footer>"
        "</main></body></html>\n"
    )


def _figures(items: list[tuple[str, str]]) -> str:
    return ('<div class="figures">' + "".join(f'<div class="figure"><b>{esc(v)}</b><span>{esc(k)}</span></div>'
                                              for v, k in items) + "</div>")


def _stacked(seconds_by: dict[str, float] | None, scale: float, width: int = 160) -> str:
    """A bar of an operation's resource seconds, on a scale shared by every row (so A and B compare)."""
    seconds_by = seconds_by or {}
    parts, cursor = [], 0.0
    for r in RESOURCES:
        w = max(0.0, float(seconds_by.get(r) or 0.0)) / scale * width if scale > 0 else 0.0
        if w > 0.05:
            parts.append(f'<rect x="{cursor:.1f}" y="1" width="{w:.1f}" height="8" fill="{COLOURS[r]}">'
                         f"<title>{esc(LABELS[r])} {esc(seconds(seconds_by.get(r)))}</title></rect>")
        cursor += w
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="10" viewBox="0 0 {width} 10">'
            + "".join(parts) + "</svg>")


def _legend() -> str:
    return '<div class="legend">' + "".join(
        f'<span><i style="background:{COLOURS[r]}"></i>{esc(LABELS[r])}</span>' for r in RESOURCES) + "</div>"


def diff_html(result: dict[str, Any]) -> str:
    a, b, runtime = result["a"], result["b"], result["runtime"]
    name = a["application"].get("name") or a["application"].get("id") or "application"
    figures = _figures([(seconds(runtime["a_s"]), "A: total runtime"), (seconds(runtime["b_s"]), "B: total runtime"),
                        (_signed(runtime["delta_s"]), "change"), (_percent(runtime["change"]), "change, relative"),
                        (str(a["bottleneck"] or "—"), "A: bottleneck"), (str(b["bottleneck"] or "—"), "B: bottleneck")])
    runs = (f'<dl class="kv"><dt>A</dt><dd><code>{esc(a["path"])}</code> ({esc(a["kind"])})</dd>'
            f'<dt>B</dt><dd><code>{esc(b["path"])}</code> ({esc(b["kind"])})</dd></dl>')
    notes = "".join(f'<p class="warnings">{esc(n)}</p>' for n in result.get("notes") or [])
    path = result["critical_path_seconds"]
    path_rows = "".join(f"<tr><td>{esc(LABELS[r])}</td><td class=\"num\">{esc(seconds(path[r]['a']))}</td>"
                        f"<td class=\"num\">{esc(seconds(path[r]['b']))}</td>"
                        f"<td class=\"num\">{esc(_signed(path[r]['delta']))}</td></tr>" for r in RESOURCES)
    explanation = result.get("explanation") or []
    explained = ('<ul class="advice" id="explanation">' + "".join(f"<li>{esc(e['sentence'])}</li>" for e in explanation)
                 + "</ul>") if explanation else '<p class="note">No operation on the critical path explains a change.</p>'
    for key, label in (("slowed", "Slower in B (on B's critical path)"), ("sped_up", "Faster in B (on A's critical path)")):
        moved = result.get(key) or []
        if moved:
            explained += (f"<h3>{esc(label)}</h3><ul id=\"{key}\">"
                          + "".join(f"<li>{esc(e['sentence'])}</li>" for e in moved) + "</ul>")
    rows = _ranked(result.get("operations") or [])[:MAX_HTML_ROWS]
    scale = max([sum(float(v or 0.0) for v in (r.get(k) or {}).values())
                 for r in rows for k in ("a_resource_seconds", "b_resource_seconds")] + [0.0])
    body_rows = []
    for r in rows:
        cls = {"new": "new", "missing": "missing"}.get(r["status"], "")
        delta = float(r.get("delta_s") or 0.0)
        direction = "up" if delta > 0 else "down" if delta < 0 else ""
        body_rows.append(
            f'<tr class="{cls}"><td><div class="opname">{esc(r["name"])}</div>'
            f'<div class="kind">{esc(r["kind"])} · <code>{esc(r["path"])}</code> · {esc(r["status"])}'
            f'{" by " + esc(r["matched_by"]) if r["matched_by"] else ""}</div></td>'
            f'<td class="num">{esc(seconds(r["a_runtime_s"]))}</td><td class="num">{esc(seconds(r["b_runtime_s"]))}</td>'
            f'<td class="num {direction}">{esc(_signed(r["delta_s"]))}</td>'
            f'<td><div class="pair">{_stacked(r["a_resource_seconds"], scale)}{_stacked(r["b_resource_seconds"], scale)}'
            f'</div><div class="share">{esc(_split(r["resource_delta_s"]))} s change</div></td></tr>')
    settings = result.get("settings") or []
    setting_rows = "".join(
        f"<tr><td>{esc(s['name'])}</td><td>{esc(s['a'] if s['a'] is not None else '(not set)')}</td>"
        f"<td>{esc(s['b'] if s['b'] is not None else '(not set)')}</td></tr>" for s in settings)
    ignored = result.get("settings_ignored") or 0
    body = (
        f'<section id="summary"><h2>Runtime</h2>{figures}{runs}{notes}'
        '<h3>Critical path by resource</h3><table id="critical-path"><thead><tr><th>resource</th>'
        '<th class="num">A</th><th class="num">B</th><th class="num">change</th></tr></thead>'
        f"<tbody>{path_rows}</tbody></table></section>"
        f'<section id="explains"><h2>What explains the change</h2>{explained}</section>'
        '<section id="operations"><h2>Operations</h2><p class="note">Matched by id where id and name agree, else by '
        "name and call site in start order, else by name; the largest change first. Bars: A above B, resource "
        "seconds on one scale.</p>" + _legend()
        + '<table id="operations-table"><thead><tr><th>operation</th><th class="num">A</th><th class="num">B</th>'
        '<th class="num">change</th><th>resource seconds (A, B)</th></tr></thead><tbody>'
        + "".join(body_rows) + "</tbody></table></section>"
        '<section id="settings"><h2>Configuration and environment</h2>'
        + (('<table id="settings-table"><thead><tr><th>setting</th><th>A</th><th>B</th></tr></thead><tbody>'
            + setting_rows + "</tbody></table>") if settings else '<p class="note">No difference recorded.</p>')
        + (f'<p class="note">{ignored} setting(s) that differ only in ids, ports, time stamps or temporary '
           "directories are left out.</p>" if ignored else "")
        + "</section>"
    )
    return _page(f"crystalperf diff: {name}", body)


def validation_html(result: dict[str, Any]) -> str:
    predicted, error = result["predicted"], result["error"]
    c = predicted["crystalperf"]
    figures = _figures([
        (seconds(result["traced_runtime_s"]), "traced"), (seconds(c["runtime_s"]), "predicted (crystalperf)"),
        (seconds(result["measured_runtime_s"]), "measured in the rerun"), (_percent(error["crystalperf"]), "error"),
    ])
    band = (f"<p>Band {esc(seconds(c['low_s']))} – {esc(seconds(c['high_s']))}: the measurement is "
            f"{'inside' if result.get('within_band') else 'outside'} it.</p>") if "low_s" in c else ""
    baselines = "".join(
        f"<tr><td>{esc(label)}</td><td class=\"num\">{esc(seconds(predicted[key]['runtime_s']))}</td>"
        f"<td class=\"num\">{esc(_percent(error[key]))}</td></tr>"
        for key, label in (("crystalperf", "crystalperf"), ("linear", "linear scaling"),
                           ("replay", "task replay without vectors")))
    missing = "".join(f"<li>{esc(x)}</li>" for x in result.get("not_expressed") or [])
    notes = "".join(f"<li>{esc(x)}</li>" for x in result.get("notes") or [])
    rows = "".join(
        f'<tr><td><div class="opname">{esc(r["name"])}</div><div class="kind"><code>{esc(r["path"])}</code></div></td>'
        f'<td class="num">{esc(seconds(r["traced_s"]))}</td><td class="num">{esc(seconds(r["predicted_s"]))}</td>'
        f'<td class="num">{esc(seconds(r["measured_s"]))}</td><td class="num">{esc(_percent(r["error"]))}</td></tr>'
        for r in (result.get("operations") or [])[:MAX_HTML_ROWS])
    body = (
        f'<section id="summary"><h2>Prediction against the rerun</h2>'
        f'<p class="verdict">{esc(result["changes"]["description"])}</p>{figures}{band}'
        f'<dl class="kv"><dt>trace</dt><dd><code>{esc(result["trace"]["path"])}</code></dd>'
        f'<dt>rerun</dt><dd><code>{esc(result["rerun"]["path"])}</code></dd></dl>'
        '<table id="predictors"><thead><tr><th>predictor</th><th class="num">predicted</th><th class="num">error</th>'
        f"</tr></thead><tbody>{baselines}</tbody></table></section>"
        + (f'<section id="not-expressed"><h2>Not in the prediction</h2><ul class="warnings">{missing}</ul></section>'
           if missing else "")
        + (f'<section id="notes"><h2>Notes</h2><ul>{notes}</ul></section>' if notes else "")
        + '<section id="operations"><h2>Operations</h2><table id="operations-table"><thead><tr><th>operation</th>'
        '<th class="num">traced</th><th class="num">predicted</th><th class="num">measured</th>'
        f'<th class="num">error</th></tr></thead><tbody>{rows}</tbody></table></section>'
    )
    return _page("crystalperf validate", body)
