"""Samples PyFlink's Python workers where they run in the job's own Python process.

On a local mini cluster started from Python (the ``TableEnvironment`` / ``StreamExecutionEnvironment`` of a
PyFlink program) PyFlink runs its Python functions in *loopback* mode: the Beam SDK harness that executes
them is a set of threads of that program's process, not a process of the TaskManager. The reporter samples
JVM threads only, so the task thread of a Python operator just waits for the harness. :func:`configure`
(``crystalperf.integrations.flink.configure``) therefore starts this sampler in the process it runs in: every
``interval_s`` it takes the Python stack of each thread that is processing a Beam bundle right now (a frame
of ``SdkWorker.process_bundle`` on its stack; idle harness threads, gRPC and the program's own threads are
left out), with the thread's state, and the CPU time those threads used. It rewrites
``crystalperf-pyflink-workers.<pid>.json`` in the output directory while something changed, atomically
(:mod:`crystalperf.core.atomic`), at most every second and, for a large file, no more often than one second
per ``_BYTES_PER_FLUSH_S`` bytes; the assembler keys those samples to the job's Python operator (thread role
``python-worker``). Memory is bounded in bytes: the sample table's budget (``_MAX_BYTES``, or
``CRYSTALPERF_SAMPLER_MAX_BYTES``) and at most ``_MAX_CPU_BUCKETS`` CPU-time buckets (neighbours merge past
it, as the table's time buckets do).

The same process's I/O counters go into that file too (``io``: rows of ``crystalperf.core.trace.IoSample``,
source ``python:<pid>``, this process alone): the loopback workers' reads are this process's, and the
gateway JVM, whose reporter counts its own process and descendants, is this process's child, not its parent.

With ``python.execution-mode: thread`` the Python functions run on the task threads themselves, in the CPython
that pemja embeds in the TaskManager. The reporter then starts this sampler inside that interpreter
(:func:`start_embedded_sampler`, through pemja, once it samples a task thread calling into Python): it takes the
Python stacks of the threads running an embedded PyFlink operation (a frame of ``pyflink.fn_execution.embedded``)
and writes ``crystalperf-pyflink-workers.embedded-<pid>.json``, without CPU time or I/O counters (the task
threads' CPU time and the process's counters are the reporter's already).

Python workers started as separate processes (process mode: a cluster, or
``_python_worker_execution_mode=process``) are not sampled by this.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from crystalperf.core import atomic
from crystalperf.core import trace as tr
from crystalperf.core.record import budget as hook_budget
from crystalperf.core.record.hooks import guard
from crystalperf.core.record.iocounters import IoCounterSampler
from crystalperf.core.record.sampletable import MAX_BYTES_ENV, max_bytes_from_env
from crystalperf.core.record.sampling import CapturedStack, PythonStackSampler, current_stacks, stack_frames

log = logging.getLogger(__name__)

SPOOL_FORMAT = "crystalperf-flink-pyworkers"
# not "crystalperf-flink-…": the reporter's parts are found by that prefix
SPOOL_PREFIX = "crystalperf-pyflink-workers."
WORKER_ROLE = "python-worker"
# The harness runs a bundle here; a thread with this frame on its stack is doing the job's Python work.
_BUNDLE_MODULE = "apache_beam.runners.worker.sdk_worker"
_BUNDLE_FUNCTION = "process_bundle"
_MAX_BYTES = 8 * 1024 * 1024
_MAX_CPU_BUCKETS = 4096
_FLUSH_S = 1.0
# Without a bundle for this long the sampler looks this often (a sample per time bucket: what the analysis needs).
_IDLE_MAX_S = 1.0
# A spool file larger than this is not read (one the sampler wrote is far smaller: its table is bounded).
MAX_SPOOL_READ_BYTES = 256 * 1024 * 1024
# A file this large is rewritten at most once a second (the rewrite costs the whole file each time).
_BYTES_PER_FLUSH_S = 2 * 1024 * 1024

_lock = threading.Lock()
_samplers: dict[Path, WorkerSampler] = {}


# How far down a stack the bundle's frame is looked for (the UDF's own calls sit above it).
_BUNDLE_DEPTH = 256
# Thread mode: the task thread runs the operation's Python code from these modules (pemja calls into them).
_EMBEDDED_PACKAGE = "pyflink.fn_execution.embedded."
_EMBEDDED_MODULE = "pyflink.fn_execution.embedded.operation_utils"


def _in_bundle(stack: CapturedStack) -> bool:
    return any(code.co_name == _BUNDLE_FUNCTION and module_globals.get("__name__") == _BUNDLE_MODULE
               for code, module_globals in stack_frames(stack))


def _in_embedded_operation(stack: CapturedStack) -> bool:
    return any(str(module_globals.get("__name__", "")).startswith(_EMBEDDED_PACKAGE)
               for _code, module_globals in stack_frames(stack))


def _thread_cpu_s(ident: int) -> float | None:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, AttributeError, OverflowError, ValueError):
        return None


class WorkerSampler(PythonStackSampler):
    """A :class:`PythonStackSampler` of the threads that run Beam bundles, spooling to ``out_dir``."""

    def __init__(self, out_dir: Path, *, interval_s: float = 0.1, share: float | None = None,
                 embedded: bool = False) -> None:
        budget = hook_budget.CpuBudget(hook_budget.share_from_env() if share is None else share)
        # A program that runs no Python function (a SQL job's) has no bundle to sample for its whole life: after a
        # second of nothing the sampler looks once a second, back to its interval as soon as a bundle runs.
        super().__init__(self._key_for, interval_s=interval_s, capture_depth=_BUNDLE_DEPTH,
                         max_bytes=max_bytes_from_env() if os.environ.get(MAX_BYTES_ENV) else _MAX_BYTES,
                         budget=budget, idle_max_s=max(interval_s, _IDLE_MAX_S),
                         idle_rounds=max(1, round(_IDLE_MAX_S / interval_s)))
        self.budget = budget
        self._process_cpu_at_start = time.process_time()
        self._hook_at_start = hook_budget.PROCESS.parts()
        self.out_dir = out_dir
        # in the TaskManager's embedded interpreter: its task threads' CPU time and the process's counters are
        # the reporter's
        self.embedded = embedded
        self._harness, self._working_in = ((_EMBEDDED_MODULE, _in_embedded_operation) if embedded
                                           else (_BUNDLE_MODULE, _in_bundle))
        self.path = out_dir / f"{SPOOL_PREFIX}{'embedded-' if embedded else ''}{os.getpid()}.json"
        self._working: set[int] = set()
        self._cpu_seen: dict[int, float] = {}
        # bucket of cpu_bucket_s (from the table's origin) -> CPU seconds the bundle threads used in it
        self.cpu: dict[int, float] = {}
        self.cpu_bucket_s = self.table.bucket_s
        self._changed = False
        self._flushed_at = 0.0
        self._flush_every_s = _FLUSH_S
        self._unwritable: str | None = None  # why the spool cannot be written; set once, then no more tries
        self.io = IoCounterSampler(f"python:{os.getpid()}", include_children=False, budget=budget)
        self._samples_json: str | None = None  # the samples as last serialised (rewritten when they change)
        self._io_flushed: tuple[float | None, ...] | None = None  # the counters of the last flush
        self._io_moved = False  # they had moved at the last flush

    def start(self) -> WorkerSampler:
        super().start()
        if not self.embedded:
            self.io.start()
        return self

    def _io_changed(self) -> bool:
        """The counters moved since the last flush, or moved before it (one more flush writes the flat row
        after a job's I/O ended): an idle process does not rewrite its file."""
        rows = self.io.samples()
        if not rows:
            return False
        last = rows[-1]
        counters = (last.storage_read_bytes, last.storage_write_bytes, last.network_rx_bytes,
                    last.network_tx_bytes, last.disk_read_limit, last.disk_write_limit)
        moved = counters != self._io_flushed
        if moved or self._io_moved:
            self._io_flushed = counters
            self._io_moved = moved
            return True
        return False

    def _key_for(self, ident: int, _name: str) -> tr.SampleKey | None:
        return tr.SampleKey(operation=WORKER_ROLE, thread=WORKER_ROLE) if ident in self._working else None

    def sample_once(self, stacks: dict[int, CapturedStack] | None = None) -> int:
        if self._harness not in sys.modules:  # no harness in this process (yet): nothing to look at
            self._maybe_flush()
            return 0
        stacks = stacks if stacks is not None else current_stacks(self.capture_depth)
        working = {ident for ident, stack in stacks.items() if self._working_in(stack)}
        now = self.clock()
        bucket = int((now - self.table.origin) // self.cpu_bucket_s)
        # CPU of a thread between two samples counts when it ran a bundle at either end of the interval
        for ident in (working | self._working) if not self.embedded else ():
            used = _thread_cpu_s(ident)
            if used is None:
                self._cpu_seen.pop(ident, None)
                continue
            before = self._cpu_seen.get(ident)
            if before is not None and used > before:
                self.cpu[bucket] = self.cpu.get(bucket, 0.0) + used - before
                self._changed = True
            self._cpu_seen[ident] = used
        for ident in set(self._cpu_seen) - working - self._working:
            del self._cpu_seen[ident]
        if len(self.cpu) > _MAX_CPU_BUCKETS:
            self._merge_cpu_buckets()
        self._working = working
        recorded = super().sample_once(stacks) if working else 0
        self._changed = self._changed or recorded > 0
        self._maybe_flush()
        return recorded

    def _merge_cpu_buckets(self) -> None:
        merged: dict[int, float] = {}
        for bucket, seconds in self.cpu.items():
            merged[bucket // 2] = merged.get(bucket // 2, 0.0) + seconds
        self.cpu = merged
        self.cpu_bucket_s *= 2

    def _maybe_flush(self, force: bool = False) -> None:
        if self._unwritable is not None:
            return
        if not (force or self.clock() - self._flushed_at >= self._flush_every_s):
            return
        if self._changed or self._io_changed():
            self.flush()

    def flush(self) -> None:
        """Rewrite the spool file (atomically) with everything sampled so far."""
        if self._unwritable is not None:
            return
        if self._changed or self._samples_json is None:
            self._samples_json = json.dumps(self.table.to_samples().model_dump(mode="json"))
        self._changed = False
        self._flushed_at = self.clock()
        body = {
            "format": SPOOL_FORMAT,
            "version": 2,
            "process": os.getpid(),
            "embedded": self.embedded,
            "written": time.time(),
            "cpu": [[bucket, seconds] for bucket, seconds in sorted(self.cpu.items())],
            "cpu_bucket_s": self.cpu_bucket_s,
            "io": [row.model_dump(mode="json") for row in self.io.samples()],
            # what the hook cost in this process since this sampler started, over the same span as the process's
            # CPU time (a client that ran jobs before this one counted their hooks' CPU too)
            "hook": hook_budget.process_cost(
                f"python-embedded:{os.getpid()}" if self.embedded else f"python:{os.getpid()}",
                hook_budget.PROCESS.since(self._hook_at_start), host=self.io.host,
                # the TaskManager's CPU time is the reporter's to give
                process_cpu_s=None if self.embedded else max(0.0, time.process_time() - self._process_cpu_at_start),
                budget=self.budget, paces=[self.pace]).model_dump(mode="json", exclude_none=True),
        }
        # the samples' text is reused while they do not change: the I/O rows alone may have moved
        text = json.dumps(body)[:-1] + ', "samples": ' + self._samples_json + "}"
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            atomic.write_text(self.path, text)
        except OSError as exc:
            # The output directory is the user's to fix, not a fault of ours: say so once and stop trying,
            # instead of failing every tick (and at interpreter exit) for the rest of the job.
            self._unwritable = f"{type(exc).__name__}: {exc}"
            log.warning("crystalperf: cannot write the Python workers' samples to %s (the job is not affected): %s",
                        self.out_dir, self._unwritable)
            return
        self._flush_every_s = max(_FLUSH_S, len(text) / _BYTES_PER_FLUSH_S)

    def _run(self) -> None:
        super()._run()
        with guard("flink: write the Python workers' samples"):
            self._maybe_flush(force=True)


def start_worker_sampler(output_dir: str | Path, interval_s: float = 0.1,
                         share: float | None = None) -> WorkerSampler | None:
    """Start (once per output directory and process) the sampler of this process's loopback Python workers,
    under a CPU budget of ``share`` (default: ``CRYSTALPERF_CPU_BUDGET``, else 1 %). Never raises into the caller
    (returns None when it could not start)."""
    with guard("flink: start the Python worker sampler"):
        out = Path(output_dir).resolve()
        with _lock:
            sampler = _samplers.get(out)
            if sampler is None:
                sampler = _samplers[out] = WorkerSampler(out, interval_s=interval_s, share=share)
                sampler.start()
                atexit.register(_stop, sampler)
            return sampler
    return None


def start_embedded_sampler(output_dir: str, interval_s: float = 0.1, share: float | None = None) -> bool:
    """Start the sampler of the Python functions that run on this TaskManager's task threads (thread mode); the
    reporter calls it through pemja inside the embedded interpreter. Its thread lives as long as the interpreter
    (the TaskManager's process). True when it runs; never raises into the caller."""
    with guard("flink: start the embedded Python sampler"):
        out = Path(output_dir).resolve()
        with _lock:
            sampler = _samplers.get(out)
            if sampler is None:
                sampler = _samplers[out] = WorkerSampler(out, interval_s=interval_s, share=share, embedded=True)
                sampler.start()
            return True
    return False


def _stop(sampler: WorkerSampler) -> None:
    with guard("flink: stop the Python worker sampler"):
        sampler.stop()
        sampler.io.stop()
        sampler._maybe_flush(force=True)


def _spool_document(path: Path) -> dict[str, Any] | None:
    """A spool file's document; None when it is not a spool of this format (being replaced, or another file).
    Raises OSError, ValueError or RecursionError when it cannot be read."""
    if Path(path).stat().st_size > MAX_SPOOL_READ_BYTES:
        raise ValueError(f"larger than {MAX_SPOOL_READ_BYTES} bytes")
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc if doc.get("format") == SPOOL_FORMAT else None


def load_spool(path: Path) -> tuple[tr.StackSamples, dict[float, float], float] | None:
    """A spool file's samples, CPU seconds by the start time of their bucket, and when it was written;
    None when it is not a readable spool (being replaced, or another file)."""
    try:
        doc = _spool_document(path)
        if doc is None:
            return None
        samples = tr.StackSamples.model_validate(doc["samples"])
        # cpu_bucket_s since crystalperf wrote it apart from the samples' (which may merge buckets on their own)
        cpu_bucket_s = float(doc.get("cpu_bucket_s") or samples.bucket_s)
        cpu = {samples.origin + int(b) * cpu_bucket_s: float(s) for b, s in doc.get("cpu") or []}
        return samples, cpu, float(doc.get("written", 0.0))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        log.warning("crystalperf: ignoring unreadable Python worker samples %s", path)
        return None


def load_spool_io(path: Path) -> list[tr.IoSample]:
    """A spool file's I/O counter rows (none in version 1 files, or when it is not a readable spool)."""
    try:
        doc = _spool_document(path)
        return [tr.IoSample.model_validate(row) for row in doc.get("io") or []] if doc is not None else []
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):
        log.warning("crystalperf: ignoring unreadable I/O counters in %s", path)
        return []


def load_spool_hook(path: Path) -> tr.HookProcess | None:
    """What the hook cost in the Python program that wrote a spool file (None where the file does not say)."""
    try:
        doc = _spool_document(path)
        return tr.HookProcess.model_validate(doc["hook"]) if doc is not None and doc.get("hook") is not None else None
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):
        log.warning("crystalperf: ignoring an unreadable hook cost in %s", path)
        return None


def spool_files(directory: Path) -> list[Path]:
    return sorted(Path(directory).glob(f"{SPOOL_PREFIX}*.json"))


def wait_for_spools(directory: Path, end: float, timeout_s: float = 3.0) -> None:
    """Give the samplers of the job's Python program time to write what they sampled until the job ended
    (they rewrite their file every second while something changed); returns at once without spool files."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = spool_files(directory)
        if not found or all(p.stat().st_mtime >= end + _FLUSH_S for p in found if p.exists()):
            return
        time.sleep(0.2)
