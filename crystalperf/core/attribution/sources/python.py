"""Python frames: (file, line) -> the enclosing function's full text and docstring, through ``ast``.

A frame's file name comes from the trace, so it may name anything: only regular files up to
``CRYSTALPERF_MAX_SOURCE_FILE_BYTES`` are read (a FIFO or ``/dev/zero`` is reported and passed over).

Code imported from a zip archive (``zipimport``: PySpark's workers run ``pyspark.zip``, ``--py-files`` ships zips,
eggs and ``.pyz`` applications) has a frame file inside the archive, ``.../pyspark.zip/pyspark/worker.py``: the
entry is read from the archive, within the same limits.
"""

from __future__ import annotations

import ast
import os
import re
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

from crystalperf.core import limits
from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.core.attribution.sources import LocateContext
from crystalperf.core.errors import BadInputError
from crystalperf.core.trace import Frame

_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)
LAMBDA = "<lambda>"
_FROZEN = re.compile(r"<frozen (?P<module>[A-Za-z_][A-Za-z0-9_.]{0,200})>")
# what zipimport imports from: a path component with one of these endings may be an archive, not a directory
_ARCHIVE_ENDINGS = (".zip", ".egg", ".pyz", ".whl")
# archives kept open at once (each holds its central directory in memory, bounded by open_zip)
_MAX_OPEN_ARCHIVES = 32
# the deepest entry looked for inside an archive (package directories and the module)
_MAX_ENTRY_DEPTH = 32


@dataclass(frozen=True)
class _Function:
    name: str
    first_line: int  # the first decorator's line: decorators belong to the function's text
    last_line: int
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


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
        elif isinstance(node, ast.Lambda):
            # a UDF or a key written inline, often at module level where no def encloses it
            found.append(_Function(LAMBDA, node.lineno, node.end_lineno or node.lineno, node))
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
        self._archives: dict[str, zipfile.ZipFile | None] = {}

    def _archive_member(self, path: str) -> tuple[str, str] | None:
        """(archive, entry) where ``path`` goes through a zip archive on this machine, else None. Only the last
        ``_MAX_ENTRY_DEPTH`` components may be the entry's: a trace's file name may be anything, and each candidate
        archive costs a ``stat``."""
        parts = path.split("/")
        for end in range(len(parts) - 1, max(0, len(parts) - 1 - _MAX_ENTRY_DEPTH), -1):
            head = "/".join(parts[:end])
            if head.lower().endswith(_ARCHIVE_ENDINGS) and limits.is_regular_file(head):
                return head, "/".join(parts[end:])
        return None

    def _open_archive(self, archive: str, context: LocateContext) -> zipfile.ZipFile | None:
        if archive not in self._archives:
            if len(self._archives) >= _MAX_OPEN_ARCHIVES:
                return None
            opened: zipfile.ZipFile | None = None
            try:
                opened = limits.open_zip(archive)
            except (OSError, zipfile.BadZipFile, BadInputError, ValueError, EOFError) as exc:
                context.report(f"python: {archive}: unreadable archive ({type(exc).__name__}: {exc})")
            self._archives[archive] = opened
        return self._archives[archive]

    def _read(self, path: str, context: LocateContext) -> bytes:
        """The bytes of a source file, or of an archive's entry where the path goes through one."""
        if not limits.is_regular_file(path):
            member = self._archive_member(path)
            archive = self._open_archive(member[0], context) if member is not None else None
            if member is not None and archive is not None:
                try:
                    return limits.read_zip_entry(archive, member[1], member[0], limits.MAX_SOURCE_FILE_BYTES)
                except KeyError:
                    raise BadInputError("no such file", path) from None
                except (zipfile.BadZipFile, EOFError, NotImplementedError) as exc:
                    raise BadInputError(f"unreadable archive entry ({type(exc).__name__}: {exc})", path) from None
        return limits.read_regular(path, limits.MAX_SOURCE_FILE_BYTES, "source file")

    def _exists(self, path: str) -> bool:
        return limits.is_regular_file(path) or self._archive_member(path) is not None

    def _parse(self, path: str, context: LocateContext) -> _ParsedFile | None:
        if path in self._files:
            return self._files[path]
        parsed: _ParsedFile | None = None
        try:
            source = self._read(path, context).decode("utf-8", errors="replace")
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
        if not os.path.isabs(frame.file) or not self._exists(frame.file):
            # The last few path components are enough to find a file under a root (a frame's file name may
            # be arbitrarily long: every suffix under every root would be quadratic in it).
            parts = frame.file.lstrip("/").split("/")[-16:]
            for root in context.source_roots[:64]:
                paths.extend(os.path.join(root, *parts[i:]) for i in range(len(parts)))
        return paths

    def locate(self, frame: Frame, context: LocateContext) -> FunctionSource | None:
        if frame.language != "python" or not frame.file:
            return None
        if frame.file.startswith("<"):
            return self._locate_frozen(frame, context)
        parsed = None
        path = frame.file
        for candidate in self._candidates(frame, context):
            if self._exists(candidate):
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
        return self._source(frame, parsed, function, path)

    def _locate_frozen(self, frame: Frame, context: LocateContext) -> FunctionSource | None:
        """A standard-library module the interpreter froze into itself (``<frozen os>``: ``os``, ``posixpath``,
        ``codecs``, the import system; CPython 3.11 on) from the standard library's source beside the interpreter
        that analyses: the function at the frame's line where it has the frame's name (another Python version's
        lines may differ), else the one function of that name."""
        match = _FROZEN.fullmatch(frame.file or "")
        if match is None:
            return None
        root = Path(sysconfig.get_paths()["stdlib"], *match["module"].split("."))
        path = next((str(p) for p in (root.with_suffix(".py"), root / "__init__.py") if limits.is_regular_file(p)),
                    None)
        parsed = self._parse(path, context) if path is not None else None
        if path is None or parsed is None:
            return None
        function = self._enclosing(parsed, frame)
        short = frame.name.rsplit(".", 1)[-1]
        if function is None or function.name != short:
            function = self._enclosing(parsed, frame.model_copy(update={"line": None}))
        return self._source(frame, parsed, function, path) if function is not None else None

    @staticmethod
    def _source(frame: Frame, parsed: _ParsedFile, function: _Function, path: str) -> FunctionSource:
        code = "\n".join(parsed.lines[function.first_line - 1 : function.last_line])
        return FunctionSource(
            qualified_name=frame.name,
            language="python",
            code=code,
            doc=(ast.get_docstring(function.node) or "") if not isinstance(function.node, ast.Lambda) else "",
            origin="source",
            location=f"{path}:{function.first_line}",
        )

    @staticmethod
    def _enclosing(parsed: _ParsedFile, frame: Frame) -> _Function | None:
        short = frame.name.rsplit(".", 1)[-1]
        # A lambda's frame is the lambda; any other frame on the line of a lambda (``sorted(x, key=lambda ...)``)
        # is the def around it.
        functions = [f for f in parsed.functions if (f.name == LAMBDA) == (short == LAMBDA)]
        if frame.line is not None:
            inside = [f for f in functions if f.first_line <= frame.line <= f.last_line]
            return inside[-1] if inside else None
        named = [f for f in functions if f.name == short]
        return named[0] if len(named) == 1 else None
