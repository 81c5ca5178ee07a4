"""Work done on a second core, in a forked copy of the analysing process.

An analysis is pure Python: one core, whatever the machine has. Its two longest parts after the profile do not
depend on each other (the predictions, and the report's entry for every operation; later the HTML page and
the JSON document), so where the machine has a second core a forked child does one while the process does the
other. The child starts with everything the process built (no copy is made up front: the pages are shared
until written) and hands back only its result, pickled through a pipe: a few kilobytes of predictions, a few
megabytes of HTML.

The result is the one the process would have got alone, or the work is done in the process after all: nothing
here changes what an analysis says. The child is used only where forking is safe and pays:

- a Linux-like system with ``os.fork`` and at least two CPUs this process may run on;
- no other Python thread running (a notebook's kernel, a hook's sampler): a thread holding a lock when the
  process forks would leave that lock held forever in the child;
- the caller's work is large (a small analysis is faster alone than the fork costs), and the process is below
  ``FORK_MAX_RSS_BYTES`` (the child's writes copy pages: a big process could double);
- ``CRYSTALPERF_PARALLEL`` is not ``0``.

A child that fails, is killed, or stops making progress (no CPU time used for ``STALL_S``) is ended and its
work done in the process, as if there had been no child.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

PARALLEL_ENV = "CRYSTALPERF_PARALLEL"
# A child that uses no CPU for this long is stuck (a lock held at the fork): its work is done here instead.
STALL_S = 5.0
# Past this resident size the child's writes (reference counts touch most pages it reads) could take the
# machine's memory twice over; the work is done in the process.
FORK_MAX_RSS_BYTES = 1 << 30
# From this many operations an analysis's parts are worth a child (below it, the fork costs more than it saves).
MIN_OPERATIONS = 1000
_READ_CHUNK = 1 << 20
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resident_bytes() -> int | None:
    """The process's resident memory now (/proc/self/statm), or None where unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def can_fork() -> bool:
    """Whether a child may do work beside this process now (the conditions in the module's docstring, but size)."""
    if os.environ.get(PARALLEL_ENV, "").strip() == "0":
        return False
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return False
    if _available_cpus() < 2 or threading.active_count() != 1:
        return False
    resident = resident_bytes()
    return resident is not None and resident <= FORK_MAX_RSS_BYTES


def _cpu_ticks(pid: int) -> int | None:
    """The child's user + system CPU time so far, in clock ticks (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return None


def end_with(parent: int) -> None:
    """In a child: be killed when the process ``parent`` ends, so that a child never outlives it (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it ended before the request was made
        os._exit(1)


class Beside(Generic[T]):
    """``work`` started in a forked child where that is safe and worth it (``worth``), else left to ``result``.
    Use as a context manager: leaving the block ends a child whose result was not taken."""

    def __init__(self, work: Callable[[], T], *, worth: bool = True) -> None:
        self._work = work
        self._pid: int | None = None
        self._read: int | None = None
        if worth and can_fork():
            self._start()

    @property
    def forked(self) -> bool:
        return self._pid is not None

    def _start(self) -> None:
        read, write = os.pipe()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:  # no memory or process slot for a child: the work is done here
            log.debug("no child for the work beside the analysis: %s", exc)
            os.close(read)
            os.close(write)
            return
        if pid == 0:  # the child: never returns into the caller's code
            code = 1
            try:
                os.close(read)
                end_with(parent)
                if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
                    signal.signal(signal.SIGINT, signal.SIG_DFL)  # ^C ends the child; the process handles its own
                data = pickle.dumps(self._work(), protocol=pickle.HIGHEST_PROTOCOL)
                view = memoryview(data)
                while view:
                    view = view[os.write(write, view):]
                code = 0
            except BaseException:  # noqa: BLE001 - the process does the work itself and meets the error there
                pass
            finally:
                os._exit(code)
        os.close(write)
        self._pid, self._read = pid, read

    def result(self) -> T:
        """The work's result: the child's, or the work done here (where there was no child, or it failed)."""
        if self._pid is not None:
            data = self._collect()
            if data is not None:
                try:
                    return pickle.loads(data)  # noqa: S301 - our own child's bytes, through our own pipe
                except Exception as exc:  # noqa: BLE001
                    log.debug("the child's result could not be read: %s", exc)
        return self._work()

    def _collect(self) -> bytes | None:
        """The child's pickled result, or None when it failed or stalled (then it is ended)."""
        assert self._pid is not None and self._read is not None
        pid, read = self._pid, self._read
        chunks: list[bytes] = []
        ticks, progressed = _cpu_ticks(pid), time.monotonic()
        try:
            while True:
                ready, _, _ = select.select([read], [], [], 1.0)
                if ready:
                    chunk = os.read(read, _READ_CHUNK)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    progressed = time.monotonic()
                    continue
                now_ticks = _cpu_ticks(pid)
                if now_ticks != ticks:
                    ticks, progressed = now_ticks, time.monotonic()
                elif time.monotonic() - progressed > STALL_S:
                    log.warning("the analysis's child process made no progress for %.0f s: its work is done here",
                                STALL_S)
                    self._end()
                    return None
            _, status = os.waitpid(pid, 0)
            self._pid = None
        finally:
            self._close()
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            log.debug("the analysis's child process failed (status %#x): its work is done here", status)
            return None
        return b"".join(chunks)

    def _close(self) -> None:
        if self._read is not None:
            os.close(self._read)
            self._read = None

    def _end(self) -> None:
        if self._pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self._pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(self._pid, 0)
            self._pid = None
        self._close()

    def __enter__(self) -> Beside[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self._end()
