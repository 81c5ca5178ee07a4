"""The loopback Python workers' samples (``pyworkers`` spool files) keyed to the job's Python operator, on
hand-made reporter parts: their role, the job window, the CPU time, the ambiguity rule and the warnings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crystalperf.core import trace as t
from crystalperf.core.attribution.waiting import delegates, primitive_vector
from crystalperf.core.record.sampletable import SampleTable
from crystalperf.integrations.flink.assemble import (
    EMBEDDED_PYTHON_WARNING,
    PYTHON_WORKERS_WARNING,
    read_metrics,
)
from crystalperf.integrations.flink.pyworkers import SPOOL_FORMAT, WORKER_ROLE, load_spool

START = 1_700_000_000.0
WAIT_FOR_WORKER = "\n".join([
    "jdk.internal.misc.Unsafe.park\tUnsafe.java\t-2",
    "java.util.concurrent.LinkedBlockingQueue.take\tLinkedBlockingQueue.java\t435",
    "org.apache.flink.streaming.api.runners.python.beam.BeamPythonFunctionRunner.takeResult\tB.java\t1",
    "org.apache.flink.streaming.api.operators.python.process.AbstractExternalPythonFunctionOperator"
    ".invokeFinishBundle\tA.java\t1",
])


def _part(directory: Path, chains: list[str], waits: dict[str, int] | None = None,
          stack: str = WAIT_FOR_WORKER) -> Path:
    """Each chain's two subtasks sampled ``waits[chain]`` (30) times each in second 2, in ``stack``."""
    scopes, metrics, samples = [], [], []
    for chain in chains:
        for sub in ("0", "1"):
            scopes.append({"task_name": chain, "subtask_index": sub, "added": START, "removed": START + 10})
            metrics.append([len(scopes) - 1, "accumulateBusyTimeMs", 10_000])
            samples.append([chain, sub, 2, stack, (waits or {}).get(chain, 30), "waiting", ""])
        scopes.append({"task_name": chain, "operator_name": "PythonCalc[2]", "subtask_index": "0"})
    path = directory / "crystalperf-flink-job1.100.json"
    path.write_text(json.dumps({
        "format": "crystalperf-flink-metrics", "version": 2, "job_id": "job1", "job_name": "j", "process": 100,
        "complete": True, "written": START + 11, "start": START, "end": START + 10, "cpu_count": 2,
        "thread_cpu": [[c, s, 0.5] for c in chains for s in ("0", "1")], "classpath": [], "dropped_metrics": 0,
        "scopes": scopes, "metrics": metrics, "sample_interval_s": 0.1, "sample_origin": START,
        "sample_bucket_s": 1.0, "dropped_samples": 0, "samples": samples,
    }))
    return path


def _spool(directory: Path, origin: float = START, later: tuple[float, int] = (60.5, 7)) -> Path:
    table = SampleTable(origin, 1.0, 0.1)
    read = [table.frame_id("socket.SocketIO.readinto", "/usr/lib/python3.11/socket.py", 706),
            table.frame_id("__main__.pull", "/job.py", 12)]
    stack = table.stack_id(read, t.THREAD_WAITING)
    key = t.SampleKey(operation=WORKER_ROLE, thread=WORKER_ROLE)
    table.add(key, stack, origin + 3.5, 40)
    table.add(key, stack, origin + later[0], later[1])  # by default after the job: another job of the program
    path = directory / "crystalperf-pyflink-workers.99.json"
    path.write_text(json.dumps({"format": SPOOL_FORMAT, "version": 1, "process": 99, "written": origin + 61,
                                "cpu": [[3, 1.5], [60, 9.0]],
                                "samples": table.to_samples().model_dump(mode="json")}))
    return path


def test_the_workers_samples_are_the_python_operators_with_their_role(tmp_path: Path) -> None:
    spool = _spool(tmp_path)
    trace = read_metrics(_part(tmp_path, ["Source: requests[1] -> PythonCalc[2]"]))
    samples = trace.samples
    assert samples is not None
    chain = trace.operations[0]
    python_op = next(c for c in chain.children if c.name == "PythonCalc[2]")
    worker_rows = [(samples.keys[k], n) for k, _, _, n in samples.rows() if samples.keys[k].thread == WORKER_ROLE]
    # keyed to the chain and to its Python operator, within the job's span only (the later 7 are not)
    assert {key.operation for key, _ in worker_rows} == {chain.id, python_op.id}
    assert sum(n for key, n in worker_rows if key.operation == chain.id) == 40
    assert PYTHON_WORKERS_WARNING not in trace.warnings
    # the workers' CPU in the job's span (1.5 s) is split over the chain's two subtasks
    assert [task.metrics[t.METRIC_CPU_TIME] for task in chain.tasks] == [1.25, 1.25]
    loaded = load_spool(spool)
    assert loaded is not None and loaded[1] == {START + 3: 1.5, START + 60: 9.0}


def test_several_python_chains_share_the_workers_by_their_threads_in_python(tmp_path: Path) -> None:
    # second 3's 40 samples and 1.5 s of CPU go to the chains as their task threads' samples in their Python
    # operator in the nearest second that had any (second 2: 60 of a, 20 of b); second 7.5's 5 to none
    _spool(tmp_path, later=(7.5, 5))
    a, b = "Source: a[1] -> PythonCalc[2]", "b[3] -> PythonCalc[2]"
    trace = read_metrics(_part(tmp_path, [a, b], waits={a: 30, b: 10}))
    assert trace.samples is not None
    chains = {op.name: op for op in trace.operations}
    counted: dict[str, int] = {}
    for k, _, _, n in trace.samples.rows():
        key = trace.samples.keys[k]
        if key.thread == WORKER_ROLE:
            counted[key.operation] = counted.get(key.operation, 0) + n
    python_ops = {name: next(c.id for c in op.children if c.name == "PythonCalc[2]") for name, op in chains.items()}
    assert counted == {chains[a].id: 30, python_ops[a]: 30, chains[b].id: 10, python_ops[b]: 10}
    # each chain's share of the CPU over its two subtasks, beside their own 0.5 s
    assert [task.metrics[t.METRIC_CPU_TIME] for task in chains[a].tasks] == [1.0625, 1.0625]
    assert [task.metrics[t.METRIC_CPU_TIME] for task in chains[b].tasks] == [0.6875, 0.6875]
    assert any(w.startswith("5 of the Python workers' samples were left out") for w in trace.warnings)


def test_chains_never_seen_in_their_python_operator_get_none_of_the_workers_samples(tmp_path: Path) -> None:
    _spool(tmp_path)
    busy = "org.example.Work.run\tWork.java\t1"
    trace = read_metrics(_part(tmp_path, ["Source: a[1] -> PythonCalc[2]", "b[3] -> PythonCalc[2]"], stack=busy))
    assert trace.samples is not None
    assert not any(key.thread == WORKER_ROLE for key in trace.samples.keys)


def test_without_worker_samples_the_trace_warns_that_python_was_not_sampled(tmp_path: Path) -> None:
    trace = read_metrics(_part(tmp_path, ["Source: requests[1] -> PythonCalc[2]"]))
    assert PYTHON_WORKERS_WARNING in trace.warnings
    assert all(task.metrics[t.METRIC_CPU_TIME] == 0.5 for task in trace.operations[0].tasks)


# python.execution-mode: thread: the UDF runs on the task thread, in pemja's embedded CPython
EMBEDDED_CALL = "\n".join([
    "pemja.core.PythonInterpreter.invokeMethodOneArgLong\tPythonInterpreter.java\t-2",
    "pemja.core.PythonInterpreter.invokeMethodOneArg\tPythonInterpreter.java\t290",
    "org.apache.flink.table.runtime.operators.python.scalar.EmbeddedPythonScalarFunctionOperator.processElement"
    "\tE.java\t1",
    "org.apache.flink.streaming.api.operators.python.embedded.AbstractEmbeddedPythonFunctionOperator.open\tA.java\t1",
])


def test_python_run_in_the_task_threads_is_not_said_to_run_in_unsampled_workers(tmp_path: Path) -> None:
    trace = read_metrics(_part(tmp_path, ["Source: ids[1] -> PythonCalc[2]"], stack=EMBEDDED_CALL))
    assert PYTHON_WORKERS_WARNING not in trace.warnings
    assert EMBEDDED_PYTHON_WARNING in trace.warnings
    trace = read_metrics(_part(tmp_path, ["Source: ids[1] -> PythonCalc[2]"]))
    assert EMBEDDED_PYTHON_WARNING not in trace.warnings


def test_the_java_side_waiting_for_its_worker_delegates_and_socket_reads_are_network() -> None:
    frames = [t.Frame(name=line.split("\t")[0]) for line in WAIT_FOR_WORKER.splitlines()]
    assert delegates(frames, list(range(len(frames))))
    assert primitive_vector("socket.SocketIO.readinto") == primitive_vector("socket.socket.recv_into")
    vector = primitive_vector("socket.SocketIO.readinto")
    assert vector is not None and vector.network == 1.0


def test_an_unreadable_spool_is_ignored(tmp_path: Path) -> None:
    bad = tmp_path / "crystalperf-pyflink-workers.5.json"
    bad.write_text("{not json")
    assert load_spool(bad) is None
    trace = read_metrics(_part(tmp_path, ["Source: requests[1] -> PythonCalc[2]"]))
    assert PYTHON_WORKERS_WARNING in trace.warnings


def _sampled_spool(tmp_path: Path, monkeypatch: Any, module: str, function: str, *, embedded: bool = False,
                   rounds: int = 1) -> Path:
    """The spool of a sampler that sampled ``rounds`` times a thread running ``function``, defined in a module
    named ``module`` (PyFlink's or Beam's place for it, without them: this tests the selection only), beside a
    thread running nothing of theirs."""
    import sys
    import threading
    import types

    from crystalperf.integrations.flink.pyworkers import WorkerSampler, spool_files

    monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
    namespace: dict[str, Any] = {"__name__": module}
    exec(f"def {function}(stop):\n    stop.wait(10)\n", namespace)  # noqa: S102
    stop = threading.Event()
    working = threading.Thread(target=namespace[function], args=(stop,))
    idle = threading.Thread(target=stop.wait, args=(10,))
    working.start()
    idle.start()
    try:
        sampler = WorkerSampler(tmp_path, embedded=embedded)
        for _ in range(rounds):
            assert sampler.sample_once() == 1
        sampler.flush()
    finally:
        stop.set()
        working.join()
        idle.join()
    [spool] = spool_files(tmp_path)
    return spool


def test_the_sampler_takes_only_threads_running_a_bundle(tmp_path: Path, monkeypatch: Any) -> None:
    # the harness's bundle loop
    spool = _sampled_spool(tmp_path, monkeypatch, "apache_beam.runners.worker.sdk_worker", "process_bundle")
    loaded = load_spool(spool)
    assert loaded is not None
    samples = loaded[0]
    assert [key.thread for key in samples.keys] == [WORKER_ROLE]
    names = {samples.frames[f].name for stack in samples.stacks for f in stack}
    assert any(name.endswith("process_bundle") for name in names)


def test_the_embedded_sampler_takes_threads_in_an_embedded_operation_without_cpu_or_counters(
        tmp_path: Path, monkeypatch: Any) -> None:
    from crystalperf.integrations.flink.pyworkers import load_spool_hook, load_spool_io

    # PyFlink's embedded operation, which pemja calls on the task thread; the UDF's frames sit above it
    spool = _sampled_spool(tmp_path, monkeypatch, "pyflink.fn_execution.embedded.operation_utils",
                           "process_element", embedded=True, rounds=2)
    assert spool.name.startswith("crystalperf-pyflink-workers.embedded-")
    loaded = load_spool(spool)
    assert loaded is not None
    samples, cpu, _ = loaded
    assert [key.thread for key in samples.keys] == [WORKER_ROLE]
    # the task threads' CPU time and the TaskManager's counters are the reporter's: none here
    assert cpu == {} and load_spool_io(spool) == []
    hook = load_spool_hook(spool)
    assert hook is not None and hook.source.startswith("python-embedded:") and hook.process_cpu_s is None


def test_an_unwritable_output_directory_is_reported_once_and_not_retried(tmp_path: Path, caplog: Any) -> None:
    import logging

    from crystalperf.integrations.flink.pyworkers import WorkerSampler

    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("not a directory")
    sampler = WorkerSampler(not_a_dir / "out")
    with caplog.at_level(logging.WARNING, logger="crystalperf.integrations.flink.pyworkers"):
        sampler.flush()
        sampler._maybe_flush(force=True)
        sampler.flush()
    warnings = [r for r in caplog.records if "cannot write the Python workers' samples" in r.getMessage()]
    assert len(warnings) == 1 and str(not_a_dir / "out") in warnings[0].getMessage()
    assert not_a_dir.read_text() == "not a directory"
