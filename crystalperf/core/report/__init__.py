"""Report renderers, chosen by name or by output extension (JSON, HTML, terminal)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    """Write ``crystalperf-report.<ext>`` for each format into out_dir; returns the files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        renderer = renderer_for(fmt)
        path = out_dir / f"crystalperf-report{renderer.extension}"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(renderer.render(report), encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    return written
