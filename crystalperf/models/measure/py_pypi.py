"""PyPI packages' own test suites, run from their sdists in throwaway venvs under the profiler.

Each package is downloaded as an sdist (``pip download --no-deps --no-binary :all:``), installed from it
into ``VENVS/<name>`` with pytest and the test dependencies listed here, and its tests are run from the
unpacked sdist with the profiler's bootstrap on ``PYTHONPATH``. Suites that need the internet fail or skip
their tests; what runs offline (local files, loopback servers) is what gets measured.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class PypiSuite:
    spec: str  # pinned, as in crystalperf.models.corpus.PYPI_PACKAGES
    test_deps: tuple[str, ...] = ()
    test_path: str = ""  # relative to the unpacked sdist; empty: the first of tests/, test/ found

    @property
    def name(self) -> str:
        return re.split(r"[=<>!~\[]", self.spec, maxsplit=1)[0]


# I/O-heavy first (loopback servers, sqlite, files); then computation. Not here: sortedcontainers 2.4.0 and
# rsa 4.9.1 (their sdists ship no tests), cbor2 6.3.0 (its sdist builds a Rust extension: no toolchain here).
PYPI_SUITES = (
    PypiSuite("pyftpdlib==2.2.0", ("pytest", "psutil", "pyopenssl")),
    PypiSuite("tftpy==0.8.7", ("pytest",)),
    PypiSuite("sqlitedict==2.1.0", ("pytest",)),
    PypiSuite("aiofiles==25.1.0", ("pytest", "pytest-asyncio")),
    PypiSuite("jsonlines==4.0.0", ("pytest",)),
    PypiSuite("fsspec==2026.9.0", ("pytest", "pytest-asyncio", "pytest-mock"), "fsspec/tests"),
    PypiSuite("zipp==4.1.2", ("pytest", "jaraco.itertools", "jaraco.functools", "more_itertools", "big-O")),
    PypiSuite("paramiko==5.1.0", ("pytest", "pytest-relaxed", "icecream", "invoke")),
    PypiSuite("websocket_client==1.9.2", ("pytest",), "websocket/tests"),
    PypiSuite("h11==0.16.0", ("pytest",), "h11/tests"),
    PypiSuite("simplejson==4.3.0", ("pytest",), "simplejson/tests"),
    PypiSuite("pyasn1==0.6.5", ("pytest",)),
    PypiSuite("ecdsa==0.19.2", ("pytest", "hypothesis"), "src/ecdsa"),
    PypiSuite("pyaes==1.6.1", ("pytest",)),
    PypiSuite("mpmath==1.4.1", ("pytest",), "mpmath/tests"),
)
QUICK_PYPI = ("sqlitedict", "jsonlines")


def _unpack(archive: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(into)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(into, filter="data")
    roots = [p for p in into.iterdir() if p.is_dir()]
    return roots[0] if len(roots) == 1 else into


def prepare(suite: PypiSuite, venvs: Path, base_python: str, log: IO[str]) -> tuple[str, Path, Path] | None:
    """Venv python, unpacked sdist and test path for ``suite``; None (logged) when it cannot be set up."""
    home = venvs / suite.name
    python = home / "venv" / "bin" / "python"
    try:
        if not python.exists():
            subprocess.run([base_python, "-m", "venv", str(home / "venv")], check=True, timeout=300)
        sdists = home / "sdist"
        if not any(sdists.glob("*")):
            subprocess.run(
                [str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d",
                 str(sdists), suite.spec], check=True, timeout=600)  # fmt: skip
        archive = sorted(sdists.iterdir())[0]
        source = home / "src"
        if not source.exists():
            _unpack(archive, source)
        roots = [p for p in source.iterdir() if p.is_dir()]
        root = roots[0] if len(roots) == 1 else source
        marker = home / "installed"
        if not marker.exists():
            subprocess.run([str(python), "-m", "pip", "install", "-q", str(root), *suite.test_deps],
                           check=True, timeout=900)  # fmt: skip
            marker.write_text(suite.spec)
    except (subprocess.SubprocessError, OSError, IndexError, tarfile.TarError) as exc:
        log.write(f"{suite.name}: not set up ({type(exc).__name__}: {exc})\n")
        return None
    candidates = [suite.test_path] if suite.test_path else ["tests", "test", "testing"]
    for candidate in candidates:
        if (root / candidate).exists():
            return str(python), root, root / candidate
    log.write(f"{suite.name}: no test directory in {root}\n")
    return None


def select(names: Iterable[str] | None) -> list[PypiSuite]:
    if names is None:
        return list(PYPI_SUITES)
    wanted = set(names)
    return [s for s in PYPI_SUITES if s.name in wanted]
