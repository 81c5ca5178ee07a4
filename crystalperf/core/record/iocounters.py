"""Counters of the job's processes, read during the run: what the job really moved to and from storage and the
network, the CPU time its processes and their whole host used, and the limits in force on it (cgroup read and
write rates, the cores it may use). The analysis (``crystalperf.core.attribution.observed``) turns the series into
the bandwidth the job saw and the cores it shared, which what-ifs scale from instead of assuming the hardware.

Linux only (``/proc``); elsewhere every counter is ``None`` and the sampler records nothing. The Java hooks
(Spark listener, Flink reporter) read the same files the same way and write the same rows (``trace.IoSample``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from crystalperf.core import trace as tr
from crystalperf.core.record import budget as hook_budget
from crystalperf.core.record.cgroups import cpu_limit, disk_limits

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.25
# 4096 rows of 9 numbers: well under a megabyte however long the job runs (the sampler halves its
# resolution when full).
MAX_SAMPLES = 4096
# Rows between two walks of the process tree and two reads of the cgroup limits: walking the tree reads every
# child's files, and a process is seldom moved into a limited cgroup while it runs.
REWALK_ROWS = 8
LIMITS_REREAD_S = 1.0
# The longest interval a CPU budget may stretch the rows to: the bandwidth windows are a second long.
FLOOR_S = 1.0
_UNLIMITED = 0.0


def _proc_io(pid: int | str) -> tuple[int, int] | None:
    """read_bytes and write_bytes of one process (bytes that reached the storage device)."""
    try:
        text = Path(f"/proc/{pid}/io").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("read_bytes", "write_bytes"):
            values[key] = int(value)
    if len(values) != 2:
        return None
    return values["read_bytes"], values["write_bytes"]


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from the state on (the state is ``[0]``)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: the fields start after the last ')'
    return text[text.rfind(")") + 2:].split()


def _proc_cpu(pid: int | str) -> float | None:
    """CPU seconds (user + system) one process used so far (``/proc/<pid>/stat``; its children's are theirs)."""
    fields = _proc_stat(pid)
    try:
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS if fields is not None else None
    except (IndexError, ValueError):
        return None


def host_cpu() -> tuple[float, float, int] | None:
    """(busy, total) CPU seconds of the whole host since boot, summed over its CPUs, and how many CPUs it has
    online (``/proc/stat``: busy is all but idle and iowait)."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    try:
        values = [int(v) for v in lines[0].split()[1:]]
    except (IndexError, ValueError):
        return None
    if len(values) < 4 or not lines[0].startswith("cpu "):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    # guest time is already in user time (and guest_nice in nice)
    total = sum(values[:8])
    cpus = sum(1 for line in lines[1:] if line.startswith("cpu") and line[3:4].isdigit())
    return (total - idle) / _CLOCK_TICKS, total / _CLOCK_TICKS, max(1, cpus)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text()
            found += [int(c) for c in text.split()]
    except (OSError, ValueError):
        pass
    return found


def descendants(pid: int, limit: int = 512, prune: Callable[[int], bool] | None = None) -> list[int]:
    """The process and its descendants (bounded: a fork bomb must not stall the sampler); a descendant ``prune``
    says yes to is left out with its own descendants."""
    seen = [pid]
    i = 0
    while i < len(seen) and len(seen) < limit:
        seen += [c for c in _children(seen[i]) if c not in seen and (prune is None or not prune(c))]
        i += 1
    return seen[:limit]


# multiprocessing's own helpers, started beside a pool's workers: they keep count of semaphores and fork workers, and
# compute nothing of the job's
_MULTIPROCESSING_HELPERS = (b"from multiprocessing.resource_tracker import", b"from multiprocessing.forkserver import",
                            b"from multiprocessing.semaphore_tracker import")


def _is_helper(pid: int) -> bool:
    """Whether a process is crystalperf's own (``python -m crystalperf...``: a hook's analysis), one of
    multiprocessing's helpers, or on its way out (its memory, and so its command line, already gone)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    args = command.split(b"\0")
    return not command or any((a == b"-m" and b.startswith(b"crystalperf."))
                              or (a == b"-c" and b.lstrip().startswith(_MULTIPROCESSING_HELPERS))
                              for a, b in zip(args, args[1:], strict=False))


def _no_worker(pid: int) -> bool:
    """Gone, a zombie whose parent has not reaped it (its work, and what it was, are over), crystalperf's own, or a
    helper of multiprocessing's."""
    fields = _proc_stat(pid)
    return not fields or fields[0] in ("Z", "X") or _is_helper(pid)


def descendant_cpu(pid: int, limit: int = 512) -> dict[int, float]:
    """CPU seconds each live descendant of ``pid`` has used so far (``pid`` itself, crystalperf's own processes, such
    as a hook's analysis, and multiprocessing's resource tracker and fork server left out with what they started): a
    job's worker processes (multiprocessing pools) do its work there."""
    found: dict[int, float] = {}
    for child in descendants(pid, limit, prune=_no_worker)[1:]:
        cpu = _proc_cpu(child)
        if cpu is not None:
            found[child] = cpu
    return found


def network_bytes(pid: int | str = "self") -> tuple[int, int] | None:
    """Received and sent bytes on the non-loopback interfaces of the process's network namespace."""
    try:
        lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    except OSError:
        return None
    rx = tx = 0
    for line in lines:
        name, _, counters = line.partition(":")
        fields = counters.split()
        if name.strip() == "lo" or len(fields) < 9:
            continue
        rx += int(fields[0])
        tx += int(fields[8])
    return rx, tx


class _ProcessTreeIo:
    """Storage bytes of a process tree, accumulated per pid so that a child's exit never makes the total go
    down (its last reading stays counted)."""

    def __init__(self, pid: int, include_children: bool) -> None:
        self.pid = pid
        self.include_children = include_children
        self.last: dict[int, tuple[int, int]] = {}
        self.last_cpu: dict[int, float] = {}
        self.read = 0
        self.written = 0
        self.cpu = 0.0
        self.ok = False
        self.cpu_ok = False
        self.primed = False  # what runs at the first reading counts from then, a later child from its birth
        self.pids: list[int] | None = None

    def update(self, rewalk: bool = True) -> None:
        if rewalk or self.pids is None:
            self.pids = descendants(self.pid) if self.include_children else [self.pid]
        pids = self.pids
        for pid in pids:
            self._update_cpu(pid)
            now = _proc_io(pid)
            if now is None:
                continue
            self.ok = True
            before = self.last.get(pid)
            if before is None:
                # a process met for the first time: the root counts from the sampler's start, a child
                # (forked during the run, its counters starting at 0) from its birth
                before = now if pid == self.pid or not self.primed else (0, 0)
            self.read += max(0, now[0] - before[0])
            self.written += max(0, now[1] - before[1])
            self.last[pid] = now
        self.primed = True
        if len(self.last) + len(self.last_cpu) > 8 * len(pids) + 128:  # forget exited pids (what they used stays)
            alive = set(pids)
            self.last = {p: v for p, v in self.last.items() if p in alive}
            self.last_cpu = {p: v for p, v in self.last_cpu.items() if p in alive}

    def _update_cpu(self, pid: int) -> None:
        now = _proc_cpu(pid)
        if now is None:
            return
        self.cpu_ok = True
        before = self.last_cpu.get(pid)
        if before is None:
            before = now if pid == self.pid or not self.primed else 0.0
        self.cpu += max(0.0, now - before)
        self.last_cpu[pid] = now


class IoCounterSampler:
    """Reads the counters of a process (and its descendants) every ``interval_s`` on a daemon thread.

    Memory is bounded: past ``max_samples`` rows every other row is dropped and the interval doubles. The process
    tree is re-walked every ``REWALK_ROWS`` rows (walking it reads every process's stat file); the cgroup limits,
    a few small files, at most every ``LIMITS_REREAD_S`` so that a limit set while the job runs shows within its
    bandwidth window. Both are re-read for the last row. The thread's CPU time
    counts as the hook's (part ``counters``); under a ``budget`` the interval stretches while the hook uses more
    than its share, never past ``FLOOR_S``. Failures are logged once and stop nothing but the sampler."""

    def __init__(self, source: str, *, pid: int | None = None, interval_s: float = DEFAULT_INTERVAL_S,
                 max_samples: int = MAX_SAMPLES, include_children: bool = True,
                 budget: hook_budget.CpuBudget | None = None) -> None:
        self.source = source
        self.pid = pid or os.getpid()
        self.interval_s = interval_s
        self.max_samples = max(8, max_samples)
        self.host = socket.gethostname()
        self._tree = _ProcessTreeIo(self.pid, include_children)
        self._net0: tuple[int, int] | None = None
        self._host0: tuple[float, float, int] | None = None
        self._rows: list[tr.IoSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._readings = 0
        self._limits: tuple[float | None, float | None] | None = None
        self._limits_read_at = 0.0
        self._cpu_limit: float | None = None
        self.pace = hook_budget.Pace(budget, interval_s, FLOOR_S)

    def sample_once(self, *, rewalk: bool = False) -> tr.IoSample | None:
        try:
            rewalk = rewalk or self._readings % REWALK_ROWS == 0
            self._readings += 1
            self._tree.update(rewalk)
            net = network_bytes(self.pid)
            if net is not None and self._net0 is None:
                self._net0 = net
            now = time.monotonic()
            if self._limits is None or now - self._limits_read_at >= LIMITS_REREAD_S or self._stop.is_set():
                self._limits = disk_limits(self.pid)
                self._cpu_limit = cpu_limit(self.pid)
                self._limits_read_at = now
            read_limit, write_limit = self._limits
            host = host_cpu()
            if host is not None and self._host0 is None:
                self._host0 = host
            row = tr.IoSample(
                t=time.time(), source=self.source, host=self.host,
                storage_read_bytes=float(self._tree.read) if self._tree.ok else None,
                storage_write_bytes=float(self._tree.written) if self._tree.ok else None,
                network_rx_bytes=float(max(0, net[0] - self._net0[0])) if net and self._net0 else None,
                network_tx_bytes=float(max(0, net[1] - self._net0[1])) if net and self._net0 else None,
                disk_read_limit=read_limit, disk_write_limit=write_limit,
                process_cpu_s=self._tree.cpu if self._tree.cpu_ok else None,
                host_cpu_busy_s=max(0.0, host[0] - self._host0[0]) if host and self._host0 else None,
                host_cpu_s=max(0.0, host[1] - self._host0[1]) if host and self._host0 else None,
                host_cpus=host[2] if host else None,
                cpu_limit=self._cpu_limit,
            )
        except Exception as exc:  # never the job's problem
            log.debug("crystalperf: I/O counters unreadable: %s", exc)
            return None
        with self._lock:
            self._rows.append(row)
            if len(self._rows) >= self.max_samples:
                self._rows = self._rows[:-1:2] + self._rows[-1:]
                self.interval_s *= 2
        return row

    def start(self) -> IoCounterSampler:
        if self._thread is None:
            self.sample_once()
            self._thread = threading.Thread(target=self._run, name="crystalperf-io-counters", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        wait = self.interval_s
        while not self._stop.wait(wait):
            with hook_budget.PROCESS.own_thread("counters"):
                self.sample_once()
            wait = max(self.interval_s, self.pace.next())

    def stop(self) -> list[tr.IoSample]:
        """Stops the thread (without waiting for more than one interval), takes a last reading and returns
        every row."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=min(2.0, self.interval_s + 1.0))
        self.sample_once(rewalk=True)  # the last row counts every process alive now
        return self.samples()

    def samples(self) -> list[tr.IoSample]:
        with self._lock:
            return list(self._rows)
