"""The renderer interface."""

from __future__ import annotations

from typing import Any, ClassVar


class Renderer:
    """Turns the report document into text of one format."""

    name: ClassVar[str] = ""
    extension: ClassVar[str] = ""

    def render(self, report: dict[str, Any]) -> str:
        raise NotImplementedError
