import logging
import threading

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.hooks import finish_job, guard, guarded
from crystalperf.core.sampling import PythonStackSampler, SampleTable, merge_samples
from crystalperf.core.synthetic import spark_like_trace


def busy_checksum(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(1000))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_sampler_attributes_a_worker_threads_function_to_its_operation():
    stop = threading.Event()
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
    top = samples.frames[samples.stacks[samples.stack[0]][0]]
    assert top.language == "python" and top.file.endswith("test_sampling_hooks.py")


def test_sampler_thread_runs_and_stops():
    sampler = PythonStackSampler(lambda ident, name: tr.SampleKey(operation="main") if name == "MainThread" else None,
                                 interval_s=0.01).start()
    sum(range(3_000_000))
    samples = sampler.stop()
    assert sampler.samples_taken > 0 and samples.total >= 1


def test_rows_are_bounded_and_overflow_is_counted():
    table = SampleTable(origin=0.0, bucket_s=1.0, max_rows=3)
    stack = table.stack_id([table.frame_id("f", None, None)])
    for second in range(10):
        table.add(tr.SampleKey(operation="a"), stack, second + 0.5)
    samples = table.to_samples()
    assert len(samples.count) == 3 and samples.dropped == 7


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
