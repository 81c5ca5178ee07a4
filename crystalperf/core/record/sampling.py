"""Python call-stack sampling with bounded memory, and merging of sample tables.

Every integration needs Python stacks somewhere (PySpark workers, the Keras training loop, PyFlink
UDF workers), and every distributed one needs to merge the samples of several processes into one
trace. Both live here, framework-free.

The sampler reads every thread's stack from a daemon thread every ``interval_s`` (:func:`current_stacks`); each
stack is aggregated at once into (key, time bucket, stack) -> count, with frames, stacks and keys interned once and
referred to by id. Memory is bounded in bytes (:class:`SampleTable`): past the budget new stacks fold into an
``[other]`` stack, new tasks into their operation's ``[other]`` task and time buckets merge, so the count of
samples per operation stays exact and only their detail is lost (counted in ``dropped``). Names and file
names are made valid UTF-8 and bounded in length as they are sampled.

Each sample carries the thread's state (trace schema 1.2): ``runnable`` when the thread's CPU time
(``/proc/self/task/<native id>/stat``: utime + stime) advanced since its previous sample, else
``waiting``; ``""`` where /proc is missing. A stack's state is part of its identity. A waiting thread's
stack starts with the ``kernel.*`` frame of the system call it is blocked in, where Linux shows it
(:mod:`crystalperf.core.record.syscalls`).
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from types import CodeType, FrameType
from typing import Any

from crystalperf.core import trace as tr
from crystalperf.core.record import budget as hook_budget
from crystalperf.core.record.sampletable import (
    SampleTable,
    max_bytes_from_env,
)
from crystalperf.core.record.syscalls import KERNEL_MODULE, BlockedCalls

log = logging.getLogger(__name__)

# Decides which operation/task a thread's sample belongs to at the moment it is taken; None skips it.
KeyFunction = Callable[[int, str], "tr.SampleKey | None"]


# A captured stack, innermost frame first, flat: the code of a frame, then its module's globals, then the next
# frame's (one list per thread, no object per frame).
CapturedStack = list[Any]


def stack_frames(stack: CapturedStack, limit: int | None = None) -> Iterator[tuple[CodeType, dict[str, Any]]]:
    """The (code, module globals) of a captured stack's frames, innermost first; at most ``limit`` of them."""
    end = None if limit is None else 2 * limit
    return zip(islice(stack, 0, end, 2), islice(stack, 1, end, 2), strict=True)


# crystalperf's own files (the package's folder)
_HOOK_CODE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def in_hook_code(stack: CapturedStack) -> bool:
    """A captured stack with a frame of crystalperf's own code: the hook at work on that thread (recording a call,
    ending a step), whose time is the hook's cost, counted as such, not the program's."""
    return any(code.co_filename.startswith(_HOOK_CODE) for code, _ in stack_frames(stack))


def current_stacks(max_depth: int) -> dict[int, CapturedStack]:
    """Every thread's Python stack now, innermost frame first, at most ``max_depth`` frames each, keyed by thread
    ident: the code and module globals of each frame (:func:`stack_frames`), never the frame objects.

    The garbage collector is paused while the frames are walked. ``f_back`` makes the caller's frame object
    when it has none, and that allocation may start a collection; a collection runs finalisers, and a finaliser
    that releases the GIL (py4j's send on a socket) lets the walked thread return from the very frame being
    wrapped. On CPython 3.11 the new frame object then points into freed memory: a walk read a dict, a bool or
    a ModuleSpec for a frame's attribute, or crashed the process, in a third of PyFlink loopback jobs walked
    5,000 times a second (``bench/frame_walk_stress.py``), and once in CI. With the pause: none."""
    if max_depth < 1:
        return {}
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        captured: dict[int, CapturedStack] = {}
        for ident, frame in sys._current_frames().items():
            stack: CapturedStack = []
            current: FrameType | None = frame
            while current is not None and len(stack) < 2 * max_depth:
                stack.append(current.f_code)
                stack.append(current.f_globals)
                current = current.f_back
            captured[ident] = stack
        return captured
    finally:
        if collecting:
            gc.enable()


def _frame_identity(code: CodeType, module_globals: dict[str, Any] | None) -> tuple[str, str, int, str | None]:
    module = module_globals.get("__name__", "") if module_globals else ""
    if not isinstance(module, str):  # a module may set __name__ to anything
        module = ""
    qualname = getattr(code, "co_qualname", code.co_name)
    name = f"{module}.{qualname}" if module else qualname
    # The function's first line, not the current line: one frame per function keeps the table
    # small, and the source locator finds the enclosing function from any line inside it.
    return name, code.co_filename, code.co_firstlineno, module or None


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


class PythonStackSampler:
    """Samples the Python stacks of this process's threads on a daemon thread.

    ``key_for(thread_id, thread_name)`` maps a thread to the operation it works for right now (or None
    to ignore it); it may look at the thread's stack in :attr:`captured` (``capture_depth`` frames deep). Never
    raises into the sampled program: its own errors are logged and it stops. Its table holds at most
    ``max_bytes`` (default ``CRYSTALPERF_SAMPLER_MAX_BYTES`` or 16 MiB) and stacks of at most ``max_depth``
    frames, the innermost ones.

    Its thread's CPU time counts as the hook's (``crystalperf.core.record.budget.PROCESS``, part ``sampler``);
    under a ``budget`` its interval stretches while the hook uses more than its share of the cores, never past
    ``floor_s`` (default: the bucket width, a sample per bucket). With ``idle_max_s``, until a round first finds a
    thread to sample each empty round doubles the wait, up to ``idle_max_s``; from then on the interval holds, so
    the on-and-off work of a thread that was found is sampled as often as configured. For a caller whose threads
    of interest are there from the start or never (TensorFlow's input threads over a profiled window). For one
    whose work comes and goes, ``idle_rounds`` too: the waits double only after that many empty rounds in a row,
    and a round that finds a thread brings the interval back (a pause between two bursts of work keeps it).
    """

    def __init__(
        self,
        key_for: KeyFunction,
        *,
        interval_s: float = 0.1,
        bucket_s: float = 1.0,
        max_depth: int = 64,
        max_rows: int = 200_000,
        max_bytes: int | None = None,
        origin: float | None = None,
        clock: Callable[[], float] = time.time,
        thread_states: ThreadStates | None = None,
        capture_depth: int | None = None,
        budget: hook_budget.CpuBudget | None = None,
        floor_s: float | None = None,
        on_round: Callable[[], None] | None = None,
        idle_max_s: float | None = None,
        idle_rounds: int | None = None,
    ) -> None:
        self.key_for = key_for
        self.interval_s = interval_s
        self.max_depth = max_depth
        # frames captured per thread: more than are recorded where the key function looks deeper
        self.capture_depth = max(max_depth, capture_depth or 0)
        self.clock = clock
        self.table = SampleTable(origin if origin is not None else clock(), bucket_s, interval_s, max_rows,
                                 max_bytes=max_bytes if max_bytes is not None else max_bytes_from_env(),
                                 max_depth=max_depth)
        self.samples_taken = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._own_ident: int | None = None
        self._code_frames: dict[object, int] = {}
        self.captured: dict[int, CapturedStack] = {}
        self.thread_states = thread_states if thread_states is not None else ThreadStates()
        # Thread ident -> kernel thread id, for threads whose ``threading.Thread.native_id`` is wrong: the
        # main thread of a forked process keeps its parent's (CPython 3.10-3.13; see register_thread).
        self.native_ids: dict[int, int] = {}
        self.pace = hook_budget.Pace(budget, interval_s, floor_s if floor_s is not None else bucket_s)
        self.on_round = on_round  # called on the sampler's thread after each round
        self.idle_max_s = idle_max_s
        self.idle_rounds = idle_rounds

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
        idle_wait: float | None = 0.0  # grows while no round has found a thread to sample; None once one has
        empty = 0  # rounds in a row that found nothing
        while not self._stop.is_set():
            try:
                with hook_budget.PROCESS.own_thread("sampler"):
                    recorded = self.sample_once()
                    if self.on_round is not None:
                        self.on_round()
            except Exception:  # a sampler must never hurt the job it watches
                log.exception("crystalperf: Python stack sampler stopped")
                return
            if recorded:
                interval, empty = self.pace.next(), 0
                idle_wait = None if self.idle_rounds is None else 0.0
            else:
                interval = self.pace.adapt()
                empty += 1
                if self.idle_max_s is not None and idle_wait is not None and empty > (self.idle_rounds or 0):
                    # nothing found is nothing thinned: the pace's count of planned rounds is not touched
                    idle_wait = interval = min(max(interval, self.idle_max_s), max(interval, 2 * idle_wait))
            next_at += interval
            delay = next_at - self.clock()
            if delay < 0:  # fell behind (a long GIL hold): skip missed ticks, don't burst
                next_at = self.clock()
                delay = interval
            self._stop.wait(delay)

    def _native_id(self, ident: int | None, thread: threading.Thread | None) -> int | None:
        found = self.native_ids.get(ident) if ident is not None else None
        if found is None and thread is not None:
            found = getattr(thread, "native_id", None)
        if found is None and ident is not None and thread is None:
            # A thread the threading module never saw (tf.data's threads running a generator): its pthread.
            found = native_id_of_pthread(ident)
        return found

    def sample_once(self, stacks: dict[int, CapturedStack] | None = None) -> int:
        """Take one sample of every thread (``stacks``: those :func:`current_stacks` just captured, else they are
        captured here); returns how many stacks were recorded. While it runs, :attr:`captured` holds the
        stacks, for a key function that decides by what a thread is running."""
        now = self.clock()
        threads = {t.ident: t for t in threading.enumerate()}
        self.captured = stacks if stacks is not None else current_stacks(self.capture_depth)
        recorded = 0
        try:
            for ident, stack in self.captured.items():
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
                for code, module_globals in stack_frames(stack, self.max_depth):
                    fid = self._code_frames.get(code)
                    if fid is None:
                        name, file, line, module = _frame_identity(code, module_globals)
                        fid = self.table.frame_id(name, file, line, "python", module)
                        if fid != self.table.other_frame_id:  # what the budget left out is not cached: bounded too
                            self._code_frames[code] = fid
                    ids.append(fid)
                self.table.add(key, self.table.stack_id(ids, state), now)
                recorded += 1
        finally:
            self.captured = {}
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
    table = SampleTable(origin, bucket_s, min(p.interval_s for p in parts))
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
