"""Framework hooks. Each ``integrations/<framework>/`` implements :class:`~crystalperf.integrations.base.Integration`
with the same files for the same roles; the core never imports them (it finds their commands, trace readers,
source locators and what-if models through entry points)."""

from __future__ import annotations

import logging
from importlib import metadata

from crystalperf.integrations.base import Integration

__all__ = ["Integration", "available"]

log = logging.getLogger("crystalperf")


def available() -> list[Integration]:
    """Every integration registered under the ``crystalperf.integrations`` entry point group (installed or not:
    an integration's contract loads without its framework)."""
    found: list[Integration] = []
    try:
        entries = sorted(metadata.entry_points(group="crystalperf.integrations"), key=lambda e: e.name)
    except Exception:  # a broken distribution's metadata must not break the caller
        return found
    for entry in entries:
        try:
            found.append(entry.load())
        except Exception as exc:
            log.debug("integration %s not available: %s", entry.name, exc)
    return found
