"""What every Flink test checks in a report: no top function is synchronisation or scheduling plumbing."""

from __future__ import annotations

from typing import Any

from crystalperf.core.attribution.waiting import is_plumbing


def plumbing_top_functions(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(operation id, function) for every top function of the report that is plumbing (expected: none)."""
    return [
        (op["id"], function["name"])
        for op in report["operations"]
        for function in op.get("top_functions") or []
        if is_plumbing(function["name"])
    ]
