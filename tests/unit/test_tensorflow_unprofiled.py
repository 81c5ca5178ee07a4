"""The requested steps a window ended early by the memory budget did not profile: one operation, its compute at
the profiled steps' median and the rest its wait for input, in the verdict, the iterations and the what-ifs (hand-made
recordings, no TensorFlow)."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.profile.dag import build_profile
from crystalperf.integrations.tensorflow.assemble import build_trace
from crystalperf.integrations.tensorflow.reader import OpEvent, Recording, Step, Timeline, Unprofiled
from crystalperf.integrations.tensorflow.unprofiled import UNPROFILED_COMPUTE

LAYERS = frozenset({"sequential", "dense"})
MB = 1_000_000


def _recording(tail_seconds: float = 8.0) -> Recording:
    """Two profiled 0.1 s steps that ran on prefetched batches (no wait; the pipeline read files 0.03 s and parsed
    0.01 s per step from the page cache), then 8 steps timed only, while the process read 8 MB/s through a cgroup
    limit of 8 MB/s."""
    timeline = Timeline()
    for t0 in (100.0, 100.1):
        timeline.ops += [
            OpEvent("ReadFile", "ReadFile", t0, 0.03, "tf_data_private_threadpool"),
            OpEvent("DecodeCSV", "DecodeCSV", t0 + 0.03, 0.01, "tf_data_private_threadpool"),
            OpEvent("StatefulPartitionedCall/sequential/dense/BiasAdd", "_MklNativeFusedMatMul", t0, 0.1, "tf_Compute"),
        ]
    io = [tr.IoSample(t=100.0, source="python:1", storage_read_bytes=0.0, disk_read_limit=8 * MB)]
    io += [tr.IoSample(t=100.2 + 0.5 * i, source="python:1", storage_read_bytes=0.5 * i * 8 * MB,
                       disk_read_limit=8 * MB) for i in range(18)]
    return Recording(
        steps=[Step(2, 0, 100.0, 100.1), Step(3, 0, 100.1, 100.2)], timeline=timeline, python_samples=None,
        threads=1, cpu_count=2, cpu_seconds=0.2, memory_bytes=8 << 30, layer_names=LAYERS, read_bytes=0, io=io,
        unprofiled=Unprofiled(first=4, last=11, count=8, start=100.2, seconds=tail_seconds),
    )


def test_the_unprofiled_steps_are_their_compute_at_the_profiled_median_and_a_wait_for_the_rest() -> None:
    trace = build_trace(_recording(), run_id="fit-1", name="m", framework_version="2.21.0")
    tail = trace.operations[-1]
    assert tail.name == "steps 4-11 (not profiled)" and tail.kind == "step"
    assert tail.attributes["steps"] == "8" and tail.attributes["input_read_bytes"] == str(64 * MB)
    wait, compute = tail.children
    # 8 steps of 0.1 s compute, 10 % allowed beyond it: 0.88 s; the other 7.12 s of the 8 s waited for input.
    assert compute.name == UNPROFILED_COMPUTE and compute.duration == pytest.approx(0.88)
    assert wait.kind == "input" and wait.duration == pytest.approx(7.12) and compute.parents == [wait.id]
    # what the profiled pipeline worked on: its reads (3/4) and its parsing (1/4)
    assert wait.attributes["waits_on_work"] == "cpu=0.2500,disk=0.7500,network=0.0000"
    assert trace.application.end == pytest.approx(108.2)
    assert trace.metrics["steps"] == 2 and trace.metrics["unprofiled_steps"] == 8
    assert trace.metrics["input_wait_fraction"] == pytest.approx(7.12 / 8.2)
    assert trace.metrics["profiled_input_wait_fraction"] == 0.0
    assert any(w.startswith("steps 4-11 (8 steps, 8.00 s) were timed, not profiled") for w in trace.warnings)


def test_a_fit_disk_bound_after_its_profiled_steps_is_disk_bound() -> None:
    trace = build_trace(_recording(), run_id="fit-1", name="m", framework_version="2.21.0")
    report = analyze(trace, classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    assert report["bottleneck"]["resource"] == "disk", report["bottleneck"]
    assert report["iterations"]["steps"] == 10 and report["iterations"]["step_time_s"] == pytest.approx(0.82)
    assert report["input_bound"]["highly_input_bound"]


def test_a_faster_device_shortens_the_unprofiled_steps_by_the_bytes_they_read() -> None:
    profile = build_profile(build_trace(_recording(), run_id="fit-1", name="m", framework_version="2.21.0"),
                            KeywordClassifier(), locators=[])
    prediction = Predictor(profile).predict(Changes.parse(["disk=16MB/s"]), band=False)
    # The 64 MB the unprofiled steps read take 4 s instead of 8: their wait 7.12 - 4 = 3.12 s, their compute 0.88 s
    # (prefetching overlaps the two); the profiled steps read nothing from storage and stay 0.2 s.
    assert prediction.crystalperf.runtime_s == pytest.approx(0.2 + 3.12 + 0.88)
    assert any("64.0 MB read from storage in the steps not profiled" in n for n in prediction.notes), prediction.notes


def test_unprofiled_steps_as_fast_as_the_profiled_ones_are_all_compute() -> None:
    # 8 steps in 0.85 s: within 10 % of the profiled 0.1 s a step, so no wait is made up of the noise.
    trace = build_trace(_recording(tail_seconds=0.85), run_id="fit-1", name="m", framework_version="2.21.0")
    wait, compute = trace.operations[-1].children
    assert wait.duration == 0.0 and compute.duration == pytest.approx(0.85)
    report = analyze(trace, classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    assert report["bottleneck"]["resource"] == "cpu", report["bottleneck"]


def test_unprofiled_steps_that_read_nothing_from_storage_waited_on_page_cache_copies() -> None:
    rec = _recording()
    rec.io = [row.model_copy(update={"storage_read_bytes": 0.0}) for row in rec.io]
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    wait = trace.operations[-1].children[0]
    assert wait.attributes["waits_on_work"] == "cpu=1.0000,disk=0.0000,network=0.0000"
    report = analyze(trace, classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    assert report["bottleneck"]["resource"] == "cpu", report["bottleneck"]
    assert report["bottleneck"]["sentence"].startswith("The job is cpu-bound through its input")


def test_input_code_sampled_in_the_profiled_steps_says_what_the_unprofiled_steps_waited_on() -> None:
    # A generator reading a socket in Python, caught by the sampler in a profiled step's wait: the unprofiled steps'
    # wait, with no samples of its own, is that code's network time too.
    from crystalperf.core.record.sampletable import SampleTable

    rec = _recording()
    assert rec.timeline is not None
    rec.timeline.ops = [o for o in rec.timeline.ops if o.thread == "tf_Compute"]
    rec.timeline.ops.append(OpEvent("PyFunc", "EagerPyFunc", 100.0, 0.04, "tf_data_private_threadpool"))
    python = SampleTable(100.0, interval_s=0.01)
    reader = python.frame_id("socket.socket.recv_into", None, None)
    generator = python.frame_id("__main__.chunks", "/job/train.py", 12)
    key = tr.SampleKey(operation="s2/input", thread="tf_data_private_threadpool")
    python.add(key, python.stack_id([reader, generator], tr.THREAD_WAITING), 100.05, 4)
    rec.python_samples = python.to_samples()
    rec.io = []
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    assert trace.operations[-1].children[0].attributes["waits_on_work"] == "samples"
    report = analyze(trace, classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    tail_wait = [o for o in report["operations"] if o["id"] == "s4-11/input"]
    assert tail_wait and tail_wait[0]["vector"]["network"] == pytest.approx(1.0), tail_wait
    assert report["bottleneck"]["resource"] == "network", report["bottleneck"]


@pytest.mark.parametrize("steps", ["abc", "nan", "-3", "1e400"])
def test_a_step_count_no_number_is_one_step(steps: str) -> None:
    trace = build_trace(_recording(), run_id="fit-1", name="m", framework_version="2.21.0")
    trace.operations[-1].attributes.update(steps=steps, input_read_bytes="not bytes")
    profile = build_profile(trace, KeywordClassifier(), locators=[])
    prediction = Predictor(profile).predict(Changes.parse(["disk=16MB/s"]), band=False)
    assert prediction.crystalperf.runtime_s > 0


def test_reads_the_window_issued_for_the_unprofiled_steps_make_them_wait_on_the_device() -> None:
    # A throttled device: the process issued its readahead in the window (counted then: 12 MB) and the data arrived
    # while the later steps waited, during which the counters saw nothing more.
    rec = _recording()
    rec.read_bytes = 12 * MB
    rec.io = [row.model_copy(update={"storage_read_bytes": 12.0 * MB if row.t > 100.0 else 0.0}) for row in rec.io]
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    assert trace.operations[-1].children[0].attributes["waits_on_work"] == "cpu=0.2500,disk=0.7500,network=0.0000"
