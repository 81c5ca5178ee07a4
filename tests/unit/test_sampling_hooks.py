import json
import logging
import os
import threading
import time

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.finish import finish_job
from crystalperf.core.record.hooks import guard, guarded
from crystalperf.core.record.sampletable import SampleTable
from crystalperf.core.record.sampling import PythonStackSampler, ThreadStates, merge_samples
from crystalperf.core.trace.synthetic import spark_like_trace


class StopFlag:
    """A plain attribute, not threading.Event: Event.is_set is Python code of threading.py, and a sample
    taken inside it would make the worker's top frame the standard library's."""

    def __init__(self) -> None:
        self.stopped = False
        self._event = threading.Event()

    def set(self) -> None:
        self.stopped = True
        self._event.set()

    def wait(self) -> None:
        """Parks the calling thread until set (for a thread that should sample as waiting)."""
        self._event.wait()


def busy_checksum(stop: StopFlag) -> None:
    while not stop.stopped:
        sum(i * i for i in range(1000))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_sampler_attributes_a_worker_threads_function_to_its_operation():
    stop = StopFlag()
    worker = threading.Thread(target=busy_checksum, args=(stop,), name="worker-1")
    worker.start()
    clock = FakeClock()
    sampler = PythonStackSampler(
        lambda ident, name: tr.SampleKey(operation="op-a", task="t1") if name == "worker-1" else None,
        clock=clock, bucket_s=1.0,
    )
    try:
        for _ in range(5):
            assert sampler.sample_once() == 1
            clock.now += 0.4
    finally:
        stop.set()
        worker.join()
    samples = sampler.table.to_samples()
    assert samples.total == 5 and samples.keys == [tr.SampleKey(operation="op-a", task="t1")]
    assert sorted(set(samples.bucket)) == [0, 1]  # 0, 0.4, 0.8 | 1.2, 1.6
    names = {f.name for f in samples.frames}
    assert any(n.endswith("busy_checksum") or n.endswith("<genexpr>") for n in names)
    # A sample can catch the worker parked on the GIL (the sampler holds it): the kernel frame it waits in
    # then sits above its Python frames, so the first Python frame is the one that names the worker's code.
    first_python = next(samples.frames[f] for f in samples.stacks[samples.stack[0]]
                        if samples.frames[f].language == "python")
    assert first_python.file.endswith("test_sampling_hooks.py")


def test_sampler_thread_runs_and_stops():
    sampler = PythonStackSampler(lambda ident, name: tr.SampleKey(operation="main") if name == "MainThread" else None,
                                 interval_s=0.01).start()
    sum(range(3_000_000))
    samples = sampler.stop()
    assert sampler.samples_taken > 0 and samples.total >= 1


def test_merge_rebases_and_reinterns():
    a = SampleTable(origin=10.0)
    a.add(tr.SampleKey(operation="x"), a.stack_id([a.frame_id("f", "f.py", 1), a.frame_id("g", "g.py", 2)]), 10.5, 3)
    b = SampleTable(origin=12.0)
    b.add(tr.SampleKey(operation="x"), b.stack_id([b.frame_id("g", "g.py", 2)]), 12.5, 2)
    b.add(tr.SampleKey(operation="x"), b.stack_id([b.frame_id("f", "f.py", 1), b.frame_id("g", "g.py", 2)]), 10.5 + 2, 1)
    merged = merge_samples([a.to_samples(), b.to_samples()])
    assert merged.origin == 10.0 and merged.total == 6
    assert [f.name for f in merged.frames] == ["f", "g"] and len(merged.stacks) == 2
    assert sorted(zip(merged.bucket, merged.count, strict=True)) == [(0, 3), (2, 1), (2, 2)]


def _states_by_thread(samples: tr.StackSamples) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for key, _, stack, _ in samples.rows():
        found.setdefault(samples.keys[key].operation, set()).add(samples.state_of(stack))
    return found


def _sample_until(sampler: PythonStackSampler, done, limit_s: float = 20.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        sampler.sample_once()
        if done(sampler.table.to_samples()):
            return
        time.sleep(0.02)


def _wait_until_asleep(native_id: int | None, limit_s: float = 20.0) -> None:
    """Until the thread has slept ('S') with an unchanged CPU time for three reads 50 ms apart."""
    deadline = time.monotonic() + limit_s
    seen: list[tuple[bytes, bytes]] = []
    while time.monotonic() < deadline:
        with open(f"/proc/self/task/{native_id}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        seen = [*seen[-2:], (fields[0], fields[11] + b"+" + fields[12])]
        if len(seen) == 3 and all(state == b"S" and cpu == seen[0][1] for state, cpu in seen):
            return
        time.sleep(0.05)
    raise AssertionError(f"thread {native_id} never settled asleep: {seen}")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="thread CPU time is read from Linux's /proc")
def test_a_spinning_thread_samples_runnable_and_a_parked_one_waiting():
    stop = StopFlag()
    spinning = threading.Thread(target=busy_checksum, args=(stop,), name="spinning")
    parked = threading.Thread(target=stop.wait, name="parked")
    spinning.start()
    parked.start()
    # On a loaded machine the parked thread may still be on its way into the wait (runnable, or burning the
    # CPU tick that starting a thread costs) when it is first sampled: sample it only once it sleeps.
    _wait_until_asleep(parked.native_id)
    sampler = PythonStackSampler(
        lambda ident, name: tr.SampleKey(operation=name) if name in ("spinning", "parked") else None)
    try:
        # a tick of CPU time is 10 ms: on a loaded machine the spinning thread may need a few samples
        _sample_until(sampler, lambda s: tr.THREAD_RUNNABLE in _states_by_thread(s).get("spinning", set()))
        for _ in range(5):
            sampler.sample_once()
            time.sleep(0.02)
    finally:
        stop.set()
        spinning.join()
        parked.join()
    samples = sampler.table.to_samples()
    states = _states_by_thread(samples)
    assert tr.THREAD_RUNNABLE in states["spinning"]
    assert states["parked"] == {tr.THREAD_WAITING}  # blocked on a lock: its CPU time never moves
    assert len(samples.states) == len(samples.stacks)
    # the memory of CPU times is bounded by the live threads
    sampler.sample_once()
    assert set(sampler.thread_states._cpu) <= {t.native_id for t in threading.enumerate()}


def test_states_are_unknown_without_proc(tmp_path):
    states = ThreadStates(str(tmp_path / "no-such-dir"))
    assert states.state(threading.get_native_id()) == "" and states.state(None) == ""
    sampler = PythonStackSampler(lambda ident, name: tr.SampleKey(operation="main") if name == "MainThread" else None,
                                 thread_states=states)
    sampler.sample_once()
    samples = sampler.table.to_samples()
    assert samples.total == 1 and samples.states == []  # all unknown: the column is left out


def test_states_are_part_of_a_stacks_identity_and_survive_a_merge():
    a = SampleTable(origin=0.0)
    f = a.frame_id("f", "f.py", 1)
    running, parked = a.stack_id([f], tr.THREAD_RUNNABLE), a.stack_id([f], tr.THREAD_WAITING)
    assert running != parked and a.stack_id([f], tr.THREAD_RUNNABLE) == running
    a.add(tr.SampleKey(operation="x"), running, 0.5, 3)
    a.add(tr.SampleKey(operation="x"), parked, 0.5, 2)
    b = SampleTable(origin=0.0)
    b.add(tr.SampleKey(operation="x"), b.stack_id([b.frame_id("f", "f.py", 1)]), 1.5, 4)  # state unknown
    merged = merge_samples([a.to_samples(), b.to_samples()])
    by_state: dict[str, int] = {}
    for _, _, stack, count in merged.rows():
        by_state[merged.state_of(stack)] = by_state.get(merged.state_of(stack), 0) + count
    assert by_state == {tr.THREAD_RUNNABLE: 3, tr.THREAD_WAITING: 2, "": 4}
    assert len(merged.stacks) == 3 and len(merged.frames) == 1


@pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc/self/task"), reason="needs fork and /proc")
def test_a_forked_workers_main_thread_gets_its_state():
    """In a forked process the main thread's Thread object keeps the parent's kernel id (a PySpark worker)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: sample its own main thread from a sampler thread while it spins
        try:
            sampler = PythonStackSampler(
                lambda ident, name: tr.SampleKey(operation="main") if ident == threading.main_thread().ident else None,
                interval_s=0.01)
            sampler.register_thread()
            sampler.start()
            deadline = time.monotonic() + 20
            found: set[str] = set()
            while time.monotonic() < deadline and tr.THREAD_RUNNABLE not in found:
                sum(i * i for i in range(20_000))
                found = {sampler.table.states[s] for s in range(len(sampler.table.states))}
            sampler.stop()
            os.write(write, json.dumps(sorted(found)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        found = json.loads(pipe.read() or "[]")
    os.waitpid(pid, 0)
    assert tr.THREAD_RUNNABLE in found, found


def test_guard_swallows_outside_tests_and_reraises_in_tests(monkeypatch, caplog):
    monkeypatch.setenv("CRYSTALPERF_TESTING", "0")
    with caplog.at_level(logging.WARNING):
        with guard("the thing"):
            raise RuntimeError("boom")
    assert "the thing failed" in caplog.text and "boom" in caplog.text

    @guarded("returning", default=-1)
    def fails() -> int:
        raise ValueError("nope")

    assert fails() == -1
    monkeypatch.setenv("CRYSTALPERF_TESTING", "1")
    with pytest.raises(RuntimeError):
        with guard("the thing"):
            raise RuntimeError("boom")


def test_finish_job_writes_trace_and_report(tmp_path, monkeypatch):
    monkeypatch.setenv("CRYSTALPERF_CACHE_DIR", str(tmp_path / "cache"))
    path = finish_job(spark_like_trace(jobs=1, tasks_per_stage=2), tmp_path / "out")
    assert path == tmp_path / "out" / "crystalperf-trace.json.gz"
    assert (tmp_path / "out" / "crystalperf-report.html").exists()


def test_finish_job_never_raises_on_an_unwritable_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CRYSTALPERF_TESTING", "0")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert finish_job(spark_like_trace(jobs=1, tasks_per_stage=2), blocker / "out") is None
