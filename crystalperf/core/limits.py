"""Bounds on what the analyser reads, so that no input file can hang it or exhaust the machine's memory.

Every file the analysis opens because an input named it (the trace itself, a Python or Java source file a
stack frame names, a jar on the job's classpath) is opened without blocking, checked to be a regular file
(a FIFO would block forever, ``/dev/zero`` never ends) and read up to a size limit; compressed data is
decompressed in chunks up to a limit on the decompressed size and on the compression ratio (a gzip bomb stops
after a few hundred megabytes, not after it filled the memory). Zip archives are checked before they are
indexed (their central directory) and each entry before it is read.

Each limit is an environment variable (``docs/limits.md``): a number of bytes, optionally with a unit
(``512m``, ``4g``, ``2GiB``). The defaults let the largest real traces through (a 1,000,000-task Spark trace
with 10,000,000 samples is about 70 MB compressed, 550 MB of JSON).
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from crystalperf.core.errors import BadInputError

_MIB = 1 << 20
_GIB = 1 << 30


@dataclass(frozen=True)
class Limit:
    """One configurable bound: the environment variable that sets it, its default and what it bounds."""

    env: str
    default: int
    what: str
    unit: str = "bytes"

    def get(self) -> int:
        """The value in force (read on every call, so a test or a service may change it between inputs)."""
        text = os.environ.get(self.env, "").strip()
        if not text:
            return self.default
        try:
            if self.unit == "bytes":
                from crystalperf.core.units import parse_size

                value = parse_size(text)
            else:
                value = int(text)
        except (ValueError, OverflowError):
            raise BadInputError(f"{self.env}={_printable(text)!r} is not a {'size' if self.unit == 'bytes' else 'number'} "
                                f"(e.g. {'512m, 4g' if self.unit == 'bytes' else '1000'})") from None
        if value < 1:
            raise BadInputError(f"{self.env} must be at least 1")
        return value


MAX_TRACE_BYTES = Limit("CRYSTALPERF_MAX_TRACE_BYTES", 1 * _GIB, "a trace file as stored (compressed or not)")
MAX_DECOMPRESSED_BYTES = Limit("CRYSTALPERF_MAX_DECOMPRESSED_BYTES", 2 * _GIB,
                               "a trace's JSON text after decompression")
MAX_COMPRESSION_RATIO = Limit(
    "CRYSTALPERF_MAX_COMPRESSION_RATIO", 200,
    "decompressed / compressed size beyond the first 64 MiB (real traces and event logs compress 5-20x; "
    "a compression bomb 1000x)", unit="ratio")
MAX_SOURCE_FILE_BYTES = Limit("CRYSTALPERF_MAX_SOURCE_FILE_BYTES", 8 * _MIB,
                              "a source file (Python, Java, Scala) a stack frame or a source root names")
MAX_ARCHIVE_ENTRY_BYTES = Limit("CRYSTALPERF_MAX_ARCHIVE_ENTRY_BYTES", 16 * _MIB,
                                "one entry (a source or class file) read from a jar or src.zip, decompressed")
MAX_ARCHIVE_INDEX_BYTES = Limit("CRYSTALPERF_MAX_ARCHIVE_INDEX_BYTES", 64 * _MIB,
                                "the central directory (the index of entries) of a jar or zip")
MAX_EVENT_LINE_BYTES = Limit("CRYSTALPERF_MAX_EVENT_LINE_BYTES", 64 * _MIB,
                             "one line (one event) of a Spark event log; longer lines are skipped")
MAX_EVENTLOG_BYTES = Limit("CRYSTALPERF_MAX_EVENTLOG_BYTES", 256 * _GIB,
                           "a Spark event log, decompressed (it is streamed: this bounds time, not memory)")
MAX_PART_BYTES = Limit("CRYSTALPERF_MAX_PART_BYTES", 1 * _GIB,
                       "one file a framework's hook wrote (a Flink reporter part, a TensorFlow profile)")
MAX_TASKS_PER_OPERATION = Limit(
    "CRYSTALPERF_MAX_TASKS_PER_OPERATION", 2000,
    "task records of one operation kept when a trace is loaded; beyond it a seeded uniform sample is kept and "
    "every task still counts in the operation's task_count and metric totals", unit="tasks")
MAX_EVENTLOG_TASKS = Limit(
    "CRYSTALPERF_MAX_EVENTLOG_TASKS", 50_000,
    "task records kept while a Spark event log is read, all stages together (each stage at most "
    "CRYSTALPERF_MAX_TASKS_PER_OPERATION); beyond it every stage keeps a smaller uniform sample, its task count "
    "and metric totals still exact", unit="tasks")

LIMITS = (MAX_TRACE_BYTES, MAX_DECOMPRESSED_BYTES, MAX_COMPRESSION_RATIO, MAX_SOURCE_FILE_BYTES,
          MAX_ARCHIVE_ENTRY_BYTES, MAX_ARCHIVE_INDEX_BYTES, MAX_EVENT_LINE_BYTES, MAX_EVENTLOG_BYTES,
          MAX_PART_BYTES, MAX_TASKS_PER_OPERATION, MAX_EVENTLOG_TASKS)

# Below this much output, any compression ratio is fine (small files of repeated rows compress very well).
RATIO_FREE_BYTES = 64 * _MIB
_CHUNK = 1 << 20


def _printable(text: str, limit: int = 200) -> str:
    from crystalperf.core.errors import one_line

    return one_line(text, limit)


def size_text(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.0f} bytes"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | Path, limit: Limit, what: str = "file") -> IO[bytes]:
    """The file opened for reading, after checking that it is a regular file no larger than ``limit``.

    Opened with ``O_NONBLOCK`` so that a FIFO cannot block the open itself; the check is on the opened
    descriptor (``fstat``), so a file swapped after a check on its name changes nothing. Raises
    :class:`BadInputError` naming the file.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise BadInputError("no such file", path) from None
    except IsADirectoryError:
        raise BadInputError(f"is a directory, not a {what}", path) from None
    except OSError as exc:
        raise BadInputError(f"cannot read: {exc.strerror or exc}", path) from None
    except ValueError:  # a NUL character in the name
        raise BadInputError("is not a valid file name", path) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInputError(f"is {_kind(info.st_mode)}, not a {what}", path)
        maximum = limit.get()
        if info.st_size > maximum:
            raise BadInputError(f"{what} of {size_text(info.st_size)} is larger than the limit of "
                                f"{size_text(maximum)} ({limit.env})", path)
        # Reads of a regular file never block; back to blocking mode for ordinary buffered reading.
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def is_directory(path: str | Path) -> bool:
    """Whether ``path`` names a directory (following symlinks); never raises (a name too long, a loop)."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def exists(path: str | Path) -> bool:
    """Whether anything is at ``path`` (a dangling symlink counts); never raises."""
    try:
        os.lstat(path)
        return True
    except (OSError, ValueError):
        return False


def writable_directory(path: Path, what: str, noun: str = "directory") -> Path:
    """``path`` as a directory the tool can write in, made if missing; anything else is one line naming it
    (``what``: the option that named it, e.g. ``--out``)."""
    if exists(path) and not is_directory(path):
        raise BadInputError(f"{what} names an existing file, not a directory", path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"cannot create the {noun}: {exc.strerror or exc}", path) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise BadInputError(f"the {noun} is not writable", path)
    return path


def is_regular_file(path: str | Path) -> bool:
    """Whether ``path`` names a regular file (following symlinks); never blocks, never raises."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def file_size(handle: IO[bytes]) -> int:
    """The size of an open file (its descriptor's, so the same file that was checked)."""
    return os.fstat(handle.fileno()).st_size


def read_regular(path: str | Path, limit: Limit, what: str = "file") -> bytes:
    """The whole of a regular file no larger than ``limit`` (see :func:`open_regular`)."""
    with open_regular(path, limit, what) as handle:
        # The size was checked on open; a file growing meanwhile is cut at the limit, not read on forever.
        maximum = limit.get()
        try:
            data = handle.read(maximum + 1)
        except OSError as exc:  # /proc files that stat as regular but refuse reading, an I/O error
            raise BadInputError(f"cannot read: {exc.strerror or exc}", path) from None
    if len(data) > maximum:
        raise BadInputError(f"{what} grew past the limit of {size_text(maximum)} ({limit.env}) while read", path)
    return data


def ratio_cap(compressed: int, limit: Limit = MAX_DECOMPRESSED_BYTES) -> int:
    """The most bytes ``compressed`` bytes may decompress to: the absolute limit, and the ratio limit
    beyond the first 64 MiB."""
    return min(limit.get(), RATIO_FREE_BYTES + MAX_COMPRESSION_RATIO.get() * max(compressed, 1))


def gunzip(data: bytes, path: str | Path, limit: Limit = MAX_DECOMPRESSED_BYTES) -> bytes:
    """gzip data (one member or several, as ``gzip.decompress`` reads them) decompressed in chunks; stops with
    one clear :class:`BadInputError` as soon as the output would pass the limit or the compression ratio."""
    cap = ratio_cap(len(data), limit)
    out = bytearray()
    rest = memoryview(data)
    while rest:
        decoder = zlib.decompressobj(wbits=31)
        pending = bytes(rest)
        try:
            while not decoder.eof:
                piece = decoder.decompress(pending, min(_CHUNK, cap - len(out) + 1))
                pending = decoder.unconsumed_tail
                out += piece
                if len(out) > cap:
                    raise BadInputError(_too_big(cap, limit), path)
                if not pending and not piece:
                    raise BadInputError("truncated gzip data (the file ends before the gzip end marker)", path)
        except zlib.error as exc:
            raise BadInputError(f"corrupt gzip data ({exc})", path) from None
        tail = decoder.unused_data
        # Members follow one another; zero padding after the last one is allowed, as gzip.decompress does.
        rest = memoryview(tail) if tail.strip(b"\x00") else memoryview(b"")
        if rest and rest[:2] != b"\x1f\x8b":
            raise BadInputError("corrupt gzip data (trailing garbage after the compressed data)", path)
    return bytes(out)


def gunzip_stream(handle: IO[bytes], compressed_size: int, path: str | Path,
                  limit: Limit = MAX_DECOMPRESSED_BYTES) -> Iterator[bytes]:
    """What :func:`gunzip` returns, in pieces of at most 1 MiB, reading ``handle`` (``compressed_size`` bytes)
    1 MiB at a time: memory stays bounded whatever the file decompresses to. The same limits and errors."""
    cap = ratio_cap(compressed_size, limit)
    delivered = 0
    pending = b""
    at_file_end = False

    def more() -> bytes:
        nonlocal at_file_end
        block = b"" if at_file_end else handle.read(_CHUNK)
        at_file_end = at_file_end or not block
        return block

    while True:
        decoder = zlib.decompressobj(wbits=31)
        try:
            while not decoder.eof:
                if not pending:
                    pending = more()
                piece = decoder.decompress(pending, min(_CHUNK, cap - delivered + 1))
                pending = decoder.unconsumed_tail
                delivered += len(piece)
                if delivered > cap:
                    raise BadInputError(_too_big(cap, limit), path)
                if piece:
                    yield piece
                elif not pending and at_file_end:
                    raise BadInputError("truncated gzip data (the file ends before the gzip end marker)", path)
        except zlib.error as exc:
            raise BadInputError(f"corrupt gzip data ({exc})", path) from None
        # Members follow one another; zero padding after the last one is allowed, as gzip.decompress does.
        pending = decoder.unused_data
        while len(pending) < 2 and not at_file_end:
            pending += more()
        if pending[:2] == b"\x1f\x8b":
            continue
        while pending or not at_file_end:
            if pending.strip(b"\x00"):
                raise BadInputError("corrupt gzip data (trailing garbage after the compressed data)", path)
            pending = more()
        return


def _too_big(cap: int, limit: Limit) -> str:
    return (f"decompresses to more than {size_text(cap)} (limit {limit.env}, or "
            f"{MAX_COMPRESSION_RATIO.env} x the compressed size: a compression bomb?)")


class BoundedStream:
    """Counts the bytes a decompressing reader delivers and stops it at :func:`ratio_cap` of the compressed
    size (with ``limit`` as the absolute bound)."""

    def __init__(self, compressed_size: int, path: str | Path, limit: Limit) -> None:
        self.cap = ratio_cap(compressed_size, limit)
        self.limit = limit
        self.path = path
        self.delivered = 0

    def count(self, block: bytes) -> bytes:
        self.delivered += len(block)
        if self.delivered > self.cap:
            raise BadInputError(_too_big(self.cap, self.limit), self.path)
        return block

    def wrap(self, blocks: Iterator[bytes]) -> Iterator[bytes]:
        for block in blocks:
            yield self.count(block)


# -- zip archives (jars, src.zip, *-sources.jar) ------------------------------------------------------------

_EOCD = struct.Struct("<4s4H2LH")
_EOCD_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")


def _central_directory(handle: IO[bytes]) -> tuple[int, int] | None:
    """(entries, central-directory bytes) from the end records, or None when they cannot be found."""
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    tail_len = min(size, _EOCD.size + 0xFFFF)
    handle.seek(size - tail_len)
    tail = handle.read(tail_len)
    at = tail.rfind(_EOCD_SIGNATURE)
    if at < 0 or at + _EOCD.size > len(tail):
        return None
    fields = _EOCD.unpack_from(tail, at)
    entries, cd_size = fields[4], fields[5]
    locator_at = at - _ZIP64_LOCATOR.size
    if (entries == 0xFFFF or cd_size == 0xFFFFFFFF) and locator_at >= 0:
        sig, _disk, offset, _disks = _ZIP64_LOCATOR.unpack_from(tail, locator_at)
        if sig == b"PK\x06\x07" and offset + _ZIP64_EOCD.size <= size:
            handle.seek(offset)
            record = handle.read(_ZIP64_EOCD.size)
            if len(record) == _ZIP64_EOCD.size and record[:4] == b"PK\x06\x06":
                z = _ZIP64_EOCD.unpack(record)
                entries, cd_size = z[7], z[8]
    return entries, cd_size


def open_zip(path: str | Path, limit: Limit = MAX_ARCHIVE_INDEX_BYTES) -> zipfile.ZipFile:
    """A zip archive opened only when it is a regular file whose central directory (what ``ZipFile`` reads
    into memory, ~400 bytes an entry) is within ``limit``. Raises :class:`BadInputError` otherwise, and
    ``zipfile.BadZipFile`` for damaged archives."""
    handle = open_regular(path, Limit(limit.env, 1 << 62, limit.what), "zip archive")
    try:
        found = _central_directory(handle)
        maximum = limit.get()
        if found is not None:
            entries, cd_size = found
            if cd_size > maximum or entries * 46 > maximum:
                raise BadInputError(f"zip archive index of {size_text(cd_size)} ({entries} entries) is larger "
                                    f"than the limit of {size_text(maximum)} ({limit.env})", path)
        handle.seek(0)
        return zipfile.ZipFile(handle)
    except BaseException:
        handle.close()
        raise


def read_zip_entry(archive: zipfile.ZipFile, name: str, where: str | Path,
                   limit: Limit = MAX_ARCHIVE_ENTRY_BYTES) -> bytes:
    """One entry, decompressed, refused when its declared or its actual size passes ``limit`` (the
    declared size may lie: the read stops one byte past the limit either way)."""
    info = archive.getinfo(name)
    maximum = limit.get()
    where = f"{where}!/{name}"
    if info.file_size > maximum:
        raise BadInputError(f"archive entry of {size_text(info.file_size)} is larger than the limit of "
                            f"{size_text(maximum)} ({limit.env})", where)
    with archive.open(info) as entry:
        data = entry.read(maximum + 1)
    if len(data) > maximum:
        raise BadInputError(f"archive entry decompresses to more than {size_text(maximum)} ({limit.env})", where)
    return data


def close_quietly(handle: object) -> None:
    with contextlib.suppress(Exception):
        handle.close()  # type: ignore[attr-defined]
