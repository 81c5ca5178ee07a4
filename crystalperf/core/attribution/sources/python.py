"""Python frames: (file, line) -> the enclosing function's full text and docstring, through ``ast``.

A frame's file name comes from the trace, so it may name anything: only regular files up to
``CRYSTALPERF_MAX_SOURCE_FILE_BYTES`` are read (a FIFO or ``/dev/zero`` is reported and passed over).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from crystalperf.core import limits
from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.core.attribution.sources import LocateContext
from crystalperf.core.errors import BadInputError
from crystalperf.core.trace import Frame

_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class _Function:
    name: str
    first_line: int  # the first decorator's line: decorators belong to the function's text
    last_line: int
    node: ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class _ParsedFile:
    lines: list[str]
    functions: list[_Function]  # outer before inner, so the last match of a line is the innermost


def _functions(tree: ast.AST) -> list[_Function]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, _FUNCTION_NODES):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            found.append(_Function(node.name, first, node.end_lineno or node.lineno, node))
    found.sort(key=lambda f: (f.first_line, -f.last_line))
    return found


class PythonLocator:
    """Resolves Python frames from the files on this machine (the job's own and its libraries)."""

    name = "python"

    def __init__(self, max_files: int = 4096, max_cached_bytes: int = 256 << 20) -> None:
        self._files: dict[str, _ParsedFile | None] = {}
        self._max_files = max_files
        self._max_cached_bytes = max_cached_bytes
        self._cached_bytes = 0

    def _parse(self, path: str, context: LocateContext) -> _ParsedFile | None:
        if path in self._files:
            return self._files[path]
        parsed: _ParsedFile | None = None
        try:
            source = limits.read_regular(path, limits.MAX_SOURCE_FILE_BYTES, "source file").decode(
                "utf-8", errors="replace")
            parsed = _ParsedFile(source.splitlines(), _functions(ast.parse(source, filename=path)))
        except BadInputError as exc:
            if exc.problem == "no such file":
                context.report(f"python: {path}: file missing or moved since the job ran")
            else:
                context.report(f"python: {path}: not read ({exc.problem})")
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            context.report(f"python: {path}: cannot be parsed ({type(exc).__name__}: {exc})")
        size = sum(len(line) for line in parsed.lines) if parsed is not None else 0
        if len(self._files) < self._max_files and self._cached_bytes + size <= self._max_cached_bytes:
            self._files[path] = parsed
            self._cached_bytes += size
        return parsed

    def _candidates(self, frame: Frame, context: LocateContext) -> list[str]:
        """The recorded path, else the same relative path under the user's source roots (a job that ran
        elsewhere, e.g. in a container, recorded paths that exist only under another prefix)."""
        assert frame.file is not None
        paths = [frame.file]
        if not os.path.isabs(frame.file) or not os.path.exists(frame.file):
            # The last few path components are enough to find a file under a root (a frame's file name may
            # be arbitrarily long: every suffix under every root would be quadratic in it).
            parts = frame.file.lstrip("/").split("/")[-16:]
            for root in context.source_roots[:64]:
                paths.extend(os.path.join(root, *parts[i:]) for i in range(len(parts)))
        return paths

    def locate(self, frame: Frame, context: LocateContext) -> FunctionSource | None:
        if frame.language != "python" or not frame.file or frame.file.startswith("<"):
            return None
        parsed = None
        path = frame.file
        for candidate in self._candidates(frame, context):
            if limits.is_regular_file(candidate):
                path = candidate
                parsed = self._parse(candidate, context)
                break
        else:
            parsed = self._parse(frame.file, context)  # reports the missing file once
        if parsed is None:
            return None
        function = self._enclosing(parsed, frame)
        if function is None:
            return None  # module-level code: no function to classify, the scan goes on downward
        code = "\n".join(parsed.lines[function.first_line - 1 : function.last_line])
        return FunctionSource(
            qualified_name=frame.name,
            language="python",
            code=code,
            doc=ast.get_docstring(function.node) or "",
            origin="source",
            location=f"{path}:{function.first_line}",
        )

    @staticmethod
    def _enclosing(parsed: _ParsedFile, frame: Frame) -> _Function | None:
        short = frame.name.rsplit(".", 1)[-1]
        if frame.line is not None:
            inside = [f for f in parsed.functions if f.first_line <= frame.line <= f.last_line]
            return inside[-1] if inside else None
        named = [f for f in parsed.functions if f.name == short]
        return named[0] if len(named) == 1 else None
