"""Python functions labelled by measurement, at scale: test suites run under :mod:`.py_profiler`.

``python -m crystalperf.models.measure.python --out DIR [--quick]`` runs the standard library's own test
suites (``python -m test test_x``, one subprocess per module, niced, each with a timeout) with the
profiler installed through a ``sitecustomize`` bootstrap, so that child Python processes the tests start
are measured too. Every Python function that ran gets its inclusive time split into CPU, disk, network
and waiting (see :mod:`.py_profiler`); the totals of all processes and suites are merged per function,
test code and the harness are dropped, and each remaining function gets its code and doc through the
core's :class:`~crystalperf.core.attribution.sources.python.PythonLocator` (what the classifier reads at analysis time).

Output: ``DIR/python.jsonl`` in the measured-function format (``"method": "pyprofile"``); a function gets
a label when its dominant share is at least :data:`MIN_SHARE` over at least :data:`MIN_SECONDS` and
:data:`MIN_EVENTS` calls and I/O events, else ``"label": null``. ``DIR/python-raw/`` keeps the raw
per-process totals (``--reuse-raw`` relabels from them without rerunning the suites).

``--validate-strace VERIFIED.jsonl`` also runs the strace-verified workloads
(:mod:`crystalperf.models.verify_workloads`) under the profiler and reports label agreement with the
strace labels in that file (written by ``python -m crystalperf.models.verify``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crystalperf.models.measure import py_pypi

CLASSES = ("cpu", "disk", "network", "waiting")
MIN_SHARE = 0.6
MIN_SECONDS = 0.01
MIN_EVENTS = 5
STDLIB_LICENCE = "PSF-2.0"
PYENV_PYTHON = "/root/.pyenv/versions/3.11.7/bin/python"
ASYNC_CODE_FLAGS = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
PROFILER_FILE = Path(__file__).with_name("py_profiler.py")

# I/O-heavy suites first: disk and network labels are the scarce ones.
STDLIB_SUITES = (
    "test_fileio test_file test_io test_os test_shutil test_tempfile test_zipfile test_tarfile test_gzip "
    "test_bz2 test_lzma test_zipimport test_filecmp test_glob test_fileinput test_pathlib test_posixpath "
    "test_mmap test_csv test_sqlite3 test_dbm test_dbm_dumb test_shelve test_mailbox test_logging test_socket "
    "test_socketserver test_selectors test_ssl test_httplib test_httpservers test_urllib2_localnet test_urllib "
    "test_urllib2 test_xmlrpc test_ftplib test_smtplib test_poplib test_imaplib test_wsgiref test_asyncio "
    "test_subprocess test_queue test_threading test_concurrent_futures test_json test_pickle test_re "
    "test_decimal test_fractions test_statistics test_difflib test_textwrap test_heapq test_bisect test_hashlib "
    "test_hmac test_base64 test_binascii test_email test_xml_etree test_htmlparser test_html test_configparser "
    "test_zlib test_tokenize test_ast test_pprint test_ipaddress test_plistlib test_calendar test_uuid "
    "test_random test_string test_sort test_copy test_enum test_dataclasses test_typing test_argparse "
    "test_compileall test_py_compile test_netrc test_mimetypes test_quopri test_uu test_wave test_gettext "
    "test_locale test_codecs test_unicodedata test_secrets test_tomllib test_xml_dom_minicompat test_minidom "
    "test_pulldom test_sax test_traceback test_linecache test_inspect test_pydoc test_zipapp test_tabnanny"
).split()
# Suites that skip themselves without a regrtest resource; they use loopback sockets only.
SUITE_RESOURCES = {"test_socketserver": "network"}
QUICK_SUITES = ("test_fileio", "test_json", "test_socketserver", "test_filecmp")

# Harness and measuring code are on every stack: never labelled.
HARNESS_MODULES = frozenset(
    {"test", "unittest", "doctest", "pytest", "_pytest", "pluggy", "runpy", "site", "sitecustomize",
     "_crystalperf_pyprofile", "crystalperf", "__main__", "faulthandler", "_pydev_bundle", "coverage",
     "hypothesis", "_hypothesis_pytestplugin", "xdist", "execnet", "iniconfig", "setuptools", "pip",
     "_distutils_hack", "pkg_resources", "py", "pytest_asyncio", "pytest_mock", "pytest_timeout",
     "pytest_rerunfailures", "pytest_socket", "pytest_httpbin", "pytest_relaxed", "flaky"}
)  # fmt: skip
TEST_DIRS = frozenset({"test", "tests", "_tests", "testing", "testsuite", "idle_test"})  # _tests: trio's helpers


def is_test_file(path: str) -> bool:
    """Test code (files or directories of tests, conftest) is what drives the library, not the library."""
    parts = Path(path).parts
    name = parts[-1] if parts else ""
    return (
        any(p in TEST_DIRS for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name in {"conftest.py", "__main__.py", "test.py", "tests.py"}  # e.g. fs.test: test cases it ships
    )


@dataclass
class Measurement:
    """One function's merged totals over every process and suite it ran in."""

    file: str
    line: int
    module: str
    qualname: str
    calls: int = 0
    wall: float = 0.0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0.0))
    events: int = 0
    workloads: set[str] = field(default_factory=set)
    flags: int = 0  # the code object's co_flags

    @property
    def is_async(self) -> bool:
        """A coroutine's awaits are spent in the event loop's select, outside its own calls: in-process
        measurement sees only its CPU steps, so it is never labelled."""
        return bool(self.flags & ASYNC_CODE_FLAGS)

    @property
    def qualified_name(self) -> str:
        return f"{self.module}.{self.qualname.replace('<locals>.', '')}"

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def shares(self) -> dict[str, float]:
        total = self.total
        if total <= 0:
            return dict.fromkeys(CLASSES, 0.0)
        return {k: v / total for k, v in self.seconds.items()}

    def label(self, min_seconds: float = MIN_SECONDS) -> str | None:
        """The dominant measured resource, when it dominates clearly and the evidence suffices."""
        shares = self.shares()
        best = max(CLASSES, key=lambda k: shares[k])
        if shares[best] < MIN_SHARE or self.total < min_seconds or self.events < MIN_EVENTS or self.is_async:
            return None
        return best


# --------------------------------------------------------------------------------------------------
# running suites


def write_bootstrap(directory: Path) -> Path:
    """A ``sitecustomize.py`` that loads the profiler by path (the measured interpreter need not have
    crystalperf installed) and, on SIGTERM, writes what was measured and then dies of the signal as it
    would unprofiled: a suite stopped at its timeout keeps its measurements even when its runner would
    catch an exception raised in a test (pytest and unittest report a ``SystemExit`` there as a failure
    and go on), and a child process that a test terminates still reports the signal to its parent."""
    directory.mkdir(parents=True, exist_ok=True)
    boot = directory / "sitecustomize.py"
    boot.write_text(
        "import importlib.util, os, signal, sys\n"
        f"_spec = importlib.util.spec_from_file_location('_crystalperf_pyprofile', {str(PROFILER_FILE)!r})\n"
        "_mod = importlib.util.module_from_spec(_spec)\n"
        "sys.modules[_spec.name] = _mod\n"
        "_spec.loader.exec_module(_mod)\n"
        "_crystalperf_profiler = _mod.start_from_environment(__file__)\n"
        "def _crystalperf_term(signum, frame):\n"
        "    try:\n"
        "        if _crystalperf_profiler is not None:\n"
        "            _mod.dump(_crystalperf_profiler, os.environ[_mod.ENV_OUT_DIR])\n"
        "    finally:\n"
        "        signal.signal(signum, signal.SIG_DFL)\n"
        "        os.kill(os.getpid(), signum)\n"
        "signal.signal(signal.SIGTERM, _crystalperf_term)\n",
        encoding="utf-8",
    )
    return directory


def run_measured(
    command: Sequence[str],
    raw_dir: Path,
    boot_dir: Path,
    *,
    timeout_s: float,
    cwd: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> tuple[int, float]:
    """Run ``command`` (a Python command line) with the profiler on; returns (exit status, seconds).

    At the timeout the process group gets SIGTERM (the bootstrap dumps, then dies of it), then SIGKILL
    after a grace period."""
    env = dict(os.environ)
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(boot_dir), env.get("PYTHONPATH", "")) if p)
    env["CRYSTALPERF_PYPROFILE_DIR"] = str(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with subprocess.Popen(
        ["nice", "-n", "10", *command], env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    ) as proc:  # fmt: skip
        try:
            status = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                status = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                status = proc.wait()
    return status, time.monotonic() - start


def run_stdlib_suites(
    suites: Iterable[str],
    raw_root: Path,
    boot_dir: Path,
    *,
    python: str,
    timeout_s: float,
    log: Any = sys.stderr,
) -> dict[str, tuple[int, float]]:
    """``python -m test SUITE`` for each suite, each in its own raw directory (the workload name)."""
    results = {}
    for suite in suites:
        work = Path(tempfile.mkdtemp(prefix=f"crystalperf-{suite}-"))
        try:
            status, seconds = run_measured(
                [python, "-m", "test", *(["-u", SUITE_RESOURCES[suite]] if suite in SUITE_RESOURCES else []), suite], raw_root / f"stdlib:{suite}", boot_dir, timeout_s=timeout_s,
                cwd=work,
            )  # fmt: skip
        finally:
            subprocess.run(["rm", "-rf", str(work)], check=False)
        results[suite] = (status, seconds)
        log.write(f"{suite}: exit {status}, {seconds:.0f} s\n")
        log.flush()
    return results


def run_pypi_suites(
    suites: Iterable[py_pypi.PypiSuite],
    raw_root: Path,
    boot_dir: Path,
    *,
    venvs: Path,
    base_python: str,
    timeout_s: float,
    log: Any = sys.stderr,
) -> dict[str, tuple[int, float]]:
    """Each package's pytest suite from its unpacked sdist, in its own venv, one at a time."""
    results = {}
    for suite in suites:
        prepared = py_pypi.prepare(suite, venvs, base_python, log)
        if prepared is None:
            continue
        python, root, tests = prepared
        # The sdist's root on PYTHONPATH too: ``python -m pytest`` already has it (the working directory) on
        # sys.path, and child interpreters the tests start (scripts importing ``tests.helpers``, or with
        # PYTHONPATH=extra:$PYTHONPATH, whose empty entry is the working directory only when it was unset)
        # then see what the tests see.
        status, seconds = run_measured(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *suite.pytest_args, str(tests)],
            raw_root / f"pypi:{suite.name}", boot_dir, timeout_s=timeout_s, cwd=root,
            extra_env={"PYTHONPATH": str(root)},
        )  # fmt: skip
        results[suite.name] = (status, seconds)
        log.write(f"{suite.name}: exit {status}, {seconds:.0f} s\n")
        log.flush()
    return results


# --------------------------------------------------------------------------------------------------
# merging and labelling


def load_raw(
    raw_root: Path,
) -> tuple[dict[tuple[str, int, str], Measurement], dict[str, dict[str, str]], str]:
    """Merge every ``raw-*.json`` under ``raw_root/<workload>/`` per function (module, first line, name).

    Returns the measurements, top-level module -> distribution/licence, and the stdlib directory."""
    merged: dict[tuple[str, int, str], Measurement] = {}
    distributions: dict[str, dict[str, str]] = {}
    stdlib = ""
    for workload_dir in sorted(p for p in raw_root.iterdir() if p.is_dir()):
        stdlib = merge_workload(workload_dir, merged, distributions) or stdlib
    return merged, distributions, stdlib


def merge_workload(
    workload_dir: Path,
    merged: dict[tuple[str, int, str], Measurement],
    distributions: dict[str, dict[str, str]],
) -> str:
    """Add one workload's ``raw-*.json`` files into ``merged`` and ``distributions``; returns the stdlib
    directory they name ("" if none)."""
    stdlib = ""
    for raw in sorted(workload_dir.glob("raw-*.json")):
        try:
            document = json.loads(raw.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a process killed while writing leaves no file (writes are atomic); be safe
        stdlib = stdlib or document.get("stdlib", "")
        distributions.update(document.get("distributions", {}))
        for row in document.get("functions", []):
            # Module, name and line, not the file: a package imported from its unpacked sdist in one
            # suite and from site-packages in another is one function.
            key = (row["module"], int(row["line"]), row["qualname"])
            m = merged.get(key)
            if m is None:
                m = merged[key] = Measurement(row["file"], int(row["line"]), row["module"], row["qualname"])
            m.calls += int(row["calls"])
            m.wall += float(row["wall"])
            for k in CLASSES:
                m.seconds[k] += float(row[k])
            m.events += int(row["events"])
            m.flags |= int(row.get("flags", 0))
            m.workloads.add(workload_dir.name)
    return stdlib


def library_of(
    m: Measurement, stdlib: str, distributions: dict[str, dict[str, str]]
) -> tuple[str, str] | None:
    """(library, licence) of a measured function; None for code that is not a library's (tests, the
    harness, frozen or generated code, the forbidden frameworks)."""
    from crystalperf.models.corpus import FORBIDDEN

    top = m.module.split(".")[0]
    if (
        not m.module
        or top in HARNESS_MODULES
        or m.qualname.startswith("<")
        or m.qualname.endswith(">")
        or m.file.startswith("<")
        or is_test_file(m.file)
        or FORBIDDEN.search(m.module)
    ):
        return None
    real = os.path.realpath(m.file)
    parts = real.split(os.sep)
    in_stdlib = bool(stdlib) and real.startswith(stdlib.rstrip(os.sep) + os.sep)
    dist = distributions.get(top)
    # A PyPI suite may import its package from the unpacked sdist rather than site-packages: the
    # installed distribution that owns the top-level module names it either way.
    if dist is not None and (not in_stdlib or "site-packages" in parts or "dist-packages" in parts):
        if FORBIDDEN.search(dist["distribution"]):
            return None
        return dist["distribution"], dist["licence"] or "unknown"
    if in_stdlib and "site-packages" not in parts and "dist-packages" not in parts:
        return top, STDLIB_LICENCE
    return None


def measured_rows(
    merged: dict[tuple[str, int, str], Measurement],
    distributions: dict[str, dict[str, str]],
    stdlib: str,
    min_seconds: float = MIN_SECONDS,
) -> Iterator[dict[str, Any]]:
    """Rows of the measured-function format, code and doc located as the analysis would locate them."""
    from crystalperf.core.attribution.sources import LocateContext
    from crystalperf.core.attribution.sources.python import PythonLocator
    from crystalperf.core.trace import Frame

    locator = PythonLocator()
    context = LocateContext()
    seen: set[str] = set()
    # The busiest first: where two code objects share a qualified name, the better-measured one stays.
    for m in sorted(merged.values(), key=lambda x: (-x.total, x.file, x.line)):
        owner = library_of(m, stdlib, distributions)
        if owner is None or m.total <= 0:
            continue
        name = m.qualified_name
        if name in seen:
            continue
        source = locator.locate(Frame(name=name, file=m.file, line=m.line, language="python"), context)
        if source is None:
            continue
        seen.add(name)
        library, licence = owner
        yield {
            "id": f"python:{name}",
            "language": "python",
            "qualified_name": name,
            "library": library,
            "licence": licence,
            "code": source.code,
            "doc": source.doc,
            "origin": source.origin,
            "label": m.label(min_seconds),
            "shares": {k: round(v, 4) for k, v in m.shares().items()},
            "seconds": round(m.total, 6),
            "events": m.events,
            "workloads": sorted(m.workloads),
            "method": "pyprofile",
        }


def write_jsonl(rows: Iterable[dict[str, Any]], path: Path) -> int:
    """Write atomically (a reader never sees half a file); returns the row count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """Class counts per library, labelled rows only, largest libraries first."""
    per_library: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        per_library[row["library"]][row["label"] or "unlabelled"] += 1
    totals: Counter[str] = Counter()
    lines = [f"{'library':<28}" + "".join(f"{c:>10}" for c in (*CLASSES, "unlabelled"))]
    for library, counts in sorted(per_library.items(), key=lambda kv: -sum(kv[1].values())):
        totals.update(counts)
        lines.append(f"{library:<28}" + "".join(f"{counts[c]:>10}" for c in (*CLASSES, "unlabelled")))
    lines.append(f"{'TOTAL':<28}" + "".join(f"{totals[c]:>10}" for c in (*CLASSES, "unlabelled")))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# agreement with strace


def compare_with_strace(rows: Iterable[dict[str, Any]], verified_path: Path) -> dict[str, Any]:
    """Label agreement on functions both methods label. strace knows no waiting class (it drops waits),
    so the profiler's shares are compared over CPU, disk and network too."""
    strace = {}
    with verified_path.open(encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            strace[r["qualified_name"]] = r["label"]
    both = agree = agree3 = n3 = 0
    confusion: Counter[tuple[str, str]] = Counter()
    for row in rows:
        theirs = strace.get(row["qualified_name"])
        if theirs is None:
            continue
        if row["label"] is not None:
            both += 1
            agree += row["label"] == theirs
            confusion[(theirs, row["label"])] += 1
        three = {k: row["shares"][k] for k in ("cpu", "disk", "network")}
        total = sum(three.values())
        if total > 0 and max(three.values()) / total >= MIN_SHARE:
            n3 += 1
            agree3 += max(three, key=lambda k: three[k]) == theirs
    return {
        "strace_labelled": len(strace),
        "both_label": both,
        "agree": agree,
        "agreement": round(agree / both, 3) if both else None,
        "both_label_cpu_disk_network": n3,
        "agree_cpu_disk_network": agree3,
        "confusion_strace_to_pyprofile": {f"{a}->{b}": n for (a, b), n in sorted(confusion.items())},
    }


_WORKLOADS_SCRIPT = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, {root!r})
from crystalperf.models import verify_workloads as w
w.cpu_workloads()
with tempfile.TemporaryDirectory() as tmp:
    w.disk_workloads(Path(tmp))
w.network_workloads()
"""


def run_verify_workloads(
    raw_root: Path, boot_dir: Path, *, python: str, timeout_s: float
) -> tuple[int, float]:
    """The strace-verified workloads, this time under the profiler (no markers, no strace)."""
    root = str(Path(__file__).resolve().parents[3])
    return run_measured([python, "-c", _WORKLOADS_SCRIPT.format(root=root)], raw_root / "verify-workloads",
                        boot_dir, timeout_s=timeout_s)  # fmt: skip


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m crystalperf.models.measure.python --out DIR [--quick]``."""
    parser = argparse.ArgumentParser(prog="python -m crystalperf.models.measure.python", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="output directory (python.jsonl goes there)")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_SUITES)}")
    parser.add_argument("--suites", nargs="*", help="stdlib test modules to run (default: the built-in list)")
    parser.add_argument(
        "--python",
        default=PYENV_PYTHON if Path(PYENV_PYTHON).exists() else sys.executable,
        help="interpreter whose Lib/test is run (default: pyenv 3.11.7 when present)",
    )
    parser.add_argument(
        "--pypi", nargs="*", metavar="NAME",
        help="also run PyPI packages' suites (all of py_pypi.PYPI_SUITES, or the named ones; --quick: two)",
    )  # fmt: skip
    parser.add_argument(
        "--venvs", type=Path, default=Path("/work/data/venvs"), help="throwaway venvs for --pypi"
    )
    parser.add_argument("--skip-stdlib", action="store_true", help="do not run the stdlib suites")
    parser.add_argument("--min-seconds", type=float, default=MIN_SECONDS, help="evidence needed for a label")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per suite")
    parser.add_argument("--reuse-raw", action="store_true", help="relabel DIR/python-raw without running")
    parser.add_argument(
        "--validate-strace",
        type=Path,
        metavar="VERIFIED.jsonl",
        help="also measure verify_workloads and compare labels with this strace-verified file",
    )
    args = parser.parse_args(argv)

    raw_root = args.out / "python-raw"
    boot_dir = write_bootstrap(args.out / "python-boot")
    started = time.monotonic()
    if not args.reuse_raw:
        suites = [] if args.skip_stdlib else args.suites or (QUICK_SUITES if args.quick else STDLIB_SUITES)
        run_stdlib_suites(suites, raw_root, boot_dir, python=args.python, timeout_s=args.timeout)
        if args.pypi is not None:
            run_pypi_suites(
                py_pypi.select(args.pypi or (py_pypi.QUICK_PYPI if args.quick else None)),
                raw_root, boot_dir, venvs=args.venvs, base_python=args.python, timeout_s=args.timeout,
            )  # fmt: skip
        if args.validate_strace:
            run_verify_workloads(raw_root, boot_dir, python=args.python, timeout_s=args.timeout)
    if not raw_root.is_dir():
        sys.stderr.write(f"error: {raw_root}: no measurements (run without --reuse-raw first)\n")
        return 2
    merged, distributions, stdlib = load_raw(raw_root)
    rows = list(measured_rows(merged, distributions, stdlib, args.min_seconds))
    n = write_jsonl(rows, args.out / "python.jsonl")
    sys.stdout.write(summary(rows) + "\n")
    sys.stdout.write(
        f"{n} functions written to {args.out / 'python.jsonl'} in {time.monotonic() - started:.0f} s\n"
    )
    if args.validate_strace:
        if not args.validate_strace.is_file():
            sys.stderr.write(f"error: {args.validate_strace}: no such strace-verified file\n")
            return 2
        verify_rows = list(measured_rows(*_only(raw_root, "verify-workloads")))
        sys.stdout.write(json.dumps(compare_with_strace(verify_rows, args.validate_strace), indent=1) + "\n")
    return 0


def _only(
    raw_root: Path, workload: str
) -> tuple[dict[tuple[str, int, str], Measurement], dict[str, dict[str, str]], str]:
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(raw_root / workload, Path(tmp) / workload)
        return load_raw(Path(tmp))


if __name__ == "__main__":
    raise SystemExit(main())
