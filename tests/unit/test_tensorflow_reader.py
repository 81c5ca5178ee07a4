"""The XSpace decoder and the trace assembly on a recorded Keras fit (``tests/data/tensorflow-fit*``,
recorded by ``tests/data/record/tensorflow_fit.py``), without TensorFlow.

The run: a CNN (conv_a, pool, conv_b, gap, logits) named golden_cnn, Adam, 40x40 images through
``from_tensor_slices -> map(flip, py_function) -> batch(16) -> prefetch(2)``, 6 steps an epoch, 2 epochs,
steps 2-9 profiled on 2 CPU threads. The numbers below were counted from the recorded files.
"""

from __future__ import annotations

import gzip
import re
from collections import Counter
from pathlib import Path

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.vectors import VECTOR_SOURCE_ATTRIBUTE
from crystalperf.integrations.tensorflow.assemble import build_trace_for
from crystalperf.integrations.tensorflow.reader import (
    EAGER_NODE,
    XPlane,
    decode_xspace,
    load_recording,
    read_timeline,
    thread_family,
)
from tests.unit.helpers import assert_same_document

DATA = Path(__file__).resolve().parents[1] / "data"
XPLANE = DATA / "tensorflow-fit.xplane.pb.gz"
RECORDING = DATA / "tensorflow-fit-recording.json.gz"
TRACE = DATA / "tensorflow-fit-trace.json.gz"
TRACE_1_1 = DATA / "tensorflow-fit-trace-1.1.json.gz"  # what the callback wrote in the recorded run (schema 1.1)
PROFILE_START_NS = 1795551077966547402
PROFILE_STOP_NS = 1795551078029472277
STEP_PARTS = {"input pipeline (wait)", "adam", "other", "conv_a", "pool", "conv_b", "gap backward",
              "conv_b backward", "pool backward", "conv_a backward", "host (Python, dispatch)"}


@pytest.fixture(scope="module")
def planes() -> list[XPlane]:
    return decode_xspace(gzip.decompress(XPLANE.read_bytes()))


@pytest.fixture(scope="module")
def trace() -> tr.Trace:
    rec, info = load_recording(RECORDING)
    return build_trace_for(rec, info)


def _events_named(plane: XPlane, pattern: str) -> int:
    wanted = {k for k, name in plane.event_names.items() if re.fullmatch(pattern, name)}
    return sum(1 for line in plane.lines for event in line.events if event.metadata_id in wanted)


def test_the_xspace_decodes_into_its_planes_lines_and_events(planes: list[XPlane]) -> None:
    assert [p.name for p in planes] == ["/host:CPU", "Task Environment"]
    host, environment = planes
    assert {environment.stat_names[s.metadata_id]: s.value for s in environment.stats
            if isinstance(s.value, int)} == {"profile_start_time": PROFILE_START_NS,
                                             "profile_stop_time": PROFILE_STOP_NS}
    assert len(host.lines) == 11 and sum(len(line.events) for line in host.lines) == 7385
    assert sorted({thread_family(line.name) for line in host.lines}) == [
        "python", "tf_Compute", "tf_data_iterator_get_next", "tf_data_iterator_resource",
        "tf_data_private_threadpool", "tf_numa_-1_Eigen"]
    # One iterator wait per profiled step: the training thread asked tf.data for 8 batches.
    assert _events_named(host, r"IteratorGetNextOp::DoCompute") == 8


def test_the_timeline_has_kernels_waits_stages_and_the_allocator_peak(planes: list[XPlane]) -> None:
    timeline = read_timeline(XPLANE)
    assert timeline.start == PROFILE_START_NS / 1e9 and timeline.stop == PROFILE_STOP_NS / 1e9
    # Kernel executions are the "<node>:<OpType>" events: 1720 on TF's compute pool, 345 on tf.data's; and the
    # ops Keras ran eagerly on the training thread around the compiled step, "EagerLocalExecute: <OpType>": 8 of
    # OptionalHasValue and of OptionalGetValue (one a step), AnonymousIteratorV3 and MakeIterator (2 each: an
    # iterator per epoch), ReadVariableOp 2, AssignVariableOp 2, DivNoNan 1 — not the 8 calls of the compiled
    # step ("EagerLocalExecute: __inference_multi_step_on_iterator_1220") nor the 74 _EagerConst inside
    # tf.data's py_function kernels.
    graph = _events_named(planes[0], r"[^\s:]+:[A-Za-z_][A-Za-z0-9_]*")
    assert graph == 2065
    assert len(timeline.ops) == graph + 25
    assert sum(op.thread == "tf_Compute" for op in timeline.ops) == 1720
    assert sum(op.thread == "tf_data_private_threadpool" for op in timeline.ops) == 345
    eager = Counter(op.op_type for op in timeline.ops if op.node == EAGER_NODE)
    assert eager == {"OptionalHasValue": 8, "OptionalGetValue": 8, "AnonymousIteratorV3": 2, "MakeIterator": 2,
                     "ReadVariableOp": 2, "AssignVariableOp": 2, "DivNoNan": 1}
    assert all(op.thread == "python" for op in timeline.ops if op.node == EAGER_NODE)
    assert [op.start for op in timeline.ops] == sorted(op.start for op in timeline.ops)
    assert len(timeline.input_waits) == 8
    # tf.data fused map and batch; the stages are the iterator names' last parts.
    assert set(timeline.stage_busy) == {"Root", "Prefetch", "MapAndBatch", "TensorSlice"}
    assert timeline.peak_bytes_in_use == 5_995_520
    conv = [op for op in timeline.ops if op.node.endswith("conv_a_1/Relu")]
    assert conv and all(op.op_type == "_MklNativeFusedConv2D" and not op.device for op in conv)


def test_the_recorded_fit_becomes_the_trace_the_callback_writes(trace: tr.Trace) -> None:
    assert_same_document(trace.model_dump(), tr.load_trace(TRACE).model_dump())


def test_the_trace_the_recorded_run_wrote_before_measured_waiting_still_analyses() -> None:
    from crystalperf.core.analysis import analyze
    from crystalperf.core.attribution.classify import KeywordClassifier

    old = tr.load_trace(TRACE_1_1)
    assert old.schema_version == "1.1"
    waits = [next(p for p in s.children if p.kind == "input") for s in old.operations]
    assert all(tr.METRIC_WAIT_TIME not in w.metrics for w in waits)  # its input waits were CPU time then
    report = analyze(old, classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    assert len([o for o in report["operations"] if o["kind"] == "step"]) == 8
    assert report["bottleneck"]["resource"] == "cpu"


def test_steps_are_operations_named_by_keras_layer(trace: tr.Trace) -> None:
    assert [op.id for op in trace.operations] == [f"s{i}" for i in range(2, 10)]
    assert [op.name for op in trace.operations] == (
        [f"step {i} (epoch 1)" for i in range(2, 6)] + [f"step {i} (epoch 2)" for i in range(6, 10)])
    for step in trace.operations:
        parts = step.children
        assert {p.name for p in parts} == STEP_PARTS  # gap and logits forward are under 2 %: in "other"
        # after its last kernels the step went back to Keras's Python for longer than they ran: the host's tail
        assert parts[-1].name == "host (Python, dispatch)" and parts[-2].name == "conv_a backward"
        # The parts tile the step, each one after the one before it.
        assert parts[0].start == step.start and parts[-1].end == step.end
        assert all(a.end == b.start and b.parents == [a.id] for a, b in zip(parts, parts[1:], strict=False))
        kernels = {p.name: p.attributes.get("kernels") for p in parts}
        assert kernels["conv_a"] == "3" and kernels["conv_b backward"] == "3" and kernels["adam"] == "126"
        assert {p.attributes.get("phase") for p in parts if p.name.endswith("backward")} == {"backward"}
        assert next(p for p in parts if p.name == "adam").attributes["phase"] == "update"


def test_input_waits_and_window_metrics_by_hand(trace: tr.Trace) -> None:
    rec, _ = load_recording(RECORDING)
    assert rec.timeline is not None
    waits = [next(p for p in s.children if p.kind == "input") for s in trace.operations]
    # Each step's wait is the one IteratorGetNext wait inside it.
    assert [w.metrics[tr.METRIC_RUN_TIME] for w in waits] == [d for _, d in rec.timeline.input_waits]
    # The wait is measured: all of it waiting, on the pipeline named by its busiest dataset (tf.data fused
    # the map and the batch); the pipeline's work was all CPU (the py_function and its TF map, no file read).
    assert all(w.metrics[tr.METRIC_WAIT_TIME] == w.metrics[tr.METRIC_RUN_TIME] for w in waits)
    assert all(w.attributes[VECTOR_SOURCE_ATTRIBUTE] == "metrics" for w in waits)
    assert {w.attributes[tr.ATTRIBUTE_WAITS_ON] for w in waits} == {"input pipeline (MapAndBatch)"}
    assert {w.attributes["pipeline_work"] for w in waits} == {"cpu 100%"}
    window = rec.steps[-1].end - rec.steps[0].start
    metrics = trace.metrics
    assert metrics["steps"] == 8 and metrics["step_time_s"] == pytest.approx(window / 8)
    assert metrics["input_wait_fraction"] == pytest.approx(sum(d for _, d in rec.timeline.input_waits) / window)
    assert metrics["cpu_utilization"] == pytest.approx(rec.cpu_seconds / window)
    assert metrics["tensor_bytes"] == 5_995_520
    pipeline_kernels = sum(op.duration for op in rec.timeline.ops if op.thread.startswith("tf_data"))
    assert metrics["input_work_cpu_s"] == pytest.approx(pipeline_kernels)  # no file or transfer kernels
    assert metrics["input_work_disk_s"] == 0 and metrics["input_work_network_s"] == 0
    assert metrics["tf.data.MapAndBatch_busy_s"] == pytest.approx(rec.timeline.stage_busy["MapAndBatch"])
    assert trace.environment.cores_per_executor == 2 and trace.environment.disk_bandwidth is None


def test_python_and_kernel_samples(trace: tr.Trace) -> None:
    samples = trace.samples
    assert samples is not None
    frames = [f.name for f in samples.frames]
    noisy = frames.index("__main__.main.<locals>.noisy")
    # 7 Python samples at 5 ms, each worth 5 of the trace's 1 ms samples, all inside the py_function.
    python = sum(c for s, c in zip(samples.stack, samples.count, strict=True) if noisy in samples.stacks[s])
    assert python == 35
    assert {samples.keys[k].operation for k, s in zip(samples.key, samples.stack, strict=True)
            if noisy in samples.stacks[s]} == {"s6/input", "s7/input", "s8/input", "s9/input"}
    kernel_frames = {f for f in frames if f.startswith("tensorflow.op.")}
    # The py_function's own kernel is not among them: the Python samples say what its time did. An op type's time
    # that makes no whole 1 ms sample in a part carries to its next part: 15 op types made one (the 283 Mul kernels'
    # 0.2 ms in all did not; Keras's eager ops around the compiled steps are the host's, not kernels of a step).
    assert len(kernel_frames) == 15 and "tensorflow.op._MklNativeFusedConv2D" in kernel_frames
    assert "tensorflow.op.PyFunc" not in kernel_frames
