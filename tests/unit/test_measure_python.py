"""The Python resource profiler behind the measured labels: fd classification, exact attribution on a
fake clock, real workloads (file, socket pair, hashing) and the suite runner's output format."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from crystalperf.models.measure import py_profiler
from crystalperf.models.measure import python as measure
from crystalperf.models.measure.py_profiler import DISK, NETWORK, WAITING, Profiler, fd_kind


def test_fd_kind_tells_files_sockets_and_pipes_apart(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    with path.open("rb") as fh:
        assert fd_kind(fh.fileno()) == DISK
    a, b = socket.socketpair()
    with a, b:
        assert fd_kind(a.fileno()) == NETWORK
    r, w = os.pipe()
    try:
        assert fd_kind(r) == WAITING
    finally:
        os.close(r)
        os.close(w)
    assert fd_kind(r) is None  # closed
    assert fd_kind("not an fd") is None


# ---------------------------------------------------------------------------------------------------
# exact attribution with a fake clock


class _Clock:
    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0


class _Frame:
    def __init__(self, code: Any) -> None:
        self.f_code = code
        self.f_globals = {"__name__": "fake"}
        self.f_locals: dict[str, Any] = {}


def _outer() -> None: ...


def _inner() -> None: ...


def _callback() -> None: ...


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(py_profiler, "_wall", lambda: c.wall)
    monkeypatch.setattr(py_profiler, "_thread_time", lambda: c.cpu)
    return c


def _drive(profiler: Profiler, clock: _Clock, script: list[tuple[float, float, Any, str, Any]]) -> None:
    for wall, cpu, frame, event, arg in script:
        clock.wall, clock.cpu = wall, cpu
        profiler._event(frame, event, arg)


def _totals(profiler: Profiler) -> dict[str, dict[str, float]]:
    return {row["qualname"]: row for row in profiler.results()}


def test_nested_call_attribution_is_inclusive_and_exact(clock: _Clock) -> None:
    outer, inner = _Frame(_outer.__code__), _Frame(_inner.__code__)
    p = Profiler()
    _drive(p, clock, [
        (0, 0, outer, "call", None),
        (1, 1, inner, "call", None),
        (2, 1.5, inner, "c_call", os.stat),  # a path call: disk
        (5, 1.7, inner, "c_return", os.stat),
        (6, 2.7, inner, "return", None),
        (7, 3.0, outer, "c_call", time.sleep),  # waiting
        (9, 3.0, outer, "c_return", time.sleep),
        (10, 3.5, outer, "return", None),
    ])  # fmt: skip
    t = _totals(p)
    inner_row, outer_row = t["_inner"], t["_outer"]
    # inner: 3 s in stat, CPU 1.7 s minus the 0.2 s stat consumed.
    assert (inner_row["wall"], inner_row["disk"], inner_row["waiting"]) == (5, 3, 0)
    assert inner_row["cpu"] == pytest.approx(1.5)
    assert inner_row["events"] == 2  # one call, one I/O call
    # outer holds inner's disk time and its own sleep: CPU 3.5 s minus the 0.2 s inside stat.
    assert (outer_row["wall"], outer_row["disk"], outer_row["waiting"], outer_row["network"]) == (10, 3, 2, 0)
    assert outer_row["cpu"] == pytest.approx(3.3)
    assert outer_row["events"] == 3


def test_recursion_counts_the_outermost_activation_once(clock: _Clock) -> None:
    first, second = _Frame(_outer.__code__), _Frame(_outer.__code__)
    p = Profiler()
    _drive(p, clock, [
        (0, 0, first, "call", None),
        (1, 0, second, "call", None),
        (1, 0, second, "c_call", os.stat),
        (4, 0, second, "c_return", os.stat),
        (5, 0, second, "return", None),
        (6, 0, first, "return", None),
    ])  # fmt: skip
    row = _totals(p)["_outer"]
    assert (row["calls"], row["wall"], row["disk"]) == (1, 6, 3)


def test_python_code_called_back_inside_an_io_call_is_not_io(clock: _Clock) -> None:
    outer, callback = _Frame(_outer.__code__), _Frame(_callback.__code__)
    p = Profiler()
    _drive(p, clock, [
        (0, 0, outer, "call", None),
        (1, 0, outer, "c_call", time.sleep),
        (2, 0, callback, "call", None),  # e.g. a Python readinto under a C buffered read
        (4, 2, callback, "return", None),
        (5, 2, outer, "c_return", time.sleep),
        (6, 2, outer, "return", None),
    ])  # fmt: skip
    t = _totals(p)
    assert t["_outer"]["waiting"] == 2  # 1 -> 2 and 4 -> 5, not the callback's 2 s
    assert t["_outer"]["cpu"] == 2
    assert t["_callback"]["waiting"] == 0


def test_an_unwound_frame_without_its_return_event_is_closed_with_its_caller(clock: _Clock) -> None:
    outer, inner = _Frame(_outer.__code__), _Frame(_inner.__code__)
    p = Profiler()
    _drive(
        p, clock, [(0, 0, outer, "call", None), (1, 1, inner, "call", None), (3, 3, outer, "return", None)]
    )
    t = _totals(p)
    assert (t["_outer"]["wall"], t["_inner"]["wall"]) == (3, 2)
    assert not p.threads[threading.get_ident()].stack


# ---------------------------------------------------------------------------------------------------
# real workloads


def _read_file(path: Path) -> int:
    with path.open("rb") as fh:
        return len(fh.read())


def _talk(sock: socket.socket) -> bytes:
    sock.sendall(b"ping" * 256)
    return sock.recv(65536)


def _hash_block() -> bytes:
    h = hashlib.sha256()
    for _ in range(300):
        h.update(b"y" * 16384)
    return h.digest()


def _both(path: Path) -> None:
    _read_file(path)
    _hash_block()


def _measurement(row: dict[str, Any]) -> measure.Measurement:
    m = measure.Measurement(row["file"], row["line"], row["module"], row["qualname"], calls=row["calls"],
                            events=row["events"])  # fmt: skip
    m.seconds = {k: row[k] for k in measure.CLASSES}
    return m


def test_real_file_socket_and_hash_workloads_get_disk_network_and_cpu(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    # Big enough that eleven reads from the page cache pass the label's evidence floor (MIN_SECONDS) even
    # on a fast machine: 8 MiB took 9 ms in all on CI's, under the 10 ms floor.
    path.write_bytes(os.urandom(48 << 20))
    a, b = socket.socketpair()

    def peer() -> None:  # a slow remote end: the caller's time is spent waiting on the socket
        while data := b.recv(65536):
            time.sleep(0.004)
            b.sendall(data)

    server = threading.Thread(target=peer, daemon=True)
    server.start()
    p = Profiler()
    p.install()
    try:
        for _ in range(10):
            _read_file(path)
            _talk(a)
            _hash_block()
        _both(path)
    finally:
        p.uninstall()
        a.close()
        server.join(5)
        b.close()
    rows = {r["qualname"]: r for r in p.results() if r["module"] == __name__}
    assert _measurement(rows["_read_file"]).label() == "disk"
    assert _measurement(rows["_talk"]).label() == "network"
    assert _measurement(rows["_hash_block"]).label() == "cpu"
    both = rows["_both"]
    assert both["disk"] > 0 and both["cpu"] > 0 and both["network"] == 0
    assert not hasattr(os.read, "__wrapped__")  # the fd wrappers are gone again


def test_fd_wrappers_classify_os_read_by_its_fd(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"z" * 1000)
    r, w = os.pipe()
    os.write(w, b"x")

    def read_file_fd() -> None:
        fd = os.open(path, os.O_RDONLY)
        os.read(fd, 100)
        os.close(fd)

    def read_pipe() -> None:
        os.read(r, 1)

    p = Profiler()
    p.install()
    try:
        read_file_fd()
        read_pipe()
    finally:
        p.uninstall()
        os.close(r)
        os.close(w)
    rows = {r["qualname"].rsplit(".", 1)[-1]: r for r in p.results() if r["module"] == __name__}
    assert rows["read_file_fd"]["disk"] > 0 and rows["read_file_fd"]["waiting"] == 0
    assert rows["read_pipe"]["waiting"] > 0 and rows["read_pipe"]["disk"] == 0
    assert "wrapper" not in rows  # the profiler's own frames are never measured functions


def test_builtins_kept_as_class_attributes_still_work_under_the_wrappers() -> None:
    p = Profiler()
    p.install()
    try:

        class Poller:  # as selectors.SelectSelector keeps select.select
            _select = select.select
            _read = os.read

        r, w = os.pipe()
        os.write(w, b"x")
        ready = Poller()._select([r], [], [], 1)
        data = Poller()._read(r, 1)
    finally:
        p.uninstall()
        os.close(r)
        os.close(w)
    assert ready == ([r], [], [])
    assert data == b"x"


def test_reading_source_files_while_importing_is_not_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "crystalperf_fresh_module.py").write_text("X = 1\n" * 5000)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "crystalperf_fresh_module", raising=False)

    def load() -> None:
        import crystalperf_fresh_module  # noqa: F401

    p = Profiler()
    p.install()
    try:
        load()
    finally:
        p.uninstall()
    row = next(r for r in p.results() if r["qualname"].endswith("load") and r["module"] == __name__)
    assert row["disk"] == 0 and row["cpu"] > 0


# ---------------------------------------------------------------------------------------------------
# labels, exclusions and the output format


def test_label_needs_a_dominant_share_and_enough_evidence() -> None:
    m = measure.Measurement("/x.py", 1, "json", "f", events=5)
    m.seconds = {"cpu": 0.004, "disk": 0.016, "network": 0.0, "waiting": 0.0}
    assert m.label() == "disk"
    m.events = 4
    assert m.label() is None  # too few events
    m.events = 5
    m.seconds = {"cpu": 0.001, "disk": 0.005, "network": 0.0, "waiting": 0.0}
    assert m.label() is None  # under 10 ms
    m.seconds = {"cpu": 0.5, "disk": 0.5, "network": 0.0, "waiting": 0.0}
    assert m.label() is None  # no dominant share
    m.seconds = {"cpu": 0.0, "disk": 0.0, "network": 0.02, "waiting": 0.0}
    assert m.label() == "network"
    m.flags = inspect.CO_COROUTINE
    assert m.label() is None  # its awaits happen outside its own calls


def test_test_code_harness_and_forbidden_frameworks_get_no_library(tmp_path: Path) -> None:
    stdlib = str(tmp_path / "lib")
    site = tmp_path / "venv" / "site-packages"
    dists = {"requests": {"distribution": "requests", "licence": "Apache-2.0"},
             "pyspark": {"distribution": "pyspark", "licence": "Apache-2.0"}}  # fmt: skip

    def lib(module: str, file: str, qualname: str = "f") -> tuple[str, str] | None:
        return measure.library_of(measure.Measurement(file, 1, module, qualname), stdlib, dists)

    assert lib("json.decoder", f"{stdlib}/json/decoder.py") == ("json", "PSF-2.0")
    assert lib("requests.api", f"{site}/requests/api.py") == ("requests", "Apache-2.0")
    assert lib("test.test_json", f"{stdlib}/test/test_json/test_decode.py") is None
    assert lib("unittest.case", f"{stdlib}/unittest/case.py") is None
    assert lib("mypkg.tests.helpers", f"{site}/mypkg/tests/helpers.py") is None
    assert lib("requests._tests.utils", f"{site}/requests/_tests/utils.py") is None  # trio keeps its tests so
    assert lib("pyspark.rdd", f"{site}/pyspark/rdd.py") is None
    assert lib("json", f"{stdlib}/json/__init__.py", "<listcomp>") is None
    assert lib("elsewhere", "/home/user/elsewhere.py") is None


def test_suite_run_under_the_bootstrap_writes_measured_rows(tmp_path: Path) -> None:
    """A real child interpreter, profiled through the sitecustomize bootstrap, copying a real file with
    shutil; the merged row for shutil.copyfile is labelled disk with its code located from source."""
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(12 << 20))  # 12 copies past the 10 ms evidence floor with room on a fast machine
    script = (
        "import shutil, sys\n"
        "for i in range(12):\n"
        f"    shutil.copyfile({str(src)!r}, {str(tmp_path / 'dst.bin')!r})\n"
    )
    boot = measure.write_bootstrap(tmp_path / "boot")
    status, _ = measure.run_measured(
        [sys.executable, "-c", script], tmp_path / "raw" / "copy", boot, timeout_s=60
    )
    assert status == 0
    merged, dists, stdlib = measure.load_raw(tmp_path / "raw")
    rows = {r["qualified_name"]: r for r in measure.measured_rows(merged, dists, stdlib)}
    row = rows["shutil.copyfile"]
    assert row["label"] == "disk"
    assert row["library"] == "shutil" and row["licence"] == "PSF-2.0"
    assert row["code"].startswith("def copyfile(") and row["origin"] == "source"
    assert row["workloads"] == ["copy"] and row["method"] == "pyprofile"
    assert sum(row["shares"].values()) == pytest.approx(1, abs=1e-3)
    assert set(row) >= {"id", "language", "qualified_name", "library", "licence", "code", "doc", "origin",
                        "label", "shares", "seconds", "events", "workloads", "method"}  # fmt: skip
    out = tmp_path / "out" / "python.jsonl"
    assert measure.write_jsonl(rows.values(), out) == len(rows)
    assert json.loads(out.read_text().splitlines()[0])["id"].startswith("python:")


def test_suite_stopped_at_its_timeout_still_writes_its_measurements(tmp_path: Path) -> None:
    """A runner that catches SystemExit in a test (as pytest does) must not swallow the timeout: the
    bootstrap dumps on SIGTERM and the process then dies of the signal."""
    script = (
        "import time\n"
        "def work():\n"
        "    sum(i * i for i in range(200_000))\n"
        "while True:\n"
        "    try:\n"
        "        work()\n"
        "        time.sleep(0.05)\n"
        "    except BaseException:\n"
        "        pass\n"
    )
    boot = measure.write_bootstrap(tmp_path / "boot")
    status, seconds = measure.run_measured(
        [sys.executable, "-c", script], tmp_path / "raw" / "loop", boot, timeout_s=3
    )
    assert status == -signal.SIGTERM and seconds < 30
    assert list((tmp_path / "raw" / "loop").glob("raw-*.json"))


def test_strace_comparison_counts_agreement(tmp_path: Path) -> None:
    verified = tmp_path / "verified.jsonl"
    verified.write_text("\n".join(json.dumps(r) for r in [
        {"qualified_name": "a.f", "label": "disk"}, {"qualified_name": "a.g", "label": "cpu"},
        {"qualified_name": "a.h", "label": "network"}]) + "\n")  # fmt: skip
    shares = {"cpu": 0.1, "disk": 0.3, "network": 0.0, "waiting": 0.6}
    rows = [
        {
            "qualified_name": "a.f",
            "label": "disk",
            "shares": {"cpu": 0, "disk": 1, "network": 0, "waiting": 0},
        },
        {
            "qualified_name": "a.g",
            "label": "disk",
            "shares": {"cpu": 0, "disk": 1, "network": 0, "waiting": 0},
        },
        {"qualified_name": "a.h", "label": "waiting", "shares": shares},
        {"qualified_name": "b.x", "label": "cpu", "shares": shares},
    ]
    report = measure.compare_with_strace(rows, verified)
    assert (report["both_label"], report["agree"]) == (3, 1)
    # Without the waiting class a.h is disk (0.3 of 0.4): one more comparable, still not network.
    assert (report["both_label_cpu_disk_network"], report["agree_cpu_disk_network"]) == (3, 1)
