"""The applications' logs under the paths a fleet run is given.

A directory is walked (hidden directories and the run's own output left out): in each directory every trace
catalog (entry points ``crystalperf.trace_catalogs``, what ``crystalperf import FORMAT DIR --list`` uses) lists
the logs it holds, and a file named as crystalperf names its traces (``crystalperf-trace.json[.gz]``) is a trace.
A directory a catalog claims as one log (a rolling Spark event log) is not walked into. A file given by name is
a trace when it begins as one, else whatever a catalog makes of it; a file nothing claims is still a source, whose
analysis then says what it is not.

Nothing is read here but the heads of candidate logs and ``stat``: the analysis reads the logs.
"""

from __future__ import annotations

import gzip
import logging
import os
import zlib
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from crystalperf.core import limits
from crystalperf.core.errors import BadInputError
from crystalperf.core.trace import TRACE_FILENAMES
from crystalperf.fleet.row import Source

log = logging.getLogger(__name__)

TRACE = "trace"  # the format of a crystalperf trace: read by crystalperf.core.trace.load_trace
UNKNOWN = "unknown"  # a file given by name that no reader claims
_HEAD = 512


def catalogs() -> dict[str, Callable[[Path], Sequence[Any]]]:
    """The installed trace catalogs by format name; one that cannot be loaded is left out (and logged)."""
    found: dict[str, Callable[[Path], Sequence[Any]]] = {}
    try:
        entry_points = list(metadata.entry_points(group="crystalperf.trace_catalogs"))
    except Exception:  # a broken distribution's metadata must not end the run
        return found
    for ep in entry_points:
        try:
            found[ep.name] = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plug-in leaves its format out, said once
            log.warning("the %s catalog cannot be loaded: %s", ep.name, exc)
    return dict(sorted(found.items()))


def _stat(path: Path) -> tuple[int, int]:
    """(size, mtime in ns) of a file, or of every file of a directory log together (the latest mtime)."""
    info = path.stat()
    if not limits.is_directory(path):
        return info.st_size, info.st_mtime_ns
    size, mtime = 0, info.st_mtime_ns
    for child in path.iterdir():
        if child.is_file():
            child_info = child.stat()
            size += child_info.st_size
            mtime = max(mtime, child_info.st_mtime_ns)
    return size, mtime


def _source(path: Path, fmt: str) -> Source | None:
    try:
        size, mtime = _stat(path)
    except OSError:  # gone since it was listed: nothing to analyse
        return None
    return Source(os.path.abspath(path), fmt, size, mtime)


def begins_as_trace(path: Path) -> bool:
    """Whether a file's first bytes (decompressed when gzip) open a crystalperf trace document."""
    try:
        with limits.open_regular(path, limits.MAX_TRACE_BYTES, "trace file") as handle:
            head = handle.read(_HEAD)
        if head[:2] == b"\x1f\x8b":
            head = zlib.decompressobj(wbits=31).decompress(head, _HEAD)
    except (BadInputError, OSError, zlib.error, gzip.BadGzipFile):
        return False
    return b'"schema_version"' in head[:200]


def _listed(directory: Path, found: dict[str, Callable[[Path], Sequence[Any]]]) -> list[tuple[Path, str]]:
    logs = []
    for fmt, catalog in found.items():
        try:
            apps = catalog(directory)
        except (BadInputError, OSError) as exc:
            log.warning("%s: the %s catalog cannot list it: %s", directory, fmt, exc)
            continue
        logs += [(Path(app.path), fmt) for app in apps]
    return logs


def _walk(top: Path, found: dict[str, Callable[[Path], Sequence[Any]]], skip: set[str]) -> Iterable[Source]:
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        claimed = set()
        for path, fmt in _listed(here, found):
            claimed.add(path.name)
            source = _source(path, fmt)
            if source is not None:
                yield source
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in claimed
                             and os.path.abspath(here / d) not in skip)
        for name in sorted(filenames):
            if name in TRACE_FILENAMES and name not in claimed:
                source = _source(here / name, TRACE)
                if source is not None:
                    yield source


def discover(paths: Sequence[str | Path], *, since_ns: int | None = None,
             skip: Sequence[str | Path] = ()) -> list[Source]:
    """Every log under ``paths``, each once, in path order; with ``since_ns`` only those modified since then
    (epoch nanoseconds). ``skip``: directories never walked into (the run's output). A path that does not exist
    is a :class:`BadInputError`."""
    found = catalogs()
    skipped = {os.path.abspath(p) for p in skip}
    sources: dict[str, Source] = {}
    for given in paths:
        path = Path(given)
        if not limits.exists(path):
            raise BadInputError("no such file or directory", path)
        if limits.is_directory(path):
            listed: Iterable[Source | None] = _walk(path, found, skipped)
        elif begins_as_trace(path):
            listed = [_source(path, TRACE)]
        else:
            claims = _listed(path, found)
            listed = [_source(p, fmt) for p, fmt in claims] or [_source(path, UNKNOWN)]
        for source in listed:
            if source is not None and (since_ns is None or source.mtime_ns >= since_ns):
                sources.setdefault(source.path, source)
    return [sources[key] for key in sorted(sources)]
