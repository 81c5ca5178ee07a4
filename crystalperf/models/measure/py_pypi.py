"""PyPI packages' own test suites, run from their sdists in throwaway venvs under the profiler.

Each package is downloaded as an sdist (``pip download --no-deps --no-binary :all:``), installed from it
into ``VENVS/<name>`` with pytest and the test dependencies listed here, and its tests are run from the
unpacked sdist (with the suite's own pytest options) with the profiler's bootstrap and the sdist's root on
``PYTHONPATH``. Suites that need the internet fail or skip their tests; what runs offline (local files,
loopback servers, child processes, ptys, file locks) is what gets measured.
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
    pytest_args: tuple[str, ...] = ()  # e.g. ("-o", "addopts=") to drop a config's coverage or xdist options

    @property
    def name(self) -> str:
        return re.split(r"[=<>!~\[]", self.spec, maxsplit=1)[0]


# I/O-heavy first: loopback servers and clients (network), child processes, ptys and locks (waiting), files and
# sqlite (disk); then computation. Suite options drop what needs plugins not installed or would skew the timing
# (coverage, xdist: ``-o addopts=``), and deselect tests that hang or crawl under the profiler (cheroot's
# keep-alive stress test, diskcache's 20 MiB values: 4 s plain, minutes profiled). Not here: sortedcontainers
# 2.4.0 and rsa 4.9.1 (their sdists ship no tests), fsspec 2026.9.0 (only tests/abstract, nothing to collect),
# pyaes 1.6.1 (its tests are scripts, test-aes.py, not pytest tests), cbor2 6.3.0 (its sdist builds a Rust
# extension: no toolchain here); werkzeug 3.1.9 (its dev server runs in a child given PYTHONPATH of its own,
# so the server side is never measured, and its reloader tests hang); dnslib 0.9.26 (three doctest queries).
# filelock and portalocker are pinned below their newest releases, whose build dependencies (hatchling >= 1.29,
# uv_build) need Rust when pip builds them from source (``--no-binary :all:``).
# dnspython is pinned to 2.8.0 for the same reason (2.9.2 builds maturin, a Rust build). Also not here: websockets
# 17.4, locket 1.0.0, semidbm 0.5.1, backoff 2.2.1 and py7zr 1.1.4 (their sdists ship no tests); bottle 0.13.4 (its
# tests run, but only CPU gets labels). Whoosh's setup.cfg has a ``[pytest]`` section current pytest refuses
# (``-c /dev/null``); tornado's tests expect its access log silenced, as its own runner does (``--log-disable``);
# trio's tools tests and export checks need linters and code generators not installed. aioftp's config stops at the
# first failure (``-x``, dropped). Also not here: pyinotify 0.9.6 (its sdist ships no tests); pymemcache 4.0.0 and
# redis 8.1.0 (their tests need a memcached or redis-server started from outside; pymemcache's unit tests mock
# the socket).
PYPI_SUITES = (
    PypiSuite("fs==2.4.16", ("pytest", "pyftpdlib<2", "psutil", "parameterized", "setuptools<81")),
    PypiSuite("pyftpdlib==2.2.0", ("pytest", "psutil", "pyopenssl"), pytest_args=("-o", "addopts=")),
    PypiSuite("cheroot==11.1.2", ("pytest", "pytest-mock", "pytest-rerunfailures", "jaraco.context", "jaraco.text",
                                  "portend", "pyopenssl", "pypytools", "requests", "requests-unixsocket",
                                  "requests_toolbelt", "trustme"),
              "cheroot/test", ("-o", "addopts=-p cheroot.test._pytest_plugin", "-W", "ignore::DeprecationWarning",
                               "--deselect", "cheroot/test/test_wsgi.py::test_connection_keepalive")),
    PypiSuite("urllib3==2.8.0", ("pytest", "pytest-timeout", "pytest-socket", "anyio[trio]", "h2", "httpx",
                                 "hypercorn", "pysocks", "quart", "quart-trio", "trio", "trustme", "cryptography",
                                 "idna"),
              "test/with_dummyserver"),
    PypiSuite("requests==2.34.2", ("pytest", "pytest-httpbin==2.1.0", "httpbin~=0.10.0", "pytest-mock", "trustme",
                                   "pysocks")),
    PypiSuite("paho-mqtt==2.2.0", ("pytest",)),
    PypiSuite("waitress==3.0.2", ("pytest",), pytest_args=("-o", "addopts=")),
    PypiSuite("httplib2==0.32.1", ("pytest", "pytest-timeout", "pysocks", "cryptography"),
              pytest_args=("-o", "addopts=--ignore=tests/_TODO_legacy/ --noconftest --timeout=17")),
    PypiSuite("tftpy==0.8.7", ("pytest",), "tests/test.py"),  # named test.py: pytest collects it only by path
    PypiSuite("aiosmtpd==1.4.6", ("pytest", "pytest-asyncio", "pytest-mock", "atpublic", "attrs"), "aiosmtpd/tests",
              ("-o", "addopts=", "-o", "filterwarnings=ignore")),
    PypiSuite("httpx==0.28.1", ("pytest", "uvicorn", "trustme", "trio", "anyio", "chardet", "brotli", "h2", "socksio",
                                "zstandard", "click", "rich", "pygments"), pytest_args=("-o", "addopts=")),
    PypiSuite("dnspython==2.8.0", ("pytest", "trio", "cryptography", "idna")),  # its nanonameserver on loopback
    PypiSuite("asyncssh==2.24.1", ("pytest", "aiofiles", "bcrypt", "pyopenssl", "setuptools")),
    PypiSuite("aioftp==0.28.3", ("pytest", "pytest-asyncio", "pytest-mock", "async_timeout", "siosocks", "trustme"),
              pytest_args=("-o", "addopts=-p no:anyio --import-mode=importlib")),
    PypiSuite("aiosmtplib==5.1.3", ("pytest", "pytest-asyncio", "aiosmtpd", "hypothesis", "trustme")),
    PypiSuite("tornado==6.6.1", ("pytest",), "tornado/test", ("-o", "addopts=", "--log-disable=tornado.access")),
    PypiSuite("gunicorn==27.0.1", ("pytest", "pytest-asyncio", "httpx[http2]", "h2", "packaging"),
              pytest_args=("-o", "addopts=")),
    PypiSuite("anyio==4.16.0", ("pytest", "pytest-mock", "pytest-timeout", "trustme", "trio", "hypothesis", "psutil",
                                "truststore", "blockbuster"),
              pytest_args=("-o", "addopts=", "-o", "filterwarnings=ignore", "-m", "not network")),
    PypiSuite("trio==0.35.0", ("pytest", "pyopenssl", "trustme", "cryptography", "async_generator", "astor", "jedi"),
              "src/trio", ("-o", "addopts=-p trio._tests.pytest_plugin --import-mode=importlib",
                           "--ignore=src/trio/_tests/tools", "--deselect", "src/trio/_tests/test_exports.py")),
    PypiSuite("pexpect==4.9.0", ("pytest",)),
    PypiSuite("sh==2.4.0", ("pytest",)),
    PypiSuite("invoke==3.0.3", ("pytest", "pytest-relaxed", "icecream")),
    PypiSuite("plumbum==2.0.2", ("pytest", "pytest-timeout", "pytest-mock", "pytest-asyncio", "psutil"),
              pytest_args=("-o", "addopts=", "-W", "ignore::DeprecationWarning")),
    PypiSuite("ptyprocess==0.7.0", ("pytest",)),
    PypiSuite("pyserial==3.5", ("pytest",), "test"),  # loop:// ports
    PypiSuite("multiprocess==0.70.19", ("pytest",), "py3.11/multiprocess/tests"),  # the base python's version
    PypiSuite("pebble==5.2.3", ("pytest",), "test"),
    PypiSuite("loky==3.7.0", ("pytest", "psutil", "packaging", "cloudpickle")),
    PypiSuite("joblib==1.6.0", ("pytest", "pytest-timeout", "pytest-asyncio", "numpy", "threadpoolctl", "lz4",
                                "psutil"), "joblib/test", ("-o", "addopts=")),
    PypiSuite("janus==2.0.0", ("pytest", "pytest-asyncio"), pytest_args=("-o", "addopts=")),
    PypiSuite("tenacity==9.2.1", ("pytest", "tornado", "typeguard")),
    PypiSuite("apscheduler==3.11.3", ("pytest", "pytest-timeout", "anyio", "pytz", "sqlalchemy", "tornado"),
              pytest_args=("-m", "not external_service")),
    PypiSuite("schedule==1.2.2", ("pytest",), "test_schedule.py"),
    PypiSuite("zict==3.0.0", ("pytest", "pytest-timeout", "psutil"), "zict/tests", ("-o", "addopts=")),
    PypiSuite("watchdog==7.1.0", ("pytest", "pytest-timeout", "flaky")),
    PypiSuite("fasteners==0.20", ("pytest", "diskcache", "more_itertools", "eventlet")),
    PypiSuite("portalocker==3.2.0", ("pytest", "pytest-timeout", "pytest-rerunfailures", "redis"), "portalocker_tests",
              ("-o", "addopts=")),
    PypiSuite("filelock==4.2.9", ("pytest", "pytest-asyncio", "pytest-mock", "pytest-timeout", "virtualenv",
                                  "coverage")),
    PypiSuite("sqlalchemy==2.1.9", ("pytest",), "test/engine", ("--db", "sqlite_file")),  # a sqlite file, pools
    PypiSuite("diskcache==5.6.3", ("pytest",),
              pytest_args=("--ignore=tests/test_djangocache.py", "--ignore=tests/test_doctest.py",  # need Django
                           "--deselect", "tests/test_core.py::test_getsetdel")),
    PypiSuite("sqlitedict==2.1.0", ("pytest",)),
    PypiSuite("persist-queue==1.1.0", ("pytest", "pytest-asyncio", "msgpack", "cbor2", "mock", "aiofiles",
                                       "aiosqlite"),
              "persistqueue/tests", ("--ignore=persistqueue/tests/test_mysqlqueue.py",)),  # needs a MySQL server
    PypiSuite("huey==3.5.4", ("pytest",), "huey/tests"),
    PypiSuite("sqlite-utils==4.2.1", ("pytest", "hypothesis", "cogapp")),
    PypiSuite("partd==1.4.2", ("pytest", "locket", "toolz", "numpy", "pyzmq"), "partd/tests", ("-o", "addopts=")),
    PypiSuite("whoosh==2.7.4", ("pytest",), pytest_args=("-c", "/dev/null", "--rootdir=.")),  # [pytest] in setup.cfg
    PypiSuite("queuelib==1.10.0", ("pytest",), "queuelib/tests"),
    PypiSuite("cachelib==0.17.0", ("pytest", "pytest-xprocess"), "tests/test_file_system_cache.py", ("-o", "addopts=")),
    PypiSuite("dogpile.cache==1.5.0", ("pytest", "mako", "decorator", "stevedore"),
              pytest_args=("-o", "addopts=", "-o", "filterwarnings=ignore")),
    PypiSuite("aiosqlite==0.22.1", ("pytest",), "aiosqlite/tests/smoke.py"),
    PypiSuite("atomicwrites==1.4.1", ("pytest",)),
    PypiSuite("tinydb==4.9.0", ("pytest",)),
    PypiSuite("aiofiles==25.1.0", ("pytest", "pytest-asyncio")),
    PypiSuite("jsonlines==4.0.0", ("pytest",)),
    PypiSuite("zipp==4.1.2", ("pytest", "jaraco.itertools", "jaraco.functools", "jaraco.test", "more_itertools",
                              "big-O", "pytest-ignore-flaky")),
    PypiSuite("paramiko==5.1.0", ("pytest", "pytest-relaxed", "icecream", "invoke")),
    PypiSuite("websocket_client==1.9.2", ("pytest",), "websocket/tests"),
    PypiSuite("h11==0.16.0", ("pytest",), "h11/tests"),
    PypiSuite("simplejson==4.3.0", ("pytest",), "simplejson/tests"),
    PypiSuite("pyasn1==0.6.5", ("pytest",)),
    PypiSuite("ecdsa==0.19.2", ("pytest", "hypothesis"), "src/ecdsa"),
    PypiSuite("mpmath==1.4.1", ("pytest", "hypothesis", "pexpect"), "mpmath/tests"),
)  # fmt: skip
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
