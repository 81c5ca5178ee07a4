"""The fleet's results, one small file per log, kept between runs.

A result stands for its log while the log is the one analysed: the same size and modification time, or, where
only the time moved (a copy, a ``touch``), the same content hash (BLAKE2b-128 of its bytes). It also needs the
same analysis: the crystalperf version, the classifier asked for, the row's version and the limits in force
(:func:`fingerprint`). Anything else is analysed again.

Each result is written (atomically) as soon as its analysis ends, so a run that is interrupted leaves every
finished result behind and the next run resumes from there. A result whose analysis did not end on its own (past
its time or memory bound, its process killed) is kept for the run's table but marked to be tried again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crystalperf import __version__
from crystalperf.core import atomic, limits
from crystalperf.fleet.row import ROW_VERSION, Source

CACHE_VERSION = 1
_CHUNK = 1 << 20


def fingerprint(classifier: str | None, limit_values: dict[str, str]) -> str:
    """What besides the log decides its row: crystalperf's version, the classifier, the row's version, the limits."""
    parts = [__version__, classifier or "default", ROW_VERSION,
             *(f"{k}={v}" for k, v in sorted(limit_values.items()))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def content_hash(path: str | Path) -> str:
    """BLAKE2b-128 of a log's bytes: a file's, or a directory log's files' in name order (names included)."""
    digest = hashlib.blake2b(digest_size=16)
    path = Path(path)
    files = sorted(p for p in path.iterdir() if p.is_file()) if limits.is_directory(path) else [path]
    for file in files:
        if len(files) > 1 or file != path:
            digest.update(file.name.encode("utf-8", "surrogateescape") + b"\0")
        with open(file, "rb") as handle:
            while block := handle.read(_CHUNK):
                digest.update(block)
    return digest.hexdigest()


@dataclass
class Result:
    """One log's analysis: its row, and how it went."""

    source: Source
    row: dict[str, Any]
    retry: bool = False  # the analysis did not end on its own: try again next run
    seconds: float = 0.0  # wall time of the analysis
    peak_rss: int = 0  # bytes, the analysing process's peak
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"source": self.source.__dict__, "row": self.row, "retry": self.retry,
                           "seconds": self.seconds, "peak_rss": self.peak_rss}, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Result:
        data = json.loads(text)
        return cls(Source(**data["source"]), data["row"], bool(data.get("retry")), float(data.get("seconds", 0.0)),
                   int(data.get("peak_rss", 0)))


class Cache:
    """Results by log path under ``root``, valid for one analysis ``fingerprint``."""

    def __init__(self, root: str | Path, fingerprint: str) -> None:
        self.root = Path(root)
        self.fingerprint = fingerprint

    def _file(self, path: str) -> Path:
        name = hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()
        return self.root / name[:2] / f"{name}.json"

    def _entry(self, path: str) -> dict[str, Any] | None:
        try:
            with open(self._file(path), encoding="utf-8") as handle:
                entry = json.load(handle)
        except (OSError, ValueError):  # none yet, or one a crash or a hand damaged: analysed again
            return None
        if not isinstance(entry, dict) or entry.get("version") != CACHE_VERSION:
            return None
        return entry

    def get(self, source: Source, *, for_table: bool = False) -> Result | None:
        """The result that stands for this log, or None. ``for_table``: also one marked to be tried again (the
        table of the run that made it shows it)."""
        entry = self._entry(source.path)
        if entry is None or entry.get("fingerprint") != self.fingerprint:
            return None
        try:
            result = Result.from_json(entry["result"])
        except (KeyError, TypeError, ValueError):
            return None
        if result.retry and not for_table:
            return None
        cached = result.source
        if cached.size != source.size:
            return None
        if cached.mtime_ns != source.mtime_ns:
            try:
                if content_hash(source.path) != cached.content_hash:
                    return None
            except OSError:
                return None
            result.source = Source(cached.path, cached.format, source.size, source.mtime_ns, cached.content_hash)
            result.row.update(modified=source.mtime_ns / 1e9)
            self.put(result)  # the new time, so that the next run need not read the log again
        return result

    def put(self, result: Result) -> None:
        file = self._file(result.source.path)
        file.parent.mkdir(parents=True, exist_ok=True)
        entry = {"version": CACHE_VERSION, "fingerprint": self.fingerprint, "result": result.to_json()}
        atomic.write_bytes(file, json.dumps(entry).encode())
