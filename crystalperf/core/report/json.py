"""The machine-readable report: ``crystalperf-report.json``."""

from __future__ import annotations

import json
import math
from typing import Any

from crystalperf.core.report.base import Renderer


def _clean(value: Any) -> Any:
    # JSON has no NaN/Infinity; a speed-up of infinity (a zero-time prediction) becomes null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class JsonRenderer(Renderer):
    name = "json"
    extension = ".json"

    def render(self, report: dict[str, Any]) -> str:
        return json.dumps(_clean(report), indent=2, sort_keys=False) + "\n"
