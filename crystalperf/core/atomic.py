"""Files that appear whole or not at all.

Every file crystalperf writes goes through here: the bytes go to a temporary file with a unique name in the
target's directory (created exclusively, so a symlink planted under a predictable name is never followed and
two writers never share one), are flushed to the disk, and the temporary file is renamed over the target. A
reader sees the old file or the new one, never a torn one; a crash leaves at most a ``.crystalperf-*.tmp``
file, and a failed write removes its own.

``replace_set`` writes several files (a report's JSON and HTML) so that none is renamed until every one is
complete on disk: a failure while writing leaves the previous set untouched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

TEMP_PREFIX = ".crystalperf-"
TEMP_SUFFIX = ".tmp"


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is; some filesystems refuse to open a directory.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _stage(path: Path, data: bytes, mode: int) -> Path:
    """The data in a complete, synced temporary file beside ``path``; nothing is left behind on failure."""
    fd, name = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{path.name[:80]}.", suffix=TEMP_SUFFIX, dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def write_bytes(path: str | Path, data: bytes, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` atomically (unique temp file, fsync, rename); returns the path."""
    path = Path(path)
    _rename_into_place(_stage(path, data, mode), path)
    return path


def _rename_into_place(tmp: Path, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def write_text(path: str | Path, text: str, *, mode: int = 0o644) -> Path:
    """``write_bytes`` of UTF-8 text; characters that cannot be encoded (lone surrogates) are replaced."""
    return write_bytes(path, text.encode("utf-8", errors="replace"), mode=mode)


def replace_set(files: Mapping[Path, bytes], *, mode: int = 0o644) -> list[Path]:
    """Write every file to its temporary first; only when all are on disk are they renamed into place."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            staged.append((_stage(Path(path), data, mode), Path(path)))
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise
    for tmp, path in staged:
        os.replace(tmp, path)
    for directory in {path.parent for _, path in staged}:
        _fsync_dir(directory)
    return [path for _, path in staged]


def symlink(link: str | Path, target: str | Path) -> Path:
    """Point ``link`` at ``target`` atomically: a reader sees the old link or the new one, never none. A
    regular file or directory at ``link`` is left alone (FileExistsError): only links are replaced."""
    link = Path(link)
    if link.exists() and not link.is_symlink():
        raise FileExistsError(f"{link} exists and is not a link")
    for _ in range(100):
        tmp = link.with_name(f"{TEMP_PREFIX}{link.name[:80]}.{os.urandom(6).hex()}{TEMP_SUFFIX}")
        try:
            os.symlink(target, tmp)
        except FileExistsError:
            continue
        _rename_into_place(tmp, link)
        return link
    raise FileExistsError(f"no free temporary name beside {link}")
