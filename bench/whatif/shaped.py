"""An HTTP server behind a shaped network link, for what-if cases that vary the network bandwidth for real.

The server runs in a network namespace of its own, joined to the root namespace by a veth pair; ``tc``
shapes both ends of the pair (a token bucket, optionally behind a ``netem`` delay), so what the job
downloads from it crosses a link of the asked rate. The job's processes stay in the root namespace: their
``/proc/<pid>/net/dev`` counts the veth traffic, as it would count a real NIC's.

    with ShapedServer(rate_mbit=40) as server:
        url = server.url(50_000_000)   # GET returns 50 MB, streamed
        server.set_rate(100)           # re-shape the same link

Needs root, ``ip`` and ``tc`` (iproute2). ``unavailable()`` says why not, by trying. Everything the server
creates (namespace, veth pair, server process) is removed on exit, on a failure half-way through set-up, at
interpreter exit and on SIGTERM; namespaces left by a process that was killed outright (SIGKILL) are removed
by the next ``ShapedServer`` that starts.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import urllib.request
from types import FrameType, TracebackType
from typing import Any

# The server: streams n bytes for GET /<n>, one thread per request so that parallel tasks share the link.
# It exits when the process that started it dies (PR_SET_PDEATHSIG), so a killed benchmark leaves no server.
SERVER = textwrap.dedent('''
    import ctypes, signal, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    CHUNK = bytes(256 * 1024)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            try:
                n = int(self.path.strip("/").split("?")[0])
            except ValueError:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            view = memoryview(CHUNK)
            try:
                while n > 0:
                    step = min(n, len(CHUNK))
                    self.wfile.write(view[:step])
                    n -= step
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

    server = Server((sys.argv[1], 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()
''')

_NAME = re.compile(r"^(?P<prefix>[a-z]+)(?P<pid>\d+)n(?P<n>\d+)$")
_counter = itertools.count()
_live: dict[str, ShapedServer] = {}
_lock = threading.Lock()
_previous_sigterm: Any = None


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def unavailable() -> str | None:
    """None when this machine can shape a link for a ``ShapedServer``, else why not (found by starting one
    and downloading from it)."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "network namespaces and tc need root"
    try:
        with ShapedServer(rate_mbit=100, prefix="cpq") as server:
            with urllib.request.urlopen(server.url(4096), timeout=10) as response:
                if len(response.read()) != 4096:
                    return "the shaped server answered with the wrong number of bytes"
    except (OSError, RuntimeError) as exc:
        return f"cannot start a shaped server: {exc}"
    return None


def _used_subnets() -> set[tuple[int, int]]:
    """The 10.b.c.0/24 networks already holding an address in the root namespace."""
    proc = _run("ip", "-o", "-4", "addr", "show", check=False)
    return {(int(b), int(c)) for b, c in re.findall(r"inet 10\.(\d+)\.(\d+)\.\d+/", proc.stdout)}


def _remove_stale(prefix: str) -> None:
    """Namespaces of this harness whose creating process is gone (it was killed before it could clean up)."""
    proc = _run("ip", "netns", "list", check=False)
    for line in proc.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = _NAME.match(name)
        if match is None or match["prefix"] != prefix or os.path.exists(f"/proc/{match['pid']}"):
            continue
        for pid in _run("ip", "netns", "pids", name, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        _run("ip", "netns", "del", name, check=False)


def _cleanup_all() -> None:
    with _lock:
        servers = list(_live.values())
    for server in servers:
        server.close()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _cleanup_all()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    else:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _install_handlers() -> None:
    """atexit always; a SIGTERM handler only from the main thread, chaining to the one it replaces."""
    global _previous_sigterm
    if _previous_sigterm is not None:
        return
    atexit.register(_cleanup_all)
    if threading.current_thread() is threading.main_thread():
        current = signal.getsignal(signal.SIGTERM)
        if current is not _on_sigterm and current is not signal.SIG_IGN:
            _previous_sigterm = current if current is not None else signal.SIG_DFL
            signal.signal(signal.SIGTERM, _on_sigterm)
            return
    _previous_sigterm = signal.SIG_DFL


def tbf_burst_bytes(rate_mbit: float) -> int:
    """The bucket: at least 10 ms of traffic (a 250 Hz kernel's tick, else the link runs below its rate)
    and at least one 64 KiB segment (veth hands tc GSO segments that large)."""
    return max(int(rate_mbit * 1e6 / 8 * 0.01), 96 * 1024)


class ShapedServer:
    """An HTTP server in its own network namespace, reached from this one through a link of ``rate_mbit``
    in each direction (plus ``delay_ms`` one-way delay on downloads, when asked: that needs the kernel's
    ``sch_netem``, which not every kernel has; starting raises RuntimeError where it is missing).

    The server process exits with the thread that started it (``PR_SET_PDEATHSIG``): start it from a thread
    that outlives its use (the main thread, as the benchmark and the tests do)."""

    def __init__(self, rate_mbit: float, delay_ms: float = 0.0, prefix: str = "cpw") -> None:
        if rate_mbit <= 0:
            raise ValueError("rate_mbit must be positive")
        if not re.fullmatch(r"[a-z]{1,4}", prefix):
            raise ValueError("prefix: 1-4 lower-case letters (interface names are at most 15 characters)")
        self.rate_mbit = float(rate_mbit)
        self.delay_ms = float(delay_ms)
        self.prefix = prefix
        self.name = f"{prefix}{os.getpid()}n{next(_counter)}"
        self.namespace = self.name
        self.host_if, self.ns_if = f"{self.name}a", f"{self.name}b"
        self.host_ip = self.ns_ip = ""
        self.port = 0
        self._server: subprocess.Popen[str] | None = None
        self._open = False

    # -- set-up ---------------------------------------------------------------------------------------
    def __enter__(self) -> ShapedServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        if len(self.host_if) > 15:
            raise RuntimeError(f"interface name {self.host_if} is longer than 15 characters")
        _install_handlers()
        _remove_stale(self.prefix)
        with _lock:
            _live[self.name] = self
        self._open = True
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _subnet(self) -> tuple[int, int]:
        used = _used_subnets()
        seed = (os.getpid() * 64 + int(self.name.rsplit("n", 1)[1])) % (40 * 256)
        for step in range(40 * 256):
            k = (seed + step) % (40 * 256)
            candidate = (200 + k // 256, k % 256)
            if candidate not in used:
                return candidate
        raise RuntimeError("no free 10.200-239.x.0/24 subnet")

    def _create(self) -> None:
        b, c = self._subnet()
        self.host_ip, self.ns_ip = f"10.{b}.{c}.1", f"10.{b}.{c}.2"
        ns = ("ip", "netns", "exec", self.namespace)
        _run("ip", "netns", "add", self.namespace)
        _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        _run("ip", "link", "set", self.ns_if, "netns", self.namespace)
        _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_if)
        _run("ip", "link", "set", self.host_if, "up")
        _run(*ns, "ip", "addr", "add", f"{self.ns_ip}/24", "dev", self.ns_if)
        _run(*ns, "ip", "link", "set", self.ns_if, "up")
        _run(*ns, "ip", "link", "set", "lo", "up")
        self._shape("add")
        self._server = subprocess.Popen([*ns, sys.executable, "-c", SERVER, self.ns_ip],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self._server.stdout is not None
        line = self._server.stdout.readline().strip()
        if not line.isdigit():
            self._server.wait(timeout=10)
            error = self._server.stderr.read()[-500:] if self._server.stderr else ""
            raise RuntimeError(f"the shaped server did not start: {error}")
        self.port = int(line)

    def _shape(self, verb: str) -> None:
        """Namespace-side egress (downloads to this namespace) and host-side egress (uploads) get the rate;
        the delay, when asked, goes in front of the download side's bucket."""
        burst = tbf_burst_bytes(self.rate_mbit)
        tbf = ["tbf", "rate", f"{self.rate_mbit:g}mbit", "burst", str(burst), "latency", "100ms"]
        ns = ("ip", "netns", "exec", self.namespace)
        if self.delay_ms > 0:
            if verb == "add":
                netem = _run(*ns, "tc", "qdisc", "add", "dev", self.ns_if, "root", "handle", "1:", "netem",
                             "delay", f"{self.delay_ms:g}ms", check=False)
                if netem.returncode != 0:
                    raise RuntimeError(f"delay_ms needs tc's netem (kernel module sch_netem): "
                                       f"{netem.stderr.strip()}")
            _run(*ns, "tc", "qdisc", verb, "dev", self.ns_if, "parent", "1:", "handle", "2:", *tbf)
        else:
            _run(*ns, "tc", "qdisc", verb, "dev", self.ns_if, "root", "handle", "1:", *tbf)
        _run("tc", "qdisc", verb, "dev", self.host_if, "root", "handle", "1:", *tbf)

    # -- use ------------------------------------------------------------------------------------------
    def set_rate(self, rate_mbit: float) -> None:
        """Re-shape the running link (connections stay open)."""
        if rate_mbit <= 0:
            raise ValueError("rate_mbit must be positive")
        if not self._open:
            raise RuntimeError("the shaped server is not running")
        self.rate_mbit = float(rate_mbit)
        self._shape("change")

    def url(self, n_bytes: int) -> str:
        """Where a GET returns ``n_bytes`` bytes."""
        if not self.port:
            raise RuntimeError("the shaped server is not running")
        return f"http://{self.ns_ip}:{self.port}/{int(n_bytes)}"

    # -- tear-down ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the server and remove the namespace and the veth pair; safe to call twice."""
        if not self._open:
            return
        self._open = False
        server, self._server = self._server, None
        if server is not None and server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=5)
        if server is not None:
            for stream in (server.stdout, server.stderr):
                if stream is not None:
                    stream.close()
        # Deleting one end of a veth pair deletes both; the host end is deleted explicitly in case the pair
        # was made but not yet moved into the namespace.
        _run("ip", "link", "del", self.host_if, check=False)
        _run("ip", "netns", "del", self.namespace, check=False)
        self.port = 0
        with _lock:
            _live.pop(self.name, None)


if __name__ == "__main__":
    # python -m bench.whatif.shaped [RATE_MBIT ...]: the download rate reached through the link.
    import time

    reason = unavailable()
    if reason:
        sys.exit(f"unavailable: {reason}")
    rates = [float(r) for r in sys.argv[1:]] or [40.0, 100.0]
    with ShapedServer(rate_mbit=rates[0]) as shaped:
        for rate in rates:
            shaped.set_rate(rate)
            size = int(rate * 1e6 / 8 * 4)  # about 4 s at the rate
            started = time.perf_counter()
            with urllib.request.urlopen(shaped.url(size)) as response:
                while response.read(1 << 20):
                    pass
            elapsed = time.perf_counter() - started
            print(f"{rate:g} Mbit/s link: {size / elapsed / 1e6:.2f} MB/s "
                  f"({size * 8 / elapsed / 1e6:.1f} Mbit/s)")
