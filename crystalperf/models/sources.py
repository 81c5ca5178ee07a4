"""tree-sitter plumbing shared by the corpus builder and the code classifier.

One parser per language from the per-language grammar wheels (they work offline, unlike
``tree-sitter-language-pack`` which fetches parsers at run time).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from crystalperf.core.errors import FrameworkNotInstalledError

GRAMMARS = {
    "java": "tree_sitter_java",
    "scala": "tree_sitter_scala",
    "python": "tree_sitter_python",
    "cpp": "tree_sitter_cpp",
}


@functools.cache
def parser_for(language: str) -> Any:
    """A tree-sitter parser for ``language`` (one of java, scala, python, cpp)."""
    if language not in GRAMMARS:
        raise ValueError(f"unsupported language {language!r} (supported: {', '.join(GRAMMARS)})")
    try:
        import tree_sitter

        grammar = importlib.import_module(GRAMMARS[language])
    except ImportError as exc:
        raise FrameworkNotInstalledError("tree-sitter", "models") from exc
    return tree_sitter.Parser(tree_sitter.Language(grammar.language()))
