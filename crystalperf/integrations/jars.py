"""Which Java sources a bundled jar was built from: the hash both the package build and the runtime check use.

Standard library only: ``hatch_build.py`` loads this file by path in an isolated build environment where
crystalperf itself cannot be imported, and the installed package uses it to tell a stale jar.
"""

from __future__ import annotations

import hashlib
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

HASH_ENTRY = "META-INF/crystalperf-sources.sha256"
# The Java sources every jar also compiles (crystalperf/integrations/java) are hashed apart.
SHARED_HASH_ENTRY = "META-INF/crystalperf-shared-sources.sha256"


def _walk(directory: Traversable, prefix: str = "") -> Iterable[tuple[str, Traversable]]:
    for entry in directory.iterdir():
        if entry.name == "__pycache__":
            continue
        relative = f"{prefix}{entry.name}"
        if entry.is_dir():
            yield from _walk(entry, relative + "/")
        elif entry.is_file():
            yield relative, entry


def sources_hash(source_dir: Path | Traversable) -> str | None:
    """SHA-256 over every file below source_dir (relative name and bytes, line endings normalised);
    None when there are no sources (an install that does not ship them)."""
    if not source_dir.is_dir():
        return None
    # ordered as pathlib orders paths (part by part), the order the committed jars were hashed in
    files = sorted(_walk(source_dir), key=lambda item: item[0].split("/"))
    if not files:
        return None
    digest = hashlib.sha256()
    for relative, entry in files:
        digest.update(relative.encode())
        digest.update(b"\0")
        digest.update(entry.read_bytes().replace(b"\r\n", b"\n"))
        digest.update(b"\0")
    return digest.hexdigest()


def jar_hash(jar: Path | Traversable, entry: str = HASH_ENTRY) -> str | None:
    """The sources hash a jar was built from (``entry``: its own sources' or the shared ones'), or None when
    the jar is missing or damaged."""
    try:
        with jar.open("rb") as raw, zipfile.ZipFile(raw) as zf:
            return zf.read(entry).decode().strip()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
