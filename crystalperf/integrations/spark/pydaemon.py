"""``spark.python.daemon.module``: PySpark's own worker daemon, with a stack sampler in every worker.

The task thread of a PySpark task only waits on its Python worker's socket, so the Python functions
(UDFs, RDD lambdas) are visible only from inside the worker. Each forked worker samples its main
thread while a task runs and, after every task, rewrites its aggregated samples into the spool
directory that the driver side merges into the trace when the application ends.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import threading
from pathlib import Path
from typing import Any

import pyspark.daemon as _daemon

from crystalperf.core import trace as tr
from crystalperf.core.sampling import PythonStackSampler
from crystalperf.integrations.spark.config import SPOOL_CPU_FILE, SPOOL_ENV, SPOOL_FILE
from crystalperf.integrations.spark.schedstat import run_queue_delay_s, run_queue_delays

log = logging.getLogger(__name__)
INTERVAL_ENV = "CRYSTALPERF_PY_SAMPLE_INTERVAL_S"

_original_worker = _daemon.worker
_state: dict[str, Any] = {"pid": None, "sampler": None, "main": None, "cpu": {}, "cpu_wait": {}}


def _key_for(thread_id: int, _name: str) -> tr.SampleKey | None:
    if thread_id != _state["main"]:
        return None
    from pyspark.taskcontext import TaskContext

    ctx = TaskContext._taskContext
    if ctx is None or not _state.get("in_task"):
        return None
    return tr.SampleKey(operation=f"stage-{ctx.stageId()}", task=str(ctx.taskAttemptId()), thread="python-worker")


# Innermost Python frames of a worker blocked reading from the JVM: the JVM side is busy producing the
# input then (and is sampled there), so counting these as the worker's stacks would double-count that
# time as network.
_WAITING_FOR_JVM = frozenset({"pyspark.serializers.read_int", "pyspark.serializers.read_long",
                              "pyspark.serializers.read_bool", "pyspark.serializers.FramedSerializer._read_with_length",
                              "pyspark.serializers.UTF8Deserializer.loads"})


def without_jvm_waits(samples: tr.StackSamples) -> tr.StackSamples:
    """The samples minus rows whose stack is blocked reading from the JVM (see _WAITING_FOR_JVM)."""
    waiting = {i for i, stack in enumerate(samples.stacks)
               if stack and samples.frames[stack[0]].name in _WAITING_FOR_JVM}
    if not waiting:
        return samples
    keep = [r for r, stack in enumerate(samples.stack) if stack not in waiting]
    return samples.model_copy(update={
        "key": [samples.key[r] for r in keep], "bucket": [samples.bucket[r] for r in keep],
        "stack": [samples.stack[r] for r in keep], "count": [samples.count[r] for r in keep]})


def _process_cpu_s() -> float:
    # The whole worker process: a UDF's own threads (Arrow, NumPy) are the task's work too.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _sampler_threads() -> frozenset[int]:
    # The sampler's own queueing is the profiler's cost, not the task's demand.
    return frozenset(t.native_id for t in threading.enumerate()
                     if t.name == "crystalperf-sampler" and t.native_id is not None)


def _write(target: Path, text: str) -> None:
    tmp = target.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(target)


def _flush() -> None:
    spool, sampler = os.environ.get(SPOOL_ENV), _state["sampler"]
    if not spool or sampler is None:
        return
    if _state["cpu"]:
        tasks = []
        for (op, task), cpu in _state["cpu"].items():
            entry: dict[str, Any] = {"operation": op, "task": task, "cpu_time_s": cpu}
            waited = _state["cpu_wait"].get((op, task))
            if waited is not None:
                entry["cpu_wait_s"] = waited
            tasks.append(entry)
        _write(Path(spool) / SPOOL_CPU_FILE.format(pid=os.getpid()), json.dumps({"tasks": tasks}))
    samples = without_jvm_waits(sampler.table.to_samples())
    if samples.count:
        _write(Path(spool) / SPOOL_FILE.format(pid=os.getpid()), samples.model_dump_json(exclude_none=True))


def _count_cpu(cpu_at_start: float, queued_at_start: dict[int, int] | None) -> None:
    task = _state.get("task")
    if task is not None:
        _state["cpu"][task] = _state["cpu"].get(task, 0.0) + max(0.0, _process_cpu_s() - cpu_at_start)
        # Every thread of the worker, as for the CPU time: a UDF's own threads queue for cores too.
        waited = run_queue_delay_s(queued_at_start, run_queue_delays(), _sampler_threads())
        if waited is not None:
            _state["cpu_wait"][task] = _state["cpu_wait"].get(task, 0.0) + waited


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
    interval = float(os.environ.get(INTERVAL_ENV, "0.1"))
    sampler = PythonStackSampler(_key_for, interval_s=interval, max_rows=50_000)
    sampler.register_thread()  # this forked worker's main thread: its Thread object has the daemon's id
    _state["sampler"] = sampler.start()
    _remember_tasks()
    import pyspark.worker as worker_module

    original_main = worker_module.main

    def main(infile: Any, outfile: Any) -> Any:
        from pyspark.taskcontext import TaskContext

        TaskContext._taskContext = None  # so no sample is charged to the previous task
        _state["in_task"], _state["task"] = True, None
        cpu_at_start, queued_at_start = _process_cpu_s(), run_queue_delays()
        try:
            return original_main(infile, outfile)
        finally:
            _state["in_task"] = False
            try:
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
