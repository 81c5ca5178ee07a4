"""Stage 5, the report: the document (``document``) and its renderers (JSON, HTML, terminal), chosen by name or by
output extension; ``diff`` and ``svg`` draw two runs side by side and the DAG."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crystalperf.core import atomic
from crystalperf.core.parallel import MIN_OPERATIONS, Beside
from crystalperf.core.report.base import Renderer
from crystalperf.core.report.html import HtmlRenderer
from crystalperf.core.report.json import JsonRenderer
from crystalperf.core.report.terminal import TerminalRenderer

log = logging.getLogger(__name__)

RENDERERS: dict[str, type[Renderer]] = {
    "json": JsonRenderer,
    "html": HtmlRenderer,
    "terminal": TerminalRenderer,
}


def renderer_for(name_or_path: str) -> Renderer:
    """A renderer by name (``json``) or by the extension of a file name (``report.html``)."""
    key = name_or_path.lower()
    if key in RENDERERS:
        return RENDERERS[key]()
    for cls in RENDERERS.values():
        if cls.extension and key.endswith(cls.extension):
            return cls()
    raise ValueError(f"no report renderer for {name_or_path!r} (known: {', '.join(RENDERERS)})")


def write_reports(report: dict[str, Any], out_dir: Path, formats: Sequence[str] = ("json", "html")) -> list[Path]:
    """Write ``crystalperf-report.<ext>`` for each format into out_dir, replaced as a set; returns the files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    renderers = [renderer_for(fmt) for fmt in formats]

    def render(chosen: Sequence[Renderer]) -> list[bytes]:
        return [renderer.render(report).encode("utf-8", "replace") for renderer in chosen]

    # A big report's other formats (its HTML page) are rendered on a second core while the first is
    # (crystalperf.core.parallel).
    worth = len(renderers) > 1 and len(report.get("operations") or ()) >= MIN_OPERATIONS
    with Beside(lambda: render(renderers[1:]), worth=worth) as rest:
        rendered = render(renderers[:1])
        rendered += rest.result()
    files = {out_dir / f"crystalperf-report{renderer.extension}": data
             for renderer, data in zip(renderers, rendered, strict=True)}
    # Renamed into place only once every format is rendered and on disk: a report's JSON and HTML always agree.
    return atomic.replace_set(files)
