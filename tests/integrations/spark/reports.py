"""Checks every Spark integration test makes of the reports its job produced."""

from __future__ import annotations

from typing import Any


def assert_no_plumbing_top_functions(report: dict[str, Any]) -> None:
    """No operation's top function is a thread-pool, lock, sleep or wait frame: those say that a thread
    waited, never what it worked or waited on."""
    from crystalperf.core.attribution.waiting import is_plumbing

    plumbing = [(op["id"], f["name"]) for op in report["operations"] for f in op.get("top_functions", [])
                if is_plumbing(f["name"])]
    assert not plumbing, f"plumbing frames reported as top functions: {plumbing}"
