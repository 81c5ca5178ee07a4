"""Python call-stack sampling with bounded memory, and merging of sample tables.

Every integration needs Python stacks somewhere (PySpark workers, the Keras training loop, PyFlink
UDF workers), and every distributed one needs to merge the samples of several processes into one
trace. Both live here, framework-free.

The sampler reads ``sys._current_frames()`` from a daemon thread every ``interval_s``; each stack is
aggregated at once into (key, time bucket, stack) -> count, so memory grows with the number of
distinct stacks, not with time; past ``max_rows`` distinct rows new ones are counted as dropped.

Each sample carries the thread's state (trace schema 1.2): ``runnable`` when the thread's CPU time
(``/proc/self/task/<native id>/stat``: utime + stime) advanced since its previous sample, else
``waiting``; ``""`` where /proc is missing. A stack's state is part of its identity. A waiting thread's
stack starts with the ``kernel.*`` frame of the system call it is blocked in, where Linux shows it
(:mod:`crystalperf.core.syscalls`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType

from crystalperf.core import trace as tr
from crystalperf.core.syscalls import KERNEL_MODULE, BlockedCalls

log = logging.getLogger(__name__)

# Decides which operation/task a thread's sample belongs to at the moment it is taken; None skips it.
KeyFunction = Callable[[int, str], "tr.SampleKey | None"]


def _frame_identity(frame: FrameType) -> tuple[str, str, int]:
    code = frame.f_code
    module = frame.f_globals.get("__name__", "") if frame.f_globals else ""
    qualname = getattr(code, "co_qualname", code.co_name)
    name = f"{module}.{qualname}" if module else qualname
    # The function's first line, not the current line: one frame per function keeps the table
    # small, and the source locator finds the enclosing function from any line inside it.
    return name, code.co_filename, code.co_firstlineno


def native_id_of_pthread(ident: int) -> int | None:
    """The Linux thread id of a live thread from its pthread handle (Python's thread ident), for threads started
    outside the threading module. The thread's CPU clock id encodes it (the kernel's ABI for per-thread CPU
    clocks: ``~tid << 3 | 6``)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        clock = time.pthread_getcpuclockid(ident)
    except (OSError, AttributeError, OverflowError, ValueError):
        return None
    if clock & 7 != 6:
        return None
    tid = ~(clock >> 3)
    return tid if tid > 0 else None


class ThreadStates:
    """Whether each sampled thread ran since its previous sample, from its CPU time as Linux counts it.

    One small read per sampled thread per sample. The CPU time is counted in clock ticks (10 ms on most
    kernels), so a thread that ran for less than a tick between two samples may read as waiting. A thread
    sampled for the first time, and one whose CPU time did not advance while the kernel shows it in
    uninterruptible sleep (``D``: blocked on the disk, page faults of a mapped file), takes the kernel's
    scheduler state: ``R`` and ``D`` are runnable, because a thread reading from a slow disk is using the
    disk, not waiting for other work.
    """

    def __init__(self, task_dir: str = "/proc/self/task") -> None:
        self.task_dir = task_dir
        self.available = os.path.isdir(task_dir)
        self._cpu: dict[int, int] = {}  # native thread id -> CPU ticks at its previous sample
        self.calls = BlockedCalls(os.path.dirname(task_dir.rstrip("/")))

    def blocked_in(self, native_id: int | None) -> str | None:
        """For a thread found waiting: the ``kernel.*`` frame of the call it is blocked in, when known."""
        return self.calls.frame(native_id) if native_id is not None else None

    def _read(self, native_id: int) -> tuple[int, bytes] | None:
        try:
            fd = os.open(f"{self.task_dir}/{native_id}/stat", os.O_RDONLY)
        except OSError:
            return None
        try:
            data = os.read(fd, 4096)
        except OSError:
            return None
        finally:
            os.close(fd)
        # "pid (comm) S ...": comm may hold spaces and parentheses, so split after the last ')'
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) < 13:
            return None
        return int(fields[11]) + int(fields[12]), fields[0]  # utime + stime (fields 14, 15), state (field 3)

    def state(self, native_id: int | None) -> str:
        """The thread's state now: runnable, waiting, or "" when it cannot be known."""
        if not self.available or native_id is None:
            return ""
        read = self._read(native_id)
        if read is None:
            return ""
        cpu, sched = read
        previous = self._cpu.get(native_id)
        self._cpu[native_id] = cpu
        if previous is not None and cpu > previous:
            return tr.THREAD_RUNNABLE
        return tr.THREAD_RUNNABLE if sched in (b"R", b"D") else tr.THREAD_WAITING

    def keep_only(self, native_ids: Iterable[int | None]) -> None:
        """Forget threads that are gone, so the memory stays bounded by the live threads."""
        alive = set(native_ids)
        for gone in [n for n in self._cpu if n not in alive]:
            del self._cpu[gone]


class SampleTable:
    """Interned frames/stacks/keys and aggregated counts: a StackSamples under construction."""

    def __init__(self, origin: float, bucket_s: float = 1.0, interval_s: float = 0.1, max_rows: int = 200_000) -> None:
        self.origin = origin
        self.bucket_s = bucket_s
        self.interval_s = interval_s
        self.max_rows = max_rows
        self.frames: list[tr.Frame] = []
        self._frame_ids: dict[tuple[str, str | None, int | None, str], int] = {}
        self.stacks: list[list[int]] = []
        self.states: list[str] = []  # per stack: the thread state it was sampled in ("" unknown)
        self._stack_ids: dict[tuple[tuple[int, ...], str], int] = {}
        self.keys: list[tr.SampleKey] = []
        self._key_ids: dict[tuple[str, str | None, str | None], int] = {}
        self.rows: dict[tuple[int, int, int], int] = {}
        self.dropped = 0
        self._lock = threading.Lock()

    def frame_id(self, name: str, file: str | None, line: int | None, language: str = "python",
                 module: str | None = None) -> int:
        ident = (name, file, line, language)
        found = self._frame_ids.get(ident)
        if found is None:
            found = self._frame_ids[ident] = len(self.frames)
            self.frames.append(tr.Frame(name=name, file=file, line=line, language=language,  # type: ignore[arg-type]
                                        module=module))
        return found

    def stack_id(self, frame_ids: Iterable[int], state: str = "") -> int:
        """The id of a stack sampled in a thread state: the same frames in two states are two stacks."""
        frames = tuple(frame_ids)
        found = self._stack_ids.get((frames, state))
        if found is None:
            found = self._stack_ids[(frames, state)] = len(self.stacks)
            self.stacks.append(list(frames))
            self.states.append(state)
        return found

    def key_id(self, key: tr.SampleKey) -> int:
        ident = (key.operation, key.task, key.thread)
        found = self._key_ids.get(ident)
        if found is None:
            found = self._key_ids[ident] = len(self.keys)
            self.keys.append(key)
        return found

    def add(self, key: tr.SampleKey, stack: int, when: float, count: int = 1) -> None:
        bucket = max(0, int((when - self.origin) / self.bucket_s))
        with self._lock:
            row = (self.key_id(key), bucket, stack)
            if row in self.rows:
                self.rows[row] += count
            elif len(self.rows) < self.max_rows:
                self.rows[row] = count
            else:
                self.dropped += count

    def to_samples(self) -> tr.StackSamples:
        with self._lock:
            items = sorted(self.rows.items())
            return tr.StackSamples(
                interval_s=self.interval_s, bucket_s=self.bucket_s, origin=self.origin,
                frames=list(self.frames), stacks=[list(s) for s in self.stacks], keys=list(self.keys),
                states=list(self.states) if any(self.states) else [],
                key=[k for (k, _, _), _ in items], bucket=[b for (_, b, _), _ in items],
                stack=[s for (_, _, s), _ in items], count=[c for _, c in items], dropped=self.dropped,
            )


class PythonStackSampler:
    """Samples the Python stacks of this process's threads on a daemon thread.

    ``key_for(thread_id, thread_name)`` maps a thread to the operation it works for right now (or None
    to ignore it). Never raises into the sampled program: its own errors are logged and it stops.
    """

    def __init__(
        self,
        key_for: KeyFunction,
        *,
        interval_s: float = 0.1,
        bucket_s: float = 1.0,
        max_depth: int = 64,
        max_rows: int = 200_000,
        origin: float | None = None,
        clock: Callable[[], float] = time.time,
        thread_states: ThreadStates | None = None,
    ) -> None:
        self.key_for = key_for
        self.interval_s = interval_s
        self.max_depth = max_depth
        self.clock = clock
        self.table = SampleTable(origin if origin is not None else clock(), bucket_s, interval_s, max_rows)
        self.samples_taken = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._own_ident: int | None = None
        self._code_frames: dict[object, int] = {}
        self.thread_states = thread_states if thread_states is not None else ThreadStates()
        # Thread ident -> kernel thread id, for threads whose ``threading.Thread.native_id`` is wrong: the
        # main thread of a forked process keeps its parent's (CPython 3.10-3.13; see register_thread).
        self.native_ids: dict[int, int] = {}

    def register_thread(self) -> None:
        """Record the calling thread's kernel id; call it from a forked process's main thread."""
        self.native_ids[threading.get_ident()] = threading.get_native_id()

    def start(self) -> PythonStackSampler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="crystalperf-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> tr.StackSamples:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 5 * self.interval_s))
        return self.table.to_samples()

    def _run(self) -> None:
        self._own_ident = threading.get_ident()
        next_at = self.clock()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # a sampler must never hurt the job it watches
                log.exception("crystalperf: Python stack sampler stopped")
                return
            next_at += self.interval_s
            delay = next_at - self.clock()
            if delay < 0:  # fell behind (a long GIL hold): skip missed ticks, don't burst
                next_at = self.clock()
                delay = self.interval_s
            self._stop.wait(delay)

    def _native_id(self, ident: int | None, thread: threading.Thread | None) -> int | None:
        found = self.native_ids.get(ident) if ident is not None else None
        if found is None and thread is not None:
            found = getattr(thread, "native_id", None)
        if found is None and ident is not None and thread is None:
            # A thread the threading module never saw (tf.data's threads running a generator): its pthread.
            found = native_id_of_pthread(ident)
        return found

    def sample_once(self) -> int:
        """Take one sample of every thread; returns how many stacks were recorded."""
        now = self.clock()
        threads = {t.ident: t for t in threading.enumerate()}
        recorded = 0
        for ident, frame in sys._current_frames().items():
            if ident == self._own_ident:
                continue
            thread = threads.get(ident)
            key = self.key_for(ident, thread.name if thread is not None else "")
            if key is None:
                continue
            native_id = self._native_id(ident, thread)
            state = self.thread_states.state(native_id)
            ids: list[int] = []
            # Python frames stop at the interpreter: what a blocked thread waits in is the kernel's to say.
            blocked = self.thread_states.blocked_in(native_id) if state == tr.THREAD_WAITING else None
            if blocked is not None:
                ids.append(self.table.frame_id(blocked, None, None, "unknown", KERNEL_MODULE))
            depth = 0
            current: FrameType | None = frame
            while current is not None and depth < self.max_depth:
                code = current.f_code
                fid = self._code_frames.get(code)
                if fid is None:
                    name, file, line = _frame_identity(current)
                    fid = self._code_frames[code] = self.table.frame_id(
                        name, file, line, "python", current.f_globals.get("__name__") if current.f_globals else None)
                ids.append(fid)
                current = current.f_back
                depth += 1
            self.table.add(key, self.table.stack_id(ids, state), now)
            recorded += 1
        self.thread_states.keep_only(self._native_id(i, t) for i, t in threads.items())
        self.samples_taken += 1
        return recorded


def merge_samples(parts: Iterable[tr.StackSamples], *, origin: float | None = None,
                  bucket_s: float | None = None) -> tr.StackSamples | None:
    """One sample table from several (processes, executors, TaskManagers), re-interned and re-bucketed
    to a common origin and bucket width."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    origin = min(p.origin for p in parts) if origin is None else origin
    bucket_s = bucket_s or max(p.bucket_s for p in parts)
    table = SampleTable(origin, bucket_s, min(p.interval_s for p in parts), max_rows=10**9)
    dropped = 0
    for part in parts:
        frame_map = [table.frame_id(f.name, f.file, f.line, f.language, f.module) for f in part.frames]
        stack_map = [table.stack_id((frame_map[i] for i in s), part.state_of(n)) for n, s in enumerate(part.stacks)]
        for key, bucket, stack, count in part.rows():
            when = part.origin + (bucket + 0.5) * part.bucket_s
            table.add(part.keys[key], stack_map[stack], when, count)
        dropped += part.dropped
    merged = table.to_samples()
    merged.dropped = dropped
    return merged
