"""Reports in notebooks: ``crystalperf.load_report(path)`` returns an object Jupyter shows as the HTML report.

The report page is shown in an ``<iframe srcdoc=...>``: its stylesheet (which styles ``body``, ``table``,
``h2``...) stays inside the frame and cannot restyle the notebook, and the notebook's cannot restyle it.
The frame is sandboxed (no script runs in it; the page needs none).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from crystalperf.core.errors import BadInputError

FRAME_HEIGHT_PX = 900


class Report:
    """A crystalperf report: ``to_dict()`` is ``crystalperf-report.json``'s document, ``summary`` the terminal
    summary, ``html`` the self-contained page, and Jupyter renders it inline (``_repr_html_``)."""

    def __init__(self, document: dict[str, Any], source: str = "") -> None:
        self._document = document
        self.source = source

    def to_dict(self) -> dict[str, Any]:
        return self._document

    @property
    def total_runtime_s(self) -> float:
        return float(self._document.get("total_runtime_s") or 0.0)

    @property
    def bottleneck(self) -> str:
        return str((self._document.get("bottleneck") or {}).get("resource") or "")

    @property
    def summary(self) -> str:
        """What ``crystalperf analyze`` prints for the report."""
        from crystalperf.core.report.terminal import TerminalRenderer

        return TerminalRenderer(width=110).render(self._document)

    @property
    def html(self) -> str:
        from crystalperf.core.report.html import HtmlRenderer

        return HtmlRenderer().render(self._document)

    def _repr_html_(self) -> str:
        title = (self._document.get("application") or {}).get("name") or "crystalperf report"
        return (f'<iframe class="crystalperf-report" title="{html.escape(str(title), quote=True)}" '
                f'sandbox="" style="width:100%;height:{FRAME_HEIGHT_PX}px;border:1px solid #d8dde3" '
                f'srcdoc="{html.escape(self.html, quote=True)}"></iframe>')

    def __repr__(self) -> str:
        app = self._document.get("application") or {}
        return (f"<crystalperf Report {app.get('name') or app.get('id') or ''!r}: "
                f"{self.total_runtime_s:.2f} s, bottleneck {self.bottleneck or '?'}>")


def load_report(path: str | Path, *, classifier: Any = None) -> Report:
    """A ``crystalperf-report.json`` (taken as it is) or a trace (analysed here, as ``crystalperf analyze``
    does, without writing files); a directory holding either. Raises :class:`BadInputError` on bad input."""
    from crystalperf.core.compare import load_run

    if isinstance(classifier, str):
        from crystalperf.core.attribution.classify import load_classifier

        try:
            classifier = load_classifier(classifier)
        except ValueError as exc:
            raise BadInputError(str(exc)) from None
    run = load_run(path, classifier=classifier, with_predictions=True)
    return Report(run.report, run.path)
