"""Hosts on shaped links: network namespaces joined by veth pairs to a bridge in the root namespace.

    with Network(["w0", "w1"], link=Link(rate_mbit=50)) as net:
        net.popen(["java", ...], host=net.hosts[0], log=path)   # runs in w0's namespace, address 10.213.c.2
        net.gateway                                              # the bridge's address (10.213.c.1), root namespace

Each host gets a namespace ``<prefix>-<name>`` with one veth pair: ``<prefix><name>n`` inside, ``<prefix><name>h``
on the bridge ``<prefix>br``. ``tc`` shapes both ends (the host end's egress is what the namespace receives, the
inside end's egress what it sends), so traffic between two hosts crosses the sender's upload bucket and the
receiver's download bucket. Processes in the root namespace (a driver, a master, a JobManager) reach the hosts
through the bridge's address; that path crosses one host's link only.

The prefix is ``cpf<pid><LETTERS>``: unique per harness process and per network in it. Everything the network
creates (namespaces, links, the processes started with ``popen``, which carry the prefix in the environment
variable ``CRYSTALPERF_CLUSTER``, inherited by whatever they start) is recorded and removed by ``close()``: on
leaving the ``with`` block, also after an exception, at interpreter exit, and on SIGTERM/SIGHUP. A network whose
harness was killed outright (SIGKILL) is removed by the next one that starts. ``leftovers(prefix)`` lists what
is still there, for tests.

A delay is a netem qdisc where the kernel has ``sch_netem``; elsewhere (``relay=True``, or by itself when a link
asks for a delay that netem cannot give) each host's pair of links is two TAP devices joined by ``taprelay``, a
small C program compiled here on first use, which holds back what the host receives by the delay. The relays are
the network's processes too (tagged ``<prefix>:relay``), stopped last; the devices go with them.

``cpu_quota_group(host, cores)`` gives a host a CPU quota (a cgroup v1 ``cpu`` group with ``cpu.cfs_quota_us``),
as a host of that many cores; ``popen(..., cgroups=[group])`` starts a process in it. Such a process enters its
namespace with ``nsenter --net`` rather than ``ip netns exec``, which mounts a fresh ``/sys`` without
``/sys/fs/cgroup``: a process must see its own quota there, as on a host of its own. The groups go with the
network.

``isolated=False`` gives the same interface on 127.0.0.1 without namespaces (no root needed, no shaping): the
loopback clusters of the integration tests use it.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any

from bench.whatif.shaped import tbf_burst_bytes

ENV_TAG = "CRYSTALPERF_CLUSTER"
PREFIX_ROOT = "cpf"
# The 10.213.0.0/16 range: private, and apart from the 10.200-239 range the what-if shaped server picks from
# only by luck, so both subnets are checked against the addresses in use.
SUBNET_B = 213
_NAME = re.compile(rf"^{PREFIX_ROOT}(?P<pid>\d+)(?P<seq>[A-Z]+)")
_counter = itertools.count()
_live: dict[str, Network] = {}
_lock = threading.Lock()
_previous: dict[int, Any] = {}
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
CFS_PERIOD_US = 100_000
RELAY_SOURCE = Path(__file__).with_name("taprelay.c")
RELAY_TAG = ":relay"
RELAY_PRIORITY = 10  # SCHED_FIFO, above every normal thread, below the kernel's own real-time threads


def _run(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(args), capture_output=True, text=True, check=False, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _letters(n: int) -> str:
    out = ""
    while True:
        out = chr(ord("A") + n % 26) + out
        n = n // 26 - 1
        if n < 0:
            return out


@dataclass(frozen=True)
class Link:
    """How one host is connected: ``rate_mbit`` each way (tbf; None: unshaped) and a one-way ``delay_ms`` with
    ``jitter_ms`` on what the host receives (netem; without the kernel's ``sch_netem``, the TAP relay, which
    gives a delay but no jitter)."""

    rate_mbit: float | None = None
    delay_ms: float = 0.0
    jitter_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.rate_mbit is not None and self.rate_mbit <= 0:
            raise ValueError("rate_mbit must be positive")
        if self.delay_ms < 0 or self.jitter_ms < 0 or (self.jitter_ms and not self.delay_ms):
            raise ValueError("delay_ms and jitter_ms must be >= 0, and jitter needs a delay")

    def describe(self) -> str:
        """``rate=50mbit delay=10ms jitter=1ms`` (only what is set), ``unshaped`` when nothing is."""
        parts = []
        if self.rate_mbit is not None:
            parts.append(f"rate={self.rate_mbit:g}mbit")
        if self.delay_ms:
            parts.append(f"delay={self.delay_ms:g}ms")
        if self.jitter_ms:
            parts.append(f"jitter={self.jitter_ms:g}ms")
        return " ".join(parts) or "unshaped"


@dataclass
class Host:
    """One machine of the cluster: a namespace (None: the root namespace, on loopback) and its address."""

    name: str
    address: str
    namespace: str | None
    link: Link
    outer_if: str = ""
    inner_if: str = ""


def unavailable() -> str | None:
    """None when this machine can build a ``Network``, else why not (found by building a one-host one)."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "network namespaces, veth pairs and tc need root"
    try:
        with Network(["p"], link=Link(rate_mbit=100)):
            pass
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return f"cannot create a network namespace with a shaped veth link: {exc}"
    return None


def netem_available() -> bool:
    """Whether tc can add a netem qdisc (delay/jitter); some kernels are built without ``sch_netem``."""
    if shutil.which("tc") is None or os.geteuid() != 0:
        return False
    name = f"{PREFIX_ROOT}{os.getpid()}{_letters(next(_counter))}-netem"
    if _run("ip", "netns", "add", name, check=False).returncode != 0:
        return False
    try:
        return _run("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
                    check=False).returncode == 0
    finally:
        _run("ip", "netns", "del", name, check=False)


def relay_binary() -> Path:
    """``taprelay`` compiled from its source next to this file (once per source version, in a cache directory);
    RuntimeError with the reason where it cannot be."""
    source = RELAY_SOURCE.read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "crystalperf-bench"
    binary = cache / f"taprelay-{hashlib.sha256(source).hexdigest()[:16]}"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("a delay without netem needs a C compiler for bench/cluster/taprelay.c (apt-get install gcc)")
    cache.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f"{binary.name}.{os.getpid()}.tmp")
    done = _run(compiler, "-O2", "-Wall", "-o", str(partial), str(RELAY_SOURCE), check=False, timeout=120)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"cannot compile {RELAY_SOURCE}: {done.stderr.strip()[-500:]}")
    os.replace(partial, binary)
    return binary


def relay_available() -> str | None:
    """None when this machine can build relayed (TAP) links, else why not."""
    if not Path("/dev/net/tun").exists():
        return "no /dev/net/tun (the tun module) for TAP devices"
    try:
        relay_binary()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None


def host_cpus(hosts: int, per_host: int) -> list[str]:
    """A CPU list (taskset's form) for each of ``hosts`` hosts, ``per_host`` CPUs each and none shared: pinned to
    them, a host's processes (and all they start: affinity is inherited) run as on a machine of their own.
    Without it every host's threads share every CPU, and one host's threads wait for another's, which no real
    cluster of separate machines does."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < hosts * per_host:
        raise ValueError(f"{hosts} hosts of {per_host} CPUs each need {hosts * per_host} CPUs; this process may "
                         f"use {len(available)}")
    return [",".join(str(c) for c in available[i * per_host:(i + 1) * per_host]) for i in range(hosts)]


def pinned(argv: Sequence[str], cpus: str | None) -> list[str]:
    """``argv`` run on the CPUs ``cpus`` (None: anywhere)."""
    return ["taskset", "-c", cpus, *argv] if cpus else list(argv)


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at ``address`` (in this process's namespace)."""
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


# Run before the real program, in a fresh interpreter that then becomes it: a process started here ends with the
# harness even when the harness is killed outright (PR_SET_PDEATHSIG survives exec, so the JVMs the launch scripts
# exec keep it). Not a ``preexec_fn``: that runs Python between fork and exec in a copy of a process with threads
# (py4j's, the samplers'), where a lock another thread held at the fork is never released and the start hangs.
_PDEATHSIG_EXEC = ("import ctypes, os, signal, sys\n"
                   "try:\n"
                   "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
                   "except (OSError, AttributeError):\n"
                   "    pass\n"
                   "os.execvp(sys.argv[1], sys.argv[1:])\n")


def with_pdeathsig(argv: Sequence[str]) -> list[str]:
    """``argv`` started through a fresh interpreter that asks to be killed with its parent, then execs it."""
    return [sys.executable, "-I", "-S", "-c", _PDEATHSIG_EXEC, *argv]


def _tagged_pids(prefix: str | None = None, relays: bool = False) -> dict[int, str]:
    """Processes whose environment carries ``CRYSTALPERF_CLUSTER`` (of ``prefix``, its link relays too with
    ``relays``; of any harness when None), with the tag's value."""
    found: dict[int, str] = {}
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(ENV_TAG.encode() + b"="):
                value = item.split(b"=", 1)[1].decode(errors="replace")
                if prefix is None or value == prefix or (relays and value == prefix + RELAY_TAG):
                    found[int(entry.name)] = value
                break
    return found


def _netns_names() -> list[str]:
    return [line.split()[0] for line in _run("ip", "netns", "list", check=False).stdout.splitlines() if line.split()]


def _link_names() -> list[str]:
    out = _run("ip", "-o", "link", "show", check=False).stdout
    return [m.group(1) for m in re.finditer(r"^\d+:\s+([^:@\s]+)", out, re.M)]


def leftovers(prefix: str) -> list[str]:
    """What of the network ``prefix`` still exists: namespaces, links, processes, /etc/netns entries."""
    found = [f"namespace {n}" for n in _netns_names() if n.startswith(prefix + "-")]
    # upper-case sequence letters, lower-case host names: one network's names never start another's
    own = re.compile(re.escape(prefix) + r"(br|[a-z][a-z0-9]{0,2}[hn])$")
    found += [f"link {n}" for n in _link_names() if own.match(n)]
    found += [f"process {pid}" for pid in _tagged_pids(prefix, relays=True)]
    if Path("/etc/netns").is_dir():
        found += [f"/etc/netns/{p.name}" for p in Path("/etc/netns").iterdir() if p.name.startswith(prefix + "-")]
    if CPU_CGROUP.is_dir():
        found += [f"cgroup {p}" for p in CPU_CGROUP.iterdir() if p.is_dir() and p.name.startswith(prefix + "-")]
    return found


def _kill_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _owner_alive(name: str) -> bool:
    match = _NAME.match(name)
    return match is None or Path(f"/proc/{match['pid']}").exists()


def _remove_stale() -> None:
    """Whatever a harness left when it was killed before it could clean up (its pid is gone)."""
    stale_pids = [pid for pid, tag in _tagged_pids().items() if not _owner_alive(tag)]
    _kill_all(stale_pids, signal.SIGKILL)
    for name in _netns_names():
        if _NAME.match(name) and not _owner_alive(name):
            for pid in _run("ip", "netns", "pids", name, check=False).stdout.split():
                _kill_all([int(pid)], signal.SIGKILL)
            _run("ip", "netns", "del", name, check=False)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)
    for name in _link_names():
        if _NAME.match(name) and not _owner_alive(name):
            _run("ip", "link", "del", name, check=False)
    if CPU_CGROUP.is_dir():
        for group in CPU_CGROUP.iterdir():
            if group.is_dir() and _NAME.match(group.name) and not _owner_alive(group.name):
                _remove_group(group)


def _remove_group(group: Path, settle_s: float = 10.0) -> None:
    """Remove a cgroup; processes still in it (a JVM exiting) go back to the root group first."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return  # left behind, listed by leftovers(): never fail a tear-down for it
        try:
            for pid in (group / "cgroup.procs").read_text().split():
                try:
                    (group.parent / "cgroup.procs").write_text(pid)
                except OSError:
                    pass  # it exited meanwhile
        except OSError:
            pass
        time.sleep(0.1)


def _close_all() -> None:
    with _lock:
        networks = list(_live.values())
    for network in networks:
        network.close()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _close_all()
    previous = _previous.get(signum)
    if callable(previous):
        previous(signum, frame)
    else:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_handlers() -> None:
    """atexit always; SIGTERM/SIGHUP handlers (only possible from the main thread) chaining to the ones they
    replace. SIGINT needs none: KeyboardInterrupt unwinds through the ``with`` block."""
    if _previous:
        return
    atexit.register(_close_all)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        _previous[signum] = signal.SIG_DFL
        if threading.current_thread() is threading.main_thread():
            current = signal.getsignal(signum)
            if current is not _on_signal and current is not signal.SIG_IGN:
                _previous[signum] = current if current is not None else signal.SIG_DFL
                signal.signal(signum, _on_signal)


class Network:
    """Hosts named ``names``, each in a namespace of its own on a link shaped as ``link`` (one ``Link`` for
    every host, or one per name). ``isolated=False``: every host is 127.0.0.1 in this namespace (no root, no
    shaping; ``link`` must be left out)."""

    def __init__(self, names: Sequence[str], link: Link | Mapping[str, Link] | None = None, *,
                 isolated: bool = True, relay: bool | None = None) -> None:
        if not names or len(set(names)) != len(names) or not all(re.fullmatch(r"[a-z][a-z0-9]{0,2}", n) for n in names):
            raise ValueError("names: distinct, 1-3 lower-case letters/digits each, starting with a letter")
        if len(names) > 250:
            raise ValueError("at most 250 hosts in one /24")
        links = dict(link) if isinstance(link, Mapping) else {n: link or Link() for n in names}
        if set(links) != set(names):
            raise ValueError("link: one Link per host name")
        if not isolated and any(lk != Link() for lk in links.values()):
            raise ValueError("links can be shaped only between namespaces (isolated=True)")
        self.isolated = isolated
        self.prefix = f"{PREFIX_ROOT}{os.getpid()}{_letters(next(_counter))}"
        self.bridge = f"{self.prefix}br"
        self.gateway = "127.0.0.1"
        self.hosts = [Host(n, "127.0.0.1", None, links[n]) for n in names]
        self._processes: list[subprocess.Popen[bytes]] = []
        self._files: list[IO[bytes]] = []
        self._open = False
        # relayed links: asked for, or needed for a delay this kernel's qdiscs cannot give
        self.relay = bool(relay) if relay is not None else (
            isolated and any(lk.delay_ms for lk in links.values()) and not netem_available())
        if self.relay and not isolated:
            raise ValueError("relayed links join namespaces (isolated=True)")
        if self.relay and any(lk.jitter_ms for lk in links.values()):
            raise ValueError("the TAP relay gives a delay, not jitter (jitter needs tc's netem)")
        self._relays: dict[str, subprocess.Popen[bytes]] = {}
        self._groups: list[Path] = []
        for host in self.hosts:
            if isolated and len(f"{self.prefix}{host.name}h") > 15:
                raise RuntimeError(f"interface name {self.prefix}{host.name}h is over 15 characters")

    # -- set-up ---------------------------------------------------------------------------------------------
    def __enter__(self) -> Network:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        _install_handlers()
        with _lock:
            _live[self.prefix] = self
        self._open = True
        try:
            if self.isolated:
                _remove_stale()
                self._create()
        except BaseException:
            self.close()
            raise

    def _subnet(self) -> int:
        out = _run("ip", "-o", "-4", "addr", "show", check=False).stdout
        used = {int(c) for c in re.findall(rf"inet 10\.{SUBNET_B}\.(\d+)\.\d+/", out)}
        for step in range(256):
            c = (os.getpid() + 7 * next(_counter) + step) % 254 + 1
            if c not in used:
                return c
        raise RuntimeError(f"no free 10.{SUBNET_B}.x.0/24 subnet")

    def _create(self) -> None:
        c = self._subnet()
        self.gateway = f"10.{SUBNET_B}.{c}.1"
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i, host in enumerate(self.hosts):
            host.address = f"10.{SUBNET_B}.{c}.{i + 2}"
            host.namespace = f"{self.prefix}-{host.name}"
            host.outer_if, host.inner_if = f"{self.prefix}{host.name}h", f"{self.prefix}{host.name}n"
            ns = ("ip", "netns", "exec", host.namespace)
            _run("ip", "netns", "add", host.namespace)
            if self.relay:
                self._start_relay(host)
            else:
                _run("ip", "link", "add", host.outer_if, "type", "veth", "peer", "name", host.inner_if)
            _run("ip", "link", "set", host.inner_if, "netns", host.namespace)
            _run("ip", "link", "set", host.outer_if, "master", self.bridge)
            _run("ip", "link", "set", host.outer_if, "up")
            _run(*ns, "ip", "addr", "add", f"{host.address}/24", "dev", host.inner_if)
            _run(*ns, "ip", "link", "set", host.inner_if, "up")
            _run(*ns, "ip", "link", "set", "lo", "up")
            self._shape(host, "add")

    def _start_relay(self, host: Host) -> None:
        """The host's two TAP devices, joined by a relay that holds back what the host receives by its delay."""
        environment = dict(os.environ)
        environment[ENV_TAG] = self.prefix + RELAY_TAG
        errors = tempfile.TemporaryFile()  # a file, not a pipe: a relay must never block on its own messages
        self._files.append(errors)
        proc = subprocess.Popen([str(relay_binary()), host.outer_if, host.inner_if, str(round(host.link.delay_ms * 1000))],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=environment,
                                start_new_session=True)
        self._relays[host.name] = proc
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":
            proc.wait(timeout=10)
            errors.seek(0)
            raise RuntimeError(f"taprelay for {host.name} did not start: {errors.read().decode(errors='replace')}")
        # A wire is not late because its hosts are busy: at normal priority the relay shares the CPUs the pinned
        # hosts keep busy and a frame may wait for one. Real-time priority lets it run at once; it spends little
        # CPU (a few syscalls per frame). (The Flink round-trip runs took the same time either way.)
        try:
            os.sched_setscheduler(proc.pid, os.SCHED_FIFO, os.sched_param(RELAY_PRIORITY))
        except (OSError, AttributeError):
            pass  # not permitted here: the delay then also holds the relay's waits for a CPU

    def _shape(self, host: Host, verb: str) -> None:
        """The rate on both ends of the host's pair; the delay (netem, parent of the rate's bucket; or the relay)
        on the outer end only, so that a round trip to the host gains ``delay_ms`` once."""
        link = host.link
        assert host.namespace is not None
        inside = ("ip", "netns", "exec", host.namespace)
        relay = self._relays.get(host.name)
        if relay is not None and relay.stdin is not None:
            relay.stdin.write(f"{round(link.delay_ms * 1000)}\n".encode())
            relay.stdin.flush()
        if link.rate_mbit is None and (not link.delay_ms or relay is not None):
            return
        tbf = (["tbf", "rate", f"{link.rate_mbit:g}mbit", "burst", str(tbf_burst_bytes(link.rate_mbit)),
                "latency", "100ms"] if link.rate_mbit is not None else [])
        if link.delay_ms and relay is None:
            netem = ["netem", "delay", f"{link.delay_ms:g}ms"] + ([f"{link.jitter_ms:g}ms"] if link.jitter_ms else [])
            done = _run("tc", "qdisc", verb, "dev", host.outer_if, "root", "handle", "1:", *netem, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"delay/jitter need tc's netem (kernel module sch_netem), which failed here: "
                                   f"{done.stderr.strip()}")
            if tbf:
                _run("tc", "qdisc", verb, "dev", host.outer_if, "parent", "1:", "handle", "2:", *tbf)
        elif tbf:
            _run("tc", "qdisc", verb, "dev", host.outer_if, "root", "handle", "1:", *tbf)
        if tbf:
            _run(*inside, "tc", "qdisc", verb, "dev", host.inner_if, "root", "handle", "1:", *tbf)

    # -- use ------------------------------------------------------------------------------------------------
    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def links(self) -> str:
        """``<address>: <link>`` for every host, ``; ``-separated (``10.213.7.2: rate=50mbit; ...``): what a
        trace records as the link each host used."""
        return "; ".join(f"{h.address}: {h.link.describe()}" for h in self.hosts)

    def set_rate(self, rate_mbit: float) -> None:
        """Re-shape every host's link to ``rate_mbit`` (same delay), with the processes running."""
        if not self._open or not self.isolated:
            raise RuntimeError("only a running isolated network can be re-shaped")
        for host in self.hosts:
            old = host.link
            host.link = Link(rate_mbit, old.delay_ms, old.jitter_ms)
            # tc "change" needs the same qdisc kinds in place: an unshaped link gets its qdiscs added instead
            self._shape(host, "change" if old.rate_mbit is not None else "add")

    def set_delay(self, delay_ms: float) -> None:
        """Give every host's link a one-way delay of ``delay_ms`` on what it receives (same rate), with the
        processes running: relayed links only (a netem qdisc would have to be rebuilt under the rate's)."""
        if not self._open or not self.relay:
            raise RuntimeError("only a running network with relayed links (relay=True) can change its delay")
        for host in self.hosts:
            old = host.link
            host.link = Link(old.rate_mbit, delay_ms, 0.0)
            self._shape(host, "change")

    def cpu_quota_group(self, host: Host, cores: float) -> Path:
        """A cgroup v1 ``cpu`` group that lets its processes use ``cores`` CPUs' worth of time (``cpu.cfs_quota_us``
        over a 100 ms period): the host's CPUs, for what ``popen(..., cgroups=[group])`` starts. Removed by
        ``close()``."""
        if not self._open:
            raise RuntimeError("the network is not running")
        if cores <= 0:
            raise ValueError("cores must be positive")
        group = CPU_CGROUP / f"{self.prefix}-{host.name}"
        group.mkdir(exist_ok=True)
        self._groups.append(group)
        (group / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(round(cores * CFS_PERIOD_US)))
        return group

    def popen(self, argv: Sequence[str], *, host: Host | None = None, env: Mapping[str, str] | None = None,
              log: Path | None = None, cwd: Path | None = None, cgroups: Sequence[Path] = ()) -> subprocess.Popen[bytes]:
        """Start ``argv`` in ``host``'s namespace (None: this one) and in ``cgroups``, tagged with the network's
        prefix, output to ``log``; it is stopped by ``close()`` with everything it started."""
        if not self._open:
            raise RuntimeError("the network is not running")
        command = list(argv)
        if host is not None and host.namespace is not None:
            # in a cgroup, the namespace is entered without a fresh /sys: the process sees its cgroup's limits
            enter = (["nsenter", f"--net=/run/netns/{host.namespace}"] if cgroups
                     else ["ip", "netns", "exec", host.namespace])
            command = [*enter, *command]
        if cgroups:
            from bench.fidelity.machine import in_cgroups

            command = in_cgroups(command, list(cgroups))
        environment = dict(os.environ if env is None else env)
        environment[ENV_TAG] = self.prefix
        out: IO[bytes] | int = subprocess.DEVNULL
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            out = log.open("ab")
            self._files.append(out)
        proc = subprocess.Popen(with_pdeathsig(command), env=environment, stdout=out, stderr=subprocess.STDOUT,
                                cwd=cwd, stdin=subprocess.DEVNULL, start_new_session=True)
        self._processes.append(proc)
        return proc

    def processes(self) -> dict[int, str]:
        """The live processes of this network (those ``popen`` started and their descendants), with command
        lines."""
        found = {}
        for pid in _tagged_pids(self.prefix):
            try:
                found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                pass
        return found

    # -- tear-down ------------------------------------------------------------------------------------------
    def stop_processes(self, grace_s: float = 10.0) -> None:
        """SIGTERM to every process of the network (those started and all they started), SIGKILL to those
        still there after ``grace_s``."""
        started = [p.pid for p in self._processes if p.poll() is None]
        _kill_all(sorted(set(started) | set(_tagged_pids(self.prefix))), signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            for proc in self._processes:
                proc.poll()
            if not any(_alive(pid) for pid in _tagged_pids(self.prefix)):
                break
            time.sleep(0.1)
        # Twice: a process forked between the scan and the kill (a worker relaunching an executor) is caught by
        # the second pass; a process in a namespace has no way out of it but the namespace's own pid list.
        for _ in range(2):
            pids = set(_tagged_pids(self.prefix))
            for host in self.hosts:
                if host.namespace is not None and host.namespace in _netns_names():
                    pids |= {int(p) for p in _run("ip", "netns", "pids", host.namespace, check=False).stdout.split()}
            _kill_all(sorted(pids), signal.SIGKILL)
            for proc in self._processes:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            time.sleep(0.1)
        for f in self._files:
            f.close()
        self._files.clear()

    def _stop_relays(self) -> None:
        """The relays end with their stdin (their devices with them); SIGKILL to one that does not."""
        for proc in self._relays.values():
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._relays.clear()

    def close(self) -> None:
        """Stop every process, then remove the links, the bridge and the namespaces; safe to call twice."""
        if not self._open:
            return
        self._open = False
        try:
            self.stop_processes()
        finally:
            if self.isolated:
                # Deleting the outer end deletes the pair at once; deleting only the namespace would leave the
                # pair to vanish asynchronously, after this returns.
                self._stop_relays()
                for host in self.hosts:
                    _run("ip", "link", "del", host.outer_if, check=False)
                    if host.namespace is not None:
                        _run("ip", "netns", "del", host.namespace, check=False)
                        shutil.rmtree(f"/etc/netns/{host.namespace}", ignore_errors=True)
                _run("ip", "link", "del", self.bridge, check=False)
            for group in self._groups:
                _remove_group(group)
            self._groups.clear()
            with _lock:
                _live.pop(self.prefix, None)
