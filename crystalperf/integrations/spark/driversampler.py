"""The PySpark driver's own Python work: a stack sampler on the program's main thread while it is not inside a call
into Spark.

Between its jobs a PySpark program often works in Python itself (pandas on a collected result, a loop building the
next query, a model's bookkeeping): time outside every operation of the trace, which the JVM's samplers cannot
see. :func:`start` samples the main thread of the driver's process whenever it is not inside a call into the JVM
(:mod:`crystalperf.integrations.spark.pydriver` says which threads are), keyed to ``tr.DRIVER_OPERATION``, under the
hook's CPU budget; the samples taken inside a call are the JVM's business (a job's tasks are sampled there). What it
took is appended every few seconds, and before ``SparkContext.stop()`` hands the application to the finish step, to
a journal in the spool directory (``pyworker-<pid>.jsonl``, the PySpark workers' format), which the finish step
merges into the trace with the workers' samples.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from crystalperf.core import trace as tr
from crystalperf.core.record import budget as hook_budget
from crystalperf.core.record.hooks import guard
from crystalperf.core.record.samplejournal import SampleJournal
from crystalperf.core.record.sampling import PythonStackSampler, in_hook_code
from crystalperf.integrations.spark.reader import SPOOL_JOURNAL_FILE

log = logging.getLogger("crystalperf")

INTERVAL_ENV = "CRYSTALPERF_DRIVER_SAMPLE_INTERVAL_S"
DEFAULT_INTERVAL_S = 0.1
# How often the journal gets what the sampler took since (a killed driver loses at most this much).
FLUSH_EVERY_S = 2.0
DRIVER_THREAD = "python-driver"

_state: dict[str, Any] = {"sampler": None, "journal": None, "spool": None, "flushed_at": 0.0, "budget": None,
                          "cpu_at_start": 0.0}
_lock = threading.Lock()


def _process_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def start(spool: Path, in_spark_call: dict[int, bool]) -> None:
    """Sample the main thread outside its calls into Spark (``in_spark_call``: the threads inside one now) and
    journal the samples in ``spool`` (a later call with another spool, a new session of the same process, starts
    afresh there)."""
    with _lock:
        if _state["sampler"] is not None:
            if _state["spool"] == spool:
                return
            # a new session of the same process: the last one's samples stay in its own spool
            _flush()
            _state["sampler"].stop()
            _state.update(sampler=None, journal=None)
        main = threading.main_thread().ident
        key = tr.SampleKey(operation=tr.DRIVER_OPERATION, thread=DRIVER_THREAD)
        started: list[PythonStackSampler] = []

        def key_for(ident: int, _name: str) -> tr.SampleKey | None:
            if ident != main or in_spark_call.get(ident):
                return None
            # the hook's own code on the main thread (recording a call, flushing at stop) is its cost, counted so
            stack = started[0].captured.get(ident, []) if started else []
            if in_hook_code(stack):
                return None
            return key

        budget = hook_budget.CpuBudget(hook_budget.share_from_env())
        interval = float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL_S))
        sampler = PythonStackSampler(key_for, interval_s=interval, budget=budget, on_round=_maybe_flush)
        started.append(sampler)
        _state.update(sampler=sampler, spool=spool, journal=None, flushed_at=time.monotonic(), budget=budget,
                      cpu_at_start=_process_cpu_s(), host=socket.gethostname())
        sampler.start()
    _flush_before_stop()
    if not _state.get("at_exit"):
        atexit.register(flush)
        _state["at_exit"] = True


def _maybe_flush() -> None:
    if time.monotonic() - _state["flushed_at"] >= FLUSH_EVERY_S:
        flush()


def flush() -> None:
    """Append what the sampler took since the last flush to the journal; never raises."""
    with _lock:
        _flush()


def _flush() -> None:
    sampler, spool = _state["sampler"], _state["spool"]
    if sampler is None or spool is None:
        return
    _state["flushed_at"] = time.monotonic()
    with guard("writing the PySpark driver's samples", log):
        if not Path(spool).is_dir():  # the application ended and the finish step took the spool
            return
        journal = _state["journal"]
        if journal is None:
            journal = _state["journal"] = SampleJournal(Path(spool) / SPOOL_JOURNAL_FILE.format(pid=os.getpid()),
                                                        sampler.table)
        journal.flush({}, set(), hook_budget.process_cost(
            f"python:{os.getpid()}", hook_budget.PROCESS.parts(), host=_state.get("host"),
            process_cpu_s=max(0.0, _process_cpu_s() - _state["cpu_at_start"]), budget=_state["budget"],
            paces=[sampler.pace]))


def _flush_before_stop() -> None:
    """``SparkContext.stop()`` ends the application, whose finish step reads the spool: the journal first."""
    from pyspark import SparkContext

    if getattr(SparkContext.stop, "_crystalperf", False):
        return
    original = SparkContext.stop

    def stop(self: Any) -> None:
        flush()
        original(self)

    stop._crystalperf = True  # type: ignore[attr-defined]
    SparkContext.stop = stop  # type: ignore[method-assign]
