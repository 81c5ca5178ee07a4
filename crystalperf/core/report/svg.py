"""Server-side SVG for the HTML report: the layered, hierarchical DAG and the stacked resource bars.

Everything here is drawn in Python so the report needs no script library and no network. Every
string that comes from the trace passes through :func:`esc` before it reaches the markup.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from html import escape
from typing import Any

from crystalperf.core.units import format_seconds

# The categories a second of an operation goes to: the three resources, and waiting (for input, for
# downstream, for nothing). Reports of older versions have no waiting and draw as before.
RESOURCES = ("cpu", "disk", "network", "waiting")
# Okabe-Ito: distinguishable with every common colour-vision deficiency.
COLOURS = {"cpu": "#0072B2", "disk": "#E69F00", "network": "#009E73", "waiting": "#CC79A7", "outside": "#B8B8B8"}
LABELS = {"cpu": "CPU", "disk": "disk", "network": "network", "waiting": "waiting", "outside": "outside operations"}

NODE_W = 172
NODE_H = 52
COL_GAP = 38
ITEM_GAP = 14
ROW_GAP = 44
LINE_GAP = 22
PAD = 10
HEADER_H = 40
MAX_WIDTH = 1320
CHAR_W = 6.9  # mean advance of the 12 px sans-serif label font; for truncation only


def esc(value: object) -> str:
    """HTML/SVG-escape any value (quotes included, so it is safe inside attributes too)."""
    return escape(str(value), quote=True)


def seconds(value: Any) -> str:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "—"
    return format_seconds(float(value))


def clip(text: str, width_px: float, char_w: float = CHAR_W) -> str:
    """Shorten text to fit width_px (estimated), marking the cut; escape after clipping, not before."""
    limit = max(3, int(width_px / char_w))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def total(resource_seconds: dict[str, float] | None) -> float:
    if not resource_seconds:
        return 0.0
    # Spelled out (the sum of RESOURCES, in their order): the HTML report ranks every operation by it, 80,000
    # calls for a job of 20,000 operations.
    get = resource_seconds.get
    return (float(get("cpu") or 0.0) + float(get("disk") or 0.0) + float(get("network") or 0.0)
            + float(get("waiting") or 0.0))


def mini_bar(vector: dict[str, float] | None, x: float, y: float, w: float, h: float) -> str:
    """A thin stacked bar of a resource vector (fractions summing to ~1)."""
    vector = vector or {}
    parts = []
    cursor = x
    for r in RESOURCES:
        width = max(0.0, float(vector.get(r) or 0.0)) * w
        if width > 0.05:
            parts.append(f'<rect class="seg-{r}" x="{cursor:.1f}" y="{y:.1f}" width="{width:.1f}" height="{h:.1f}" '
                         f'fill="{COLOURS[r]}"/>')
        cursor += width
    if not parts:
        parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="#e3e3e3"/>')
    return "".join(parts)


def vector_text(vector: dict[str, float] | None) -> str:
    vector = vector or {}
    return " · ".join(f"{LABELS[r]} {float(vector.get(r) or 0.0):.0%}" for r in RESOURCES)


# -- which operations the DAG draws -----------------------------------------------------------------

@dataclass
class Hierarchy:
    """The report's operations indexed by path, with their children and the drawing order."""

    ops: dict[str, dict[str, Any]]
    children: dict[str | None, list[str]]
    anchors: dict[str, str]

    @classmethod
    def of(cls, report: dict[str, Any]) -> Hierarchy:
        ops: dict[str, dict[str, Any]] = {}
        children: dict[str | None, list[str]] = {None: []}
        anchors: dict[str, str] = {}
        for i, op in enumerate(report.get("operations", [])):
            path = str(op.get("path", op.get("id", i)))
            ops[path] = op
            anchors[path] = f"op-{i}"
        for path, op in ops.items():
            parent = op.get("parent")
            parent = parent if parent in ops else None
            children.setdefault(parent, []).append(path)
        return cls(ops, children, anchors)

    def depth(self, path: str) -> int:
        d = 0
        parent = self.ops[path].get("parent")
        while parent in self.ops:
            d += 1
            parent = self.ops[parent].get("parent")
        return d

    def leaves(self) -> list[str]:
        return [p for p in self.ops if not self.children.get(p)]

    @cached_property
    def ranks(self) -> dict[str, tuple[int, float, float]]:
        """Every operation's ``_rank``, worked out once: the DAG, the bars and the table all order by it."""
        return {path: _rank(op) for path, op in self.ops.items()}


def _rank(op: dict[str, Any]) -> tuple[int, float, float]:
    return (0 if op.get("on_critical_path") else 1, -total(op.get("resource_seconds")),
            -float(op.get("runtime_s") or 0.0))


def select_nodes(h: Hierarchy, budget: int) -> set[str]:
    """All operations when they fit; else every top-level operation (if they fit), then the critical
    path, then the largest by resource time — each drawn operation with its ancestors."""
    if len(h.ops) <= budget:
        return set(h.ops)
    keep: set[str] = set()
    tops = h.children.get(None, [])
    if len(tops) <= budget:
        keep.update(tops)
    else:
        keep.update(heapq.nsmallest(budget, tops, key=h.ranks.__getitem__))
    depth = {p: h.depth(p) for p in h.ops}
    ranks = h.ranks
    rest = sorted((p for p in h.ops if depth[p] > 0), key=lambda p: (ranks[p][0], depth[p], *ranks[p][1:]))
    for path in rest:
        if len(keep) >= budget:
            break
        chain = []
        node: str | None = path
        while node is not None and node not in keep:
            chain.append(node)
            parent = h.ops[node].get("parent")
            node = parent if parent in h.ops else None
        if len(keep) + len(chain) <= budget:
            keep.update(chain)
    return keep


# -- layered layout ----------------------------------------------------------------------------------

@dataclass
class Box:
    path: str
    w: float
    h: float
    cluster: bool = False
    hidden: int = 0  # children not drawn
    items: list[tuple[Box, float, float]] = field(default_factory=list)  # child box and its offset


def _generations(paths: Sequence[str], edges: Iterable[tuple[str, str]], start: dict[str, float],
                 keep: set[str] | None = None) -> list[list[str]]:
    """The siblings in topological generations (networkx's: the sources, then what only they precede, ...),
    each in time order; one layer in time order when the edges form a cycle. ``keep``: only those drawn, in the
    generations of all of them, empty generations left out. Worked out on plain dicts, and only the drawn sorted:
    a networkx graph of 20,000 operations took most of the HTML report's time, to draw 200 of them."""
    succ: dict[str, list[str]] = {p: [] for p in paths}
    indegree = dict.fromkeys(succ, 0)
    seen: set[tuple[str, str]] = set()
    for u, v in edges:
        if u in succ and v in succ and (u, v) not in seen:
            seen.add((u, v))
            succ[u].append(v)
            indegree[v] += 1
    layers: list[list[str]] = []
    layer = [p for p, n in indegree.items() if n == 0]
    placed = 0
    while layer:
        layers.append(layer)
        placed += len(layer)
        following: list[str] = []
        for u in layer:
            for v in succ[u]:
                indegree[v] -= 1
                if indegree[v] == 0:
                    following.append(v)
        layer = following
    if placed < len(succ):  # a cycle
        layers = [list(paths)]
    if keep is not None:
        layers = [drawn for drawn in ([p for p in layer if p in keep] for layer in layers) if drawn]
    return [sorted(layer, key=lambda p: (start.get(p, 0.0), p)) for layer in layers]


class DagLayout:
    """Top level: topological generations as rows (wrapped when too wide); nested levels: generations
    as columns inside their parent's box (wrapped into bands when too wide)."""

    def __init__(self, h: Hierarchy, keep: set[str], edges: Sequence[dict[str, Any]]) -> None:
        self.h = h
        self.keep = keep
        self.edges = [(str(e.get("from")), str(e.get("to")), bool(e.get("implicit"))) for e in edges]
        self.sibling_edges: dict[str | None, list[tuple[str, str]]] = {}
        for u, v, _ in self.edges:
            if u in h.ops and v in h.ops:
                self.sibling_edges.setdefault(h.ops[u].get("parent"), []).append((u, v))
        self.start = {p: float(op.get("start") or 0.0) for p, op in h.ops.items()}

    def _layers(self, parent: str | None) -> list[list[str]]:
        siblings = self.h.children.get(parent, [])
        return _generations(siblings, self.sibling_edges.get(parent, []), self.start, self.keep)

    def box(self, path: str, max_width: float) -> Box:
        children = self.h.children.get(path, [])
        drawn = [c for c in children if c in self.keep]
        if not drawn:
            return Box(path, NODE_W, NODE_H, hidden=len(children))
        inner = max_width - 2 * PAD
        bands: list[list[list[Box]]] = [[]]
        band_w = 0.0
        for layer in self._layers(path):
            column = [self.box(c, inner) for c in layer]
            col_w = max(b.w for b in column)
            if bands[-1] and band_w + COL_GAP + col_w > inner:
                bands.append([])
                band_w = 0.0
            band_w += (COL_GAP if bands[-1] else 0.0) + col_w
            bands[-1].append(column)
        items: list[tuple[Box, float, float]] = []
        y: float = HEADER_H
        width = 0.0
        for band in bands:
            heights = [sum(b.h for b in col) + ITEM_GAP * (len(col) - 1) for col in band]
            band_h = max(heights)
            x: float = PAD
            for col, col_h in zip(band, heights, strict=True):
                col_w = max(b.w for b in col)
                cy = y + (band_h - col_h) / 2
                for b in col:
                    items.append((b, x + (col_w - b.w) / 2, cy))
                    cy += b.h + ITEM_GAP
                x += col_w + COL_GAP
            width = max(width, x - COL_GAP + PAD)
            y += band_h + LINE_GAP
        hidden = len(children) - len(drawn)
        height = y - LINE_GAP + PAD + (16 if hidden else 0)
        return Box(path, max(width, 220.0), height, cluster=True, hidden=hidden, items=items)

    def top(self) -> tuple[list[tuple[Box, float, float]], float, float]:
        """The top-level boxes with their positions, and the drawing's width and height."""
        placed: list[tuple[Box, float, float]] = []
        y = 0.0
        width = 0.0
        for layer in self._layers(None):
            x = 0.0
            line_h = 0.0
            for path in layer:
                b = self.box(path, MAX_WIDTH)
                if x > 0 and x + b.w > MAX_WIDTH:
                    y += line_h + LINE_GAP
                    x, line_h = 0.0, 0.0
                placed.append((b, x, y))
                x += b.w + COL_GAP
                line_h = max(line_h, b.h)
                width = max(width, x - COL_GAP)
            y += line_h + ROW_GAP
        return placed, width, max(0.0, y - ROW_GAP)


def _node_title(op: dict[str, Any]) -> str:
    lines = [
        f"{op.get('name', '')} ({op.get('kind', '')})",
        f"runtime {seconds(op.get('runtime_s'))}, {op.get('tasks', 0)} tasks",
        f"{vector_text(op.get('vector'))} (from {op.get('vector_source', '?')})",
    ]
    if op.get("on_critical_path"):
        lines.append(f"on the critical path: {float(op.get('share_of_critical_path') or 0.0):.0%} of it")
    return esc("\n".join(lines))


def render_dag(report: dict[str, Any], budget: int = 200, hierarchy: Hierarchy | None = None) -> tuple[str, int, int]:
    """The DAG as one ``<svg id="dag">``; returns (svg, operations drawn, operations in the report). ``hierarchy``:
    the report's, when the caller has it already."""
    h = hierarchy or Hierarchy.of(report)
    if not h.ops:
        return "", 0, 0
    keep = select_nodes(h, budget)
    layout = DagLayout(h, keep, report.get("edges", []))
    placed, width, height = layout.top()
    critical_edges: set[tuple[str, str]] = set()
    for key in ("critical_path", "critical_path_top"):
        path = report.get(key) or []
        critical_edges.update(zip(path, path[1:], strict=False))
    rects: dict[str, tuple[float, float, float, float]] = {}
    backgrounds: list[str] = []
    fronts: list[str] = []

    def emit(b: Box, x: float, y: float) -> None:
        op = h.ops[b.path]
        rects[b.path] = (x, y, b.w, b.h)
        critical = " critical" if op.get("on_critical_path") else ""
        anchor = h.anchors[b.path]
        name = str(op.get("name") or op.get("id") or b.path)
        sub = f"{seconds(op.get('runtime_s'))} · {op.get('kind', '')}"
        if op.get("tasks"):
            sub += f" · {op['tasks']} tasks"
        title = f"<title>{_node_title(op)}</title>"
        if b.cluster:
            backgrounds.append(
                f'<g class="cluster{critical}" data-path="{esc(b.path)}">{title}'
                f'<rect class="box" x="{x:.1f}" y="{y:.1f}" width="{b.w:.1f}" height="{b.h:.1f}" rx="8"/></g>')
            text_w = b.w - 2 * PAD - 90
            fronts.append(
                f'<a href="#{anchor}" class="cluster-head">{title}'
                f'<text x="{x + PAD:.1f}" y="{y + 17:.1f}" class="node-name">{esc(clip(name, text_w))}</text>'
                f'<text x="{x + PAD:.1f}" y="{y + 31:.1f}" class="node-sub">{esc(clip(sub, text_w + 40, 6.0))}</text>'
                + mini_bar(op.get("vector"), x + b.w - PAD - 80, y + 12, 80, 7) + "</a>")
            for child, dx, dy in b.items:
                emit(child, x + dx, y + dy)
            if b.hidden:
                fronts.append(f'<text x="{x + PAD:.1f}" y="{y + b.h - 8:.1f}" class="node-note">'
                              f'+ {b.hidden} more not drawn</text>')
        else:
            more = f" (+{b.hidden} inside)" if b.hidden else ""
            fronts.append(
                f'<a href="#{anchor}" class="op-node{critical}" data-path="{esc(b.path)}">{title}'
                f'<rect class="box" x="{x:.1f}" y="{y:.1f}" width="{b.w:.1f}" height="{b.h:.1f}" rx="5"/>'
                f'<text x="{x + 8:.1f}" y="{y + 17:.1f}" class="node-name">{esc(clip(name, b.w - 16))}</text>'
                f'<text x="{x + 8:.1f}" y="{y + 32:.1f}" class="node-sub">{esc(clip(sub + more, b.w - 16, 6.0))}</text>'
                + mini_bar(op.get("vector"), x + 8, y + b.h - 12, b.w - 16, 6) + "</a>")

    for b, x, y in placed:
        emit(b, x + 2, y + 2)
    lines: list[str] = []
    for u, v, implicit in layout.edges:
        if u not in rects or v not in rects:
            continue
        ux, uy, uw, uh = rects[u]
        vx, vy, vw, vh = rects[v]
        top_level = h.ops[u].get("parent") not in h.ops
        if top_level:
            x1, y1, x2, y2 = ux + uw / 2, uy + uh, vx + vw / 2, vy
            bend = max(16.0, (y2 - y1) / 2)
            d = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2 - 2:.1f}"
        else:
            x1, y1, x2, y2 = ux + uw, uy + uh / 2, vx, vy + vh / 2
            bend = max(16.0, abs(x2 - x1) / 2)
            d = f"M{x1:.1f},{y1:.1f} C{x1 + bend:.1f},{y1:.1f} {x2 - bend:.1f},{y2:.1f} {x2 - 2:.1f},{y2:.1f}"
        classes = "edge" + (" critical" if (u, v) in critical_edges else "") + (" implicit" if implicit else "")
        marker = "arrow-critical" if (u, v) in critical_edges else "arrow"
        lines.append(f'<path class="{classes}" d="{d}" marker-end="url(#{marker})"/>')
    w, hgt = width + 6, height + 6
    svg = (
        f'<svg id="dag" class="dag" xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{hgt:.0f}" '
        f'viewBox="0 0 {w:.0f} {hgt:.0f}" role="img" aria-label="operation DAG">'
        '<defs>'
        '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#8a8f98"/></marker>'
        '<marker id="arrow-critical" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#1b1b1b"/></marker>'
        '</defs>'
        + "".join(backgrounds) + "".join(lines) + "".join(fronts) + "</svg>"
    )
    return svg, len(keep), len(h.ops)


# -- stacked resource-time bars ---------------------------------------------------------------------

def _nice_step(span: float, ticks: int = 6) -> float:
    if span <= 0:
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * power:
            return m * power
    return 10 * power


def render_bars(report: dict[str, Any], limit: int = 50,
                hierarchy: Hierarchy | None = None) -> tuple[str, int, int, float]:
    """Stacked cpu/disk/network seconds of the finest-level operations, largest first, as one
    ``<svg id="resource-bars">``; returns (svg, drawn, total, seconds of the ones left out). ``hierarchy``: as
    :func:`render_dag`."""
    h = hierarchy or Hierarchy.of(report)
    leaves = h.leaves()
    ranks = h.ranks
    leaf_seconds = {p: -ranks[p][1] for p in leaves}  # the rank's negated total, negated back (exact)
    shown = heapq.nsmallest(limit, leaves, key=lambda p: -leaf_seconds[p])  # in the order a stable sort gives
    if not shown:
        return "", 0, 0, 0.0
    drawn = set(shown)
    omitted_s = sum(leaf_seconds[p] for p in leaves if p not in drawn)
    biggest = max(leaf_seconds[p] for p in shown) or 1.0
    step = _nice_step(biggest)
    axis_max = step * math.ceil(biggest / step) if biggest > 0 else 1.0
    label_w, bar_w, row_h, top, value_w = 300.0, 760.0, 24.0, 28.0, 90.0
    width = label_w + bar_w + value_w
    height = top + row_h * len(shown) + 8
    parts = []
    tick = 0.0
    while tick <= axis_max + 1e-9:
        x = label_w + bar_w * tick / axis_max
        parts.append(f'<line class="grid" x1="{x:.1f}" y1="{top - 6:.1f}" x2="{x:.1f}" y2="{height - 6:.1f}"/>'
                     f'<text class="tick" x="{x:.1f}" y="{top - 10:.1f}">{esc(seconds(tick))}</text>')
        tick += step
    for i, path in enumerate(shown):
        op = h.ops[path]
        y = top + i * row_h
        parent = op.get("parent")
        name = str(op.get("name") or op.get("id") or path)
        label = f"{h.ops[parent].get('name', parent)} › {name}" if parent in h.ops else name
        critical = bool(op.get("on_critical_path"))
        rs = op.get("resource_seconds") or {}
        ws = op.get("work_seconds") or {}
        tip = esc(
            f"{label}\nwall-clock seconds: " + ", ".join(f"{LABELS[r]} {seconds(rs.get(r, 0.0))}" for r in RESOURCES)
            + "\ntask seconds (all slots): " + ", ".join(f"{LABELS[r]} {seconds(ws.get(r, 0.0))}" for r in RESOURCES)
            + (f"\non the critical path ({float(op.get('share_of_critical_path') or 0):.0%})" if critical else ""))
        row = [f'<g class="bar-row{" critical" if critical else ""}"><title>{tip}</title>']
        if critical:
            row.append(f'<path class="crit-mark" d="M4,{y + 12:.1f} l5,-5 l5,5 l-5,5 z"/>')
        row.append(f'<a href="#{h.anchors[path]}"><text class="bar-label" x="20" y="{y + 16:.1f}">'
                   f'{esc(clip(label, label_w - 28, 6.6))}</text></a>')
        x = label_w
        for r in RESOURCES:
            w = bar_w * float(rs.get(r) or 0.0) / axis_max
            if w > 0.05:
                row.append(f'<rect class="bar bar-{r}" x="{x:.1f}" y="{y + 4:.1f}" width="{w:.1f}" '
                           f'height="{row_h - 8:.1f}" fill="{COLOURS[r]}"/>')
            x += w
        row.append(f'<text class="bar-value" x="{x + 6:.1f}" y="{y + 16:.1f}">'
                   f'{esc(seconds(total(rs)))}</text></g>')
        parts.append("".join(row))
    svg = (f'<svg id="resource-bars" class="bars" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
           f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
           f'aria-label="resource seconds per operation">' + "".join(parts) + "</svg>")
    return svg, len(shown), len(leaves), omitted_s


def render_split(parts: Sequence[tuple[str, float]], width: float = 760, height: float = 30,
                 svg_id: str = "verdict-bar") -> str:
    """One stacked bar of named seconds (e.g. the critical path split) with the seconds inside."""
    whole = sum(max(0.0, v) for _, v in parts) or 1.0
    x = 0.0
    out = []
    for key, value in parts:
        w = width * max(0.0, value) / whole
        if w <= 0.05:
            continue
        out.append(f'<rect class="seg-{key}" x="{x:.1f}" y="0" width="{w:.1f}" height="{height:.0f}" '
                   f'fill="{COLOURS[key]}"><title>{esc(LABELS[key])}: {esc(seconds(value))}</title></rect>')
        label = f"{LABELS[key]} {seconds(value)}"
        if w > len(label) * 7.2 + 10:
            colour = "#111" if key in ("disk", "outside") else "#fff"
            out.append(f'<text x="{x + 6:.1f}" y="{height / 2 + 4:.1f}" fill="{colour}" class="seg-text">'
                       f'{esc(label)}</text>')
        x += w
    return (f'<svg id="{svg_id}" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="critical path split">'
            + "".join(out) + "</svg>")


def band_plot(low: float, mid: float, high: float, baseline: float, others: Sequence[tuple[str, float]],
              axis_max: float, width: float = 180, height: float = 22) -> str:
    """The prediction band against the measured runtime (grey tick) on a shared axis."""
    def px(v: float) -> float:
        return 4 + (width - 8) * min(max(v, 0.0), axis_max) / axis_max

    out = [f'<line x1="4" y1="{height / 2}" x2="{width - 4}" y2="{height / 2}" stroke="#ddd"/>',
           f'<line x1="{px(baseline):.1f}" y1="2" x2="{px(baseline):.1f}" y2="{height - 2}" stroke="#777" '
           f'stroke-width="2"><title>measured {esc(seconds(baseline))}</title></line>']
    for name, value in others:
        if math.isfinite(value):
            shape = "M{x},{y} l4,4 l-4,4 l-4,-4 z".format(x=f"{px(value):.1f}", y=f"{height / 2 - 4:.1f}")
            out.append(f'<path d="{shape}" fill="none" stroke="#555"><title>{esc(name)} '
                       f'{esc(seconds(value))}</title></path>')
    if all(math.isfinite(v) for v in (low, mid, high)):
        out.append(f'<rect x="{px(low):.1f}" y="{height / 2 - 5}" width="{max(2.0, px(high) - px(low)):.1f}" '
                   f'height="10" rx="3" fill="#56B4E9" opacity="0.55"><title>band {esc(seconds(low))} – '
                   f'{esc(seconds(high))}</title></rect>')
        out.append(f'<circle cx="{px(mid):.1f}" cy="{height / 2}" r="3.5" fill="#0b3d91"/>')
    return (f'<svg class="band" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}">' + "".join(out) + "</svg>")
