"""Ops run eagerly (``model.compile(run_eagerly=True)``): read from a profile encoded by hand as TensorFlow's host
tracer writes one, and assembled into steps; and steps with no op timeline at all (Keras on another backend, the
profiler taken), which their Python samples describe (no TensorFlow)."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.integrations.tensorflow.assemble import EAGER_GROUP, WHOLE_STEP, build_trace
from crystalperf.integrations.tensorflow.reader import (
    EAGER_NODE,
    OpEvent,
    Recording,
    Step,
    Timeline,
    decode_xspace,
    timeline_from_planes,
    timeline_from_xspace,
)
from tests.unit.xplane_encoding import line, plane

MS = 10**9  # picoseconds


def _host_profile() -> bytes:
    """The training thread ran a MatMul eagerly (0-3 ms), called a compiled function (5-9 ms) whose kernel ran on
    the compute pool (6-8 ms), and asked tf.data for a batch eagerly (10-12 ms, waiting in GetNext); a tf.data
    thread ran a py_function that made a constant eagerly (1-2 ms)."""
    names = {1: "EagerLocalExecute: MatMul", 2: "EagerLocalExecute: __inference_train_function_12",
             3: "model/dense/MatMul:MatMul", 4: "EagerLocalExecute: IteratorGetNext",
             5: "IteratorGetNextOp::DoCompute", 6: "EagerLocalExecute: _EagerConst", 7: "EagerPyFunc:EagerPyFunc"}
    python = line("python", [(1, 0, 3 * MS, ()), (2, 5 * MS, 4 * MS, ()), (4, 10 * MS, 2 * MS, ()),
                             (5, 10 * MS, 2 * MS, ())])
    compute = line("tf_Compute/17", [(3, 6 * MS, 2 * MS, ())])
    data = line("tf_data_private_threadpool/3", [(7, 1 * MS, 1 * MS, ()), (6, 1 * MS, MS // 2, ())])
    return plane("/host:CPU", [python, compute, data], names)


def test_eager_ops_are_kernels_of_the_thread_that_ran_them() -> None:
    timeline = timeline_from_xspace(_host_profile())
    assert [(op.node, op.op_type, op.thread, op.start, op.duration) for op in timeline.ops] == [
        (EAGER_NODE, "MatMul", "python", 0.0, pytest.approx(0.003)),
        ("EagerPyFunc", "EagerPyFunc", "tf_data_private_threadpool", 0.001, pytest.approx(0.001)),
        ("model/dense/MatMul", "MatMul", "tf_Compute", 0.006, pytest.approx(0.002)),
    ]  # not the function's call, nor the GetNext (a wait), nor the constant inside the py_function's kernel
    assert timeline.input_waits == [(0.01, pytest.approx(0.002))]
    assert timeline == timeline_from_planes(decode_xspace(_host_profile()))


def test_a_kernel_budget_counts_eager_ops_as_kernels() -> None:
    timeline = timeline_from_xspace(_host_profile(), max_ops=2)
    assert [op.op_type for op in timeline.ops] == ["MatMul", "EagerPyFunc"] and timeline.dropped_ops == 1
    assert timeline.complete_until == pytest.approx(0.006)


def _eager_op(op_type: str, start: float, duration: float) -> OpEvent:
    return OpEvent(EAGER_NODE, op_type, start, duration, "python")


def test_an_eagerly_run_step_is_its_eager_ops_and_the_python_between_them() -> None:
    # Two steps of 20 ms run eagerly: a MatMul of 3 ms, then 40 Shape ops of 10 us (0.4 ms a step), the rest Python.
    # A third step ran a compiled function: its eager op is Keras's bookkeeping, the host's.
    timeline = Timeline()
    for t0 in (100.0, 100.02):
        timeline.ops.append(_eager_op("MatMul", t0 + 0.001, 0.003))
        timeline.ops += [_eager_op("Shape", t0 + 0.005 + i * 1e-4, 1e-5) for i in range(40)]
    timeline.ops += [OpEvent("StatefulPartitionedCall/sequential/dense/MatMul", "MatMul", 100.041, 0.01, "tf_Compute"),
                     _eager_op("OptionalHasValue", 100.055, 0.001)]
    rec = Recording(steps=[Step(2, 0, 100.0, 100.02), Step(3, 0, 100.02, 100.04), Step(4, 0, 100.04, 100.06)],
                    timeline=timeline, python_samples=None, threads=1, cpu_count=2, cpu_seconds=0.05,
                    memory_bytes=1 << 30, layer_names=frozenset({"sequential", "dense"}))
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    first, second, compiled = trace.operations
    # the ops' 3.4 ms (from the first, with the gap before it), then the Python that dispatched them
    assert [c.name for c in first.children] == [EAGER_GROUP, "host (Python, dispatch)"]
    eager, host = first.children
    assert (eager.start, eager.end, host.end) == pytest.approx((100.0, 100.0044, 100.02))
    assert eager.metrics == {"run_time_s": pytest.approx(0.0034), "cpu_time_s": pytest.approx(0.0034)}
    assert eager.attributes["kernels"] == "41"
    assert [c.name for c in compiled.children] == ["dense"]  # the OptionalHasValue is not a part of its own
    # Samples of 1 ms: MatMul 3 a step; Shape's 0.4 ms makes no sample in the first step and carries to the
    # second, where 0.8 ms makes one.
    samples = trace.samples
    assert samples is not None
    frames = [f.name for f in samples.frames]
    counts: dict[tuple[str, str], int] = {}
    for key, stack, count in zip(samples.key, samples.stack, samples.count, strict=True):
        name = frames[samples.stacks[stack][-1]].removeprefix("tensorflow.op.")
        where = samples.keys[key].operation
        counts[(where, name)] = counts.get((where, name), 0) + count
    assert counts == {("s2/eager-ops", "MatMul"): 3, ("s3/eager-ops", "MatMul"): 3, ("s3/eager-ops", "Shape"): 1,
                      ("s4/dense", "MatMul"): 10}


def test_steps_without_an_op_timeline_are_one_part_named_by_their_python_samples() -> None:
    # Keras on PyTorch (or TensorFlow's profiler taken): two steps of 0.5 s, the training thread sampled every
    # 10 ms in Keras's matmul 30 times and in the backward pass 20 times, a generator's input code 5 times.
    frames = [tr.Frame(name="keras.src.backend.torch.numpy.matmul", language="python"),
              tr.Frame(name="torch.autograd.graph._engine_run_backward", language="python"),
              tr.Frame(name="loader.next_batch", language="python")]
    samples = tr.StackSamples(
        interval_s=0.01, bucket_s=1.0, origin=100.0, frames=frames, stacks=[[0], [1], [2]],
        keys=[tr.SampleKey(operation="s0", thread="main"), tr.SampleKey(operation="s1", thread="main"),
              tr.SampleKey(operation="s1/input", thread="loader")],
        key=[0, 1, 1, 2], bucket=[0, 0, 0, 0], stack=[0, 0, 1, 2], count=[15, 15, 20, 5])
    rec = Recording(steps=[Step(0, 0, 100.0, 100.5), Step(1, 0, 100.5, 101.0)], timeline=None, python_samples=samples,
                    threads=2, cpu_count=2, cpu_seconds=1.0, memory_bytes=None,
                    properties={"keras.backend": "torch"}, warnings=["Keras runs on its torch backend"])
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    parts = [step.children for step in trace.operations]
    assert [[(p.id, p.name, p.start, p.end) for p in step] for step in parts] == [
        [("s0/training-step-Python-samples", WHOLE_STEP, 100.0, 100.5)],
        [("s1/training-step-Python-samples", WHOLE_STEP, 100.5, 101.0)]]
    assert trace.samples is not None
    # each 10 ms sample is 10 of the trace's 1 ms samples, all on the step's one part (the input code's too)
    by_part: dict[str, int] = {}
    for key, count in zip(trace.samples.key, trace.samples.count, strict=True):
        by_part[trace.samples.keys[key].operation] = by_part.get(trace.samples.keys[key].operation, 0) + count
    assert by_part == {"s0/training-step-Python-samples": 150, "s1/training-step-Python-samples": 400}
    report = analyze(trace, classifier=KeywordClassifier(), scenarios=[]).report
    assert "most of it in training step (Python samples)" in report["bottleneck"]["sentence"]
