"""``spark.python.daemon.module``: PySpark's own worker daemon, with a stack sampler in every worker.

The task thread of a PySpark task only waits on its Python worker's socket, so the Python functions
(UDFs, RDD lambdas) are visible only from inside the worker. Each forked worker samples its main
thread while a task runs and, after every task, appends what that task added (new frames and stacks, the
rows it counted, its CPU time) to its journal in the spool directory
(``pyworker-<pid>.jsonl``, :mod:`crystalperf.core.record.samplejournal`), which the driver side merges into the
trace when the application ends. A flush costs what the task added, the journal is compacted atomically
when it grows, and the worker's memory is bounded in bytes: the sample table's budget
(``CRYSTALPERF_SAMPLER_MAX_BYTES``, 16 MiB by default) and at most ``MAX_TASK_RECORDS`` per-task CPU
records, past which a stage's further tasks are summed in its ``[other]`` task.

Per task the worker reads its CPU clock at the task's start and end and appends one journal line (it may be
killed at any moment after the task). The run-queue delay of its threads (schedstat, a file per thread) is read
only for the next task after each round of sampling: a sample of the tasks, each of them measured whole. The
sampler runs under the hook's CPU budget (``CRYSTALPERF_CPU_BUDGET``, :mod:`crystalperf.core.record.budget`), and the
journal carries what the hook cost in the worker.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pyspark.daemon as _daemon

from crystalperf.core import trace as tr
from crystalperf.core.record import budget as hook_budget
from crystalperf.core.record.samplejournal import SampleJournal
from crystalperf.core.record.sampletable import OTHER
from crystalperf.core.record.sampling import PythonStackSampler
from crystalperf.integrations.spark.config import SPOOL_ENV
from crystalperf.integrations.spark.reader import SPOOL_JOURNAL_FILE, without_jvm_waits
from crystalperf.integrations.spark.schedstat import run_queue_delay_s, run_queue_delays

log = logging.getLogger(__name__)
__all__ = ["MAX_TASK_RECORDS", "without_jvm_waits", "worker"]  # without_jvm_waits: read_spool applies it now
INTERVAL_ENV = "CRYSTALPERF_PY_SAMPLE_INTERVAL_S"
# Per-task CPU records a worker keeps (about 200 bytes each in memory, 80 in the journal).
MAX_TASK_RECORDS = 20_000
# How often a worker's next task is picked to measure its run-queue delay (the JVM's task threads: once a bucket).
PICK_EVERY_S = 1.0

_original_worker = _daemon.worker
# "tasks": (operation, task) -> {"cpu_time_s": .., "cpu_wait_s": ..}; "changed": the ones not yet written
_state: dict[str, Any] = {"pid": None, "sampler": None, "main": None, "tasks": {}, "changed": set(),
                          "journal": None}


def _key_for(thread_id: int, _name: str) -> tr.SampleKey | None:
    if thread_id != _state["main"]:
        return None
    from pyspark.taskcontext import TaskContext

    ctx = TaskContext._taskContext
    if ctx is None or not _state.get("in_task"):
        return None
    return tr.SampleKey(operation=f"stage-{ctx.stageId()}", task=str(ctx.taskAttemptId()), thread="python-worker")


def _process_cpu_s() -> float:
    # The whole worker process: a UDF's own threads (Arrow, NumPy) are the task's work too.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _sampler_threads() -> frozenset[int]:
    # The sampler's own queueing is the profiler's cost, not the task's demand.
    return frozenset(t.native_id for t in threading.enumerate()
                     if t.name == "crystalperf-sampler" and t.native_id is not None)


def _flush() -> None:
    """Append what the last task added to this worker's journal (its first flush writes the whole file)."""
    spool, sampler = os.environ.get(SPOOL_ENV), _state["sampler"]
    if not spool or sampler is None:
        return
    journal = _state["journal"]
    if journal is None:
        journal = _state["journal"] = SampleJournal(Path(spool) / SPOOL_JOURNAL_FILE.format(pid=os.getpid()),
                                                    sampler.table)
    changed, _state["changed"] = _state["changed"], set()
    journal.flush(_state["tasks"], changed, _hook_cost())


def _hook_cost() -> tr.HookProcess:
    """What the hook cost in this worker so far."""
    return hook_budget.process_cost(
        f"python:{os.getpid()}", hook_budget.PROCESS.parts(), host=_state.get("host"),
        process_cpu_s=max(0.0, _process_cpu_s() - _state["cpu_at_install"]), budget=_state["budget"],
        paces=[_state["sampler"].pace] if _state["sampler"] is not None else [])


def _count_cpu(cpu_at_start: float, queued_at_start: dict[int, int] | None) -> None:
    task = _state.get("task")
    if task is None:
        return
    tasks: dict[tuple[str, str], dict[str, float]] = _state["tasks"]
    if task not in tasks and len(tasks) >= MAX_TASK_RECORDS:
        task = (task[0], OTHER)  # the stage's total stays exact; which of its tasks spent it is lost
    figures = tasks.setdefault(task, {})
    figures["cpu_time_s"] = figures.get("cpu_time_s", 0.0) + max(0.0, _process_cpu_s() - cpu_at_start)
    if queued_at_start is not None:
        # Every thread of the worker, as for the CPU time: a UDF's own threads queue for cores too.
        waited = run_queue_delay_s(queued_at_start, run_queue_delays(), _sampler_threads())
        if waited is not None:
            figures["cpu_wait_s"] = figures.get("cpu_wait_s", 0.0) + waited
    _state["changed"].add(task)


def _pick_next_task() -> None:
    """After a round of sampling, at most once a second: the next task this worker starts measures its run-queue
    delay. Each measure reads every thread's schedstat twice; one task a second is enough for a stage's share of
    time queued for a core, and short tasks are not each slowed by it."""
    now = time.monotonic()
    if now - _state.get("picked_at", -PICK_EVERY_S) >= PICK_EVERY_S:
        _state["picked_at"] = now
        _state["measure_next"] = True


def _remember_tasks() -> None:
    """Note the task a worker runs when PySpark sets its context: the worker clears the context before
    its main returns, and the CPU it spent is counted after that."""
    from pyspark.taskcontext import TaskContext

    original = TaskContext.__dict__["_setTaskContext"].__func__

    def set_task_context(cls: Any, ctx: Any) -> None:
        original(cls, ctx)
        if ctx is not None:
            _state["task"] = (f"stage-{ctx.stageId()}", str(ctx.taskAttemptId()))

    TaskContext._setTaskContext = classmethod(set_task_context)  # type: ignore[method-assign,assignment]


def _install() -> None:
    """In a freshly forked worker: start the sampler and wrap the worker's task loop."""
    if _state["pid"] == os.getpid() or not os.environ.get(SPOOL_ENV):
        return
    _state["pid"] = os.getpid()
    _state["main"] = threading.get_ident()
    hook_budget.PROCESS.reset()  # nothing of another process's
    _state.update(tasks={}, changed=set(), journal=None, measure_next=True, picked_at=time.monotonic(),
                  cpu_at_install=_process_cpu_s(),
                  host=socket.gethostname(), budget=hook_budget.CpuBudget(hook_budget.share_from_env()))
    interval = float(os.environ.get(INTERVAL_ENV, "0.1"))
    sampler = PythonStackSampler(_key_for, interval_s=interval, budget=_state["budget"], on_round=_pick_next_task)
    sampler.register_thread()  # this forked worker's main thread: its Thread object has the daemon's id
    _state["sampler"] = sampler.start()
    _remember_tasks()
    import pyspark.worker as worker_module

    original_main = worker_module.main

    def main(infile: Any, outfile: Any) -> Any:
        from pyspark.taskcontext import TaskContext

        started = time.perf_counter()
        TaskContext._taskContext = None  # so no sample is charged to the previous task
        _state["in_task"], _state["task"] = True, None
        measured, _state["measure_next"] = _state["measure_next"], False
        cpu_at_start, queued_at_start = _process_cpu_s(), run_queue_delays() if measured else None
        hook_budget.PROCESS.add("tasks", time.perf_counter() - started)
        try:
            return original_main(infile, outfile)
        finally:
            _state["in_task"] = False
            try:
                with hook_budget.PROCESS.timed("tasks"):
                    _count_cpu(cpu_at_start, queued_at_start)
                    _flush()
            except Exception as exc:  # the worker must go on even if the spool is unwritable
                log.warning("crystalperf: could not write Python worker samples: %s", exc)

    worker_module.main = main


def worker(sock: Any, authenticated: bool) -> int:
    try:
        _install()
    except Exception as exc:
        log.warning("crystalperf: Python worker sampling not started (the job is not affected): %s", exc)
    return _original_worker(sock, authenticated)


_daemon.worker = worker

if __name__ == "__main__":
    _daemon.manager()
