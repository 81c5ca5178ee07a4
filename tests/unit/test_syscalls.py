"""The call a blocked thread is in, from /proc: real threads of this process, and hand-made /proc trees for
the cases a unit test cannot produce (a socket to another host)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import FixedClassifier, FunctionSource
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.record import syscalls
from crystalperf.core.record.sampling import PythonStackSampler
from crystalperf.core.record.syscalls import BlockedCalls
from crystalperf.core.resources import ResourceVector

from .helpers import make_trace, op

LINUX = BlockedCalls().available
needs_proc = pytest.mark.skipif(not LINUX, reason="needs Linux /proc/<pid>/task/<tid>/syscall on x86_64 or arm64")


def _blocked_frame(target: object, *args: object) -> str | None:
    """Start a thread running ``target(*args)``, let it block, and read what it is blocked in."""
    started = threading.Event()

    def run() -> None:
        started.set()
        target(*args)  # type: ignore[operator]

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait()
    calls = BlockedCalls()
    for _ in range(50):
        time.sleep(0.02)
        found = calls.frame(thread.native_id or 0)
        if found is not None:
            return found
    return None


@needs_proc
def test_a_sleeping_thread_is_in_a_sleep() -> None:
    assert _blocked_frame(time.sleep, 2.0) == syscalls.SLEEP


@needs_proc
def test_a_thread_waiting_on_an_event_is_in_a_wait() -> None:
    event = threading.Event()
    try:
        assert _blocked_frame(event.wait, 5.0) == syscalls.WAIT
    finally:
        event.set()


@needs_proc
def test_a_thread_reading_a_pipe_waits_for_another_local_process() -> None:
    read_end, write_end = os.pipe()
    try:
        assert _blocked_frame(os.read, read_end, 1) == syscalls.LOCAL
    finally:
        os.write(write_end, b"x")
        os.close(write_end)


def _fake_proc(tmp_path: Path, syscall: str, fd_target: str, tcp_remote: str = "0A000002:1F90") -> Path:
    proc = tmp_path / "proc"
    (proc / "task" / "7").mkdir(parents=True)
    (proc / "task" / "7" / "syscall").write_text(syscall)
    (proc / "fd").mkdir()
    os.symlink(fd_target, proc / "fd" / "5")
    (proc / "net").mkdir()
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (proc / "net" / "tcp").write_text(
        header + f"   0: 0100007F:A1B2 {tcp_remote} 01 00000000:00000000 00:00000000 00000000     0        0 4242 1\n")
    return proc


@pytest.mark.parametrize(("syscall", "target", "remote", "expected"), [
    ("45 0x5 0x7f00 0x10000 0x0 0x0 0x0 0x7ffd 0x7f12", "socket:[4242]", "0A000002:1F90", syscalls.SOCKET_RECV),
    ("44 0x5 0x7f00 0x10 0x0 0x0 0x0 0x7ffd 0x7f12", "socket:[4242]", "0A000002:1F90", syscalls.SOCKET_SEND),
    # the same read from a peer on 127.0.0.1: a Python worker waiting for its JVM
    ("45 0x5 0x7f00 0x10000 0x0 0x0 0x0 0x7ffd 0x7f12", "socket:[4242]", "0100007F:1F90", syscalls.LOCAL),
    ("0 0x5 0x7f00 0x10000 0x0 0x0 0x0 0x7ffd 0x7f12", "/data/part-0001.parquet", "", syscalls.FILE_READ),
    ("17 0x5 0x7f00 0x10000 0x0 0x0 0x0 0x7ffd 0x7f12", "/data/part-0001.parquet", "", syscalls.FILE_READ),
    ("1 0x5 0x7f00 0x10000 0x0 0x0 0x0 0x7ffd 0x7f12", "/out/x", "", syscalls.FILE_WRITE),
    ("0 0x5 0x7f00 0x10000 0x0 0x0 0x0 0x7ffd 0x7f12", "pipe:[99]", "", syscalls.LOCAL),
    ("230 0x1 0x0 0x7ffd 0x0 0x0 0x0 0x7ffd 0x7f12", "/x", "", syscalls.SLEEP),
    ("202 0x7f00 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f12", "/x", "", syscalls.WAIT),
    ("23 0x0 0x0 0x0 0x0 0x7ffd 0x0 0x7ffd 0x7f12", "/x", "", syscalls.SLEEP),  # time.sleep on Python 3.10
    ("7 0x7ffd 0x2 0x1388 0x0 0x0 0x0 0x7ffd 0x7f12", "/x", "", syscalls.WAIT),
    ("running", "/x", "", None),
    ("39 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f12", "/x", "", None),  # getpid: not a blocking call we know
])
def test_calls_and_descriptors_by_hand(tmp_path: Path, syscall: str, target: str, remote: str,
                                       expected: str | None) -> None:
    proc = _fake_proc(tmp_path, syscall, target, remote or "00000000:0000")
    assert BlockedCalls(str(proc), machine="x86_64").frame(7) == expected


def test_the_generic_table_of_arm64(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, "63 0x5 0x7f00 0x10000 0x0 0x0 0x0 0x7ffd 0x7f12", "/data/a.csv")
    assert BlockedCalls(str(proc), machine="aarch64").frame(7) == syscalls.FILE_READ
    assert not BlockedCalls(str(proc), machine="sparc64").available


@needs_proc
def test_the_python_sampler_puts_the_blocking_call_on_top_of_a_waiting_threads_stack() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=lambda: stop.wait(10), name="sleeper", daemon=True)
    worker.start()
    sampler = PythonStackSampler(lambda ident, name: tr.SampleKey(operation="a") if name == "sleeper" else None,
                                 interval_s=0.01)
    for _ in range(5):
        sampler.sample_once()
        time.sleep(0.01)
    stop.set()
    samples = sampler.table.to_samples()
    tops = {samples.frames[samples.stacks[s][0]].name for s in samples.stack}
    assert syscalls.WAIT in tops


class EveryFrame:
    name = "test"

    def locate(self, frame: tr.Frame, context: object) -> FunctionSource | None:
        return FunctionSource(frame.name, "python", f"def {frame.name}(): pass")


def _vector_of_stack_under(kernel_frame: str) -> ResourceVector:
    frames = [tr.Frame(name=kernel_frame, language="unknown", module="kernel"),
              tr.Frame(name="app.chunks", language="python")]
    samples = tr.StackSamples(origin=0, frames=frames, stacks=[[0, 1]], states=[tr.THREAD_WAITING],
                              keys=[tr.SampleKey(operation="a")], key=[0], bucket=[0], stack=[0], count=[10])
    # What a classifier might say of a generator that downloads: mostly network.
    classifier = FixedClassifier({"app.chunks": ResourceVector.of(0.2, 0.3, 0.5)})
    profile = build_profile(make_trace([op("a", 0, 1)], samples=samples), classifier, locators=[EveryFrame()])
    return profile.top.nodes["a"].vector.vector


def test_what_the_kernel_says_decides_what_the_function_would_be_guessed_to_do() -> None:
    assert _vector_of_stack_under(syscalls.SLEEP) == ResourceVector.of(waiting=1.0)
    assert _vector_of_stack_under(syscalls.SOCKET_RECV) == ResourceVector.of(network=1.0)
    assert _vector_of_stack_under(syscalls.FILE_READ) == ResourceVector.of(disk=1.0)
    # A read from another process of this host (a pipe, a loopback socket): waiting for it, not the network.
    assert _vector_of_stack_under(syscalls.LOCAL) == ResourceVector.of(waiting=1.0)
    # A lock wait: what is waited for is the function below (the classifier's guess,
    # its CPU share turned to waiting since the thread was not running).
    assert _vector_of_stack_under(syscalls.WAIT) == ResourceVector.of(0.0, 0.3, 0.5, 0.2)


@needs_proc
def test_a_thread_started_outside_the_threading_module_is_sampled_with_its_state_and_call() -> None:
    # tf.data runs a generator on threads of its own: threading.enumerate() never lists them.
    import _thread

    from crystalperf.core.record.sampling import native_id_of_pthread

    started, stop = threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def foreign() -> None:
        seen["ident"], seen["native"] = threading.get_ident(), threading.get_native_id()
        started.set()
        stop.wait(10)

    _thread.start_new_thread(foreign, ())
    started.wait(5)
    try:
        assert seen["ident"] not in {t.ident for t in threading.enumerate()}
        assert native_id_of_pthread(seen["ident"]) == seen["native"]
        sampler = PythonStackSampler(
            lambda ident, name: tr.SampleKey(operation="a") if ident == seen["ident"] else None, interval_s=0.01)
        time.sleep(0.1)  # past setting the event: blocked in the wait
        for _ in range(3):
            sampler.sample_once()
            time.sleep(0.01)
        samples = sampler.table.to_samples()
        waiting = [s for s in set(samples.stack) if samples.state_of(s) == tr.THREAD_WAITING]
        assert waiting and {samples.frames[samples.stacks[s][0]].name for s in waiting} == {syscalls.WAIT}
    finally:
        stop.set()


@needs_proc
@pytest.mark.parametrize("family", ["unix", "loopback"])
def test_a_socket_of_this_process_to_a_local_peer_is_a_local_wait(family: str) -> None:
    """The sampler's own process: the peer is asked of the socket itself, not of /proc/net/tcp."""
    import socket

    if family == "unix":
        ours, theirs = socket.socketpair()
    else:
        server = socket.create_server(("127.0.0.1", 0))
        ours = socket.create_connection(server.getsockname())
        theirs, _ = server.accept()
        server.close()
    try:
        assert _blocked_frame(ours.recv, 1) == syscalls.LOCAL
    finally:
        theirs.sendall(b"x")
        ours.close()
        theirs.close()


def test_a_socket_to_another_host_is_told_by_its_peer() -> None:
    import socket

    # an unconnected datagram socket has no peer (local); one connected to a routable address has one (not local);
    # connecting a datagram socket sends nothing
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as unconnected:
        assert syscalls._peer_is_local(unconnected.fileno()) is True
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as remote:
        try:
            remote.connect(("192.0.2.1", 9))  # TEST-NET-1: never reached, but a peer address all the same
        except OSError:
            pytest.skip("no route to another host on this machine")
        assert syscalls._peer_is_local(remote.fileno()) is False
        assert remote.fileno() >= 0 and remote.getpeername()[0] == "192.0.2.1"  # the job's descriptor stays open
    if socket.has_ipv6:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as loopback:
            try:
                loopback.connect(("::1", 9))
            except OSError:
                return  # IPv6 switched off
            assert syscalls._peer_is_local(loopback.fileno()) is True
    read_end, write_end = os.pipe()
    try:
        assert syscalls._peer_is_local(read_end) is None  # no socket: the caller falls back to /proc/net
    finally:
        os.close(read_end)
        os.close(write_end)
