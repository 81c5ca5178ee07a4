"""The human report: one self-contained ``crystalperf-report.html`` (no network fetches)."""

from __future__ import annotations

from html import escape
from typing import Any

from crystalperf.core.report.base import Renderer
from crystalperf.core.units import format_seconds


def _e(value: object) -> str:
    return escape(str(value), quote=True)


class HtmlRenderer(Renderer):
    name = "html"
    extension = ".html"

    def render(self, report: dict[str, Any]) -> str:
        app = report["application"]
        b = report["bottleneck"]
        rows = "".join(
            f"<tr><td>{_e(o['name'])}</td><td>{_e(o['kind'])}</td><td>{format_seconds(o['runtime_s'])}</td>"
            f"<td>{o['vector']['cpu']:.0%} / {o['vector']['disk']:.0%} / {o['vector']['network']:.0%}</td></tr>"
            for o in report["operations"]
        )
        preds = "".join(
            f"<tr><td>{_e(p['description'])}</td><td>{format_seconds(p['crystalperf']['runtime_s'])}</td></tr>"
            for p in report["predictions"]
        )
        return (
            "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>crystalperf report: {_e(app['name'] or app['id'])}</title></head><body>"
            f"<h1>{_e(app['framework'])} application {_e(app['name'] or app['id'])}</h1>"
            f"<p class='verdict'>{_e(b['sentence'])}</p>"
            f"<table><tr><th>operation</th><th>kind</th><th>runtime</th><th>cpu / disk / network</th></tr>{rows}</table>"
            f"<table><tr><th>change</th><th>predicted</th></tr>{preds}</table>"
            "</body></html>\n"
        )
