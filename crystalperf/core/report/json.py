"""The machine-readable report: ``crystalperf-report.json``."""

from __future__ import annotations

import json
import math
from typing import Any

from crystalperf.core.report.base import Renderer

INDENT_UP_TO_OPERATIONS = 2000


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
        # Indented for people up to a size they would read; past it the C encoder (which indenting disables)
        # keeps a report of 20,000 operations from taking seconds to write.
        indent = 2 if len(report.get("operations") or ()) <= INDENT_UP_TO_OPERATIONS else None
        try:
            # Almost every report is all finite: the encoder's own check finds the rare one that is not, without
            # a Python walk of a million values first (a second of a 20,000-operation report).
            text = json.dumps(report, indent=indent, allow_nan=False)
        except ValueError:
            text = json.dumps(_clean(report), indent=indent)
        return text + "\n"
