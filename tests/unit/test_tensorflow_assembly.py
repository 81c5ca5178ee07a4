"""The Keras callback's trace assembly and its threads model, on hand-made timelines (no TensorFlow)."""

from __future__ import annotations

import pytest

from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.profile.dag import build_profile
from crystalperf.integrations.tensorflow.assemble import (
    build_trace,
    kernel_core_seconds,
    later_step_metrics,
    layer_name,
    op_group,
    pipeline_split,
)
from crystalperf.integrations.tensorflow.reader import OpEvent, Recording, Step, Timeline
from crystalperf.integrations.tensorflow.tiling import iteration_starts
from crystalperf.integrations.tensorflow.whatif import (
    amdahl_factor,
    kernel_utilization,
    parallel_fraction,
    step_utilization,
)

LAYERS = frozenset({"sequential", "conv_a", "dense"})


@pytest.mark.parametrize(("node", "expected"), [
    ("StatefulPartitionedCall/sequential_1/conv_a_1/Relu", ("conv_a", "forward")),
    ("StatefulPartitionedCall/gradient_tape/sequential_1/conv_a_1/convolution/Conv2DBackpropInput",
     ("conv_a backward", "backward")),
    ("StatefulPartitionedCall/adam/Mul_19", ("adam", "update")),
    ("StatefulPartitionedCall/Sub_2/ReadVariableOp", ("other", "other")),
    ("AssignAddVariableOp", ("other", "other")),
    ("StatefulPartitionedCall/compile_loss/sparse_categorical_crossentropy/Sum", ("compile_loss", "forward")),
    # steps_per_execution=4: the step's graph in a while loop under a tf.cond (a real profile's node names)
    ("while/body/_1/while/cond/then/_119/while/cond/StatefulPartitionedCall/gradient_tape/sequential_1/dense_1/MatMul",
     ("dense backward", "backward")),
    ("while/body/_1/while/cond/then/_119/while/cond/StatefulPartitionedCall/adam/Add_4", ("adam", "update")),
    ("while/body/_1/while/LoopCond", ("other", "other")),
])
def test_kernels_are_grouped_by_keras_layer(node: str, expected: tuple[str, str]) -> None:
    assert op_group(node, LAYERS) == expected


def test_uniquified_scopes_map_back_to_layers() -> None:
    assert layer_name("conv2d_1_2", frozenset({"conv2d_1"})) == "conv2d_1"
    assert layer_name("unknown_3", LAYERS) == "unknown_3"


def test_parallel_fraction_and_amdahl_by_hand() -> None:
    # U = 1.5 on 2 threads: p = (1 - 1/1.5) / (1 - 1/2) = 2/3.
    p = parallel_fraction(1.5, 2)
    assert p == pytest.approx(2 / 3)
    # 2 -> 1 thread: (1/3 + 2/3) / (1/3 + 1/3) = 1.5; 2 -> 4: (1/3 + 1/6) / (2/3) = 0.75.
    assert amdahl_factor(p, 2, 1) == pytest.approx(1.5)
    assert amdahl_factor(p, 2, 4) == pytest.approx(0.75)
    assert parallel_fraction(5.0, 2) == 1.0 and parallel_fraction(0.5, 2) == 0.0


def test_the_input_pipeline_s_cpu_is_not_the_steps_parallel_work() -> None:
    # 10 steps of 0.2 s (a 2 s window) at 1.8 cores, of which tf.data's kernels ran 0.4 CPU-s: 0.2 cores.
    metrics = {"cpu_utilization": 1.8, "steps": 10.0, "step_time_s": 0.2, "input_work_cpu_s": 0.4}
    assert step_utilization(metrics) == pytest.approx(1.6)
    # p = (1 - 1/1.6) / (1/2) = 0.75, and 2 -> 1 thread costs (0.25 + 0.75) / (0.25 + 0.375) = 1.6x, not 1.8x.
    assert amdahl_factor(parallel_fraction(1.6, 2), 2, 1) == pytest.approx(1.6)
    assert step_utilization({"cpu_utilization": 1.8}) == pytest.approx(1.8)
    assert step_utilization({"steps": 10.0}) is None


def _kernel(node: str, op_type: str, start: float, duration: float, thread: str = "tf_Compute") -> OpEvent:
    return OpEvent(node, op_type, start, duration, thread)


def _recording() -> Recording:
    # Two 1 s steps. In each: 0.4 s waiting for input, then conv_a forward 0.3 s, dense 0.2 s.
    # The pipeline ran ReadFile 0.3 s and DecodePng 0.1 s per step: its wait is 3/4 disk, 1/4 CPU.
    timeline = Timeline()
    for t0 in (100.0, 101.0):
        timeline.input_waits.append((t0 + 0.0, 0.4))
        timeline.ops += [
            _kernel("ReadFile", "ReadFile", t0 + 0.0, 0.3, "tf_data_private_threadpool"),
            _kernel("DecodePng", "DecodePng", t0 + 0.3, 0.1, "tf_data_private_threadpool"),
            _kernel("StatefulPartitionedCall/sequential/conv_a/Relu", "_MklNativeFusedConv2D", t0 + 0.4, 0.3),
            _kernel("StatefulPartitionedCall/sequential/dense/BiasAdd", "_MklNativeFusedMatMul", t0 + 0.7, 0.2),
        ]
    return Recording(
        steps=[Step(2, 0, 100.0, 101.0), Step(3, 0, 101.0, 102.0)], timeline=timeline, python_samples=None,
        threads=2, cpu_count=2, cpu_seconds=3.0, memory_bytes=8 << 30, layer_names=LAYERS,
    )


def test_steps_become_operations_with_the_input_wait_and_layers_in_order() -> None:
    rec = _recording()
    assert pipeline_split(rec.timeline) == pytest.approx((0.25, 0.75, 0.0))
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    assert [s.id for s in trace.operations] == ["s2", "s3"]
    step = trace.operations[0]
    assert [(c.id, c.parents, c.start, c.end) for c in step.children] == [
        ("s2/input", [], 100.0, 100.4), ("s2/conv_a", ["s2/input"], 100.4, 100.7),
        ("s2/dense", ["s2/conv_a"], 100.7, 101.0)]  # the parts cover the step; dense takes its tail
    wait = step.children[0]
    # The training thread waited 0.4 s for its batch: measured waiting, on the pipeline, whatever it did.
    assert wait.metrics == {"run_time_s": pytest.approx(0.4), "wait_time_s": pytest.approx(0.4)}
    assert wait.attributes["waits_on"] == "input pipeline" and wait.attributes["vector_source"] == "metrics"
    assert wait.attributes["pipeline_work"] == "cpu 25%, disk 75%"
    conv = step.children[1]
    # Its kernels ran on the compute pool: 0.3 s of measured compute, the whole of its kernel time.
    assert conv.attributes["resources"] == "cpu" and conv.attributes["vector_source"] == "metrics"
    assert conv.metrics == {"run_time_s": pytest.approx(0.3), "cpu_time_s": pytest.approx(0.3)}
    assert trace.metrics["input_wait_fraction"] == pytest.approx(0.4)
    assert trace.metrics["cpu_utilization"] == pytest.approx(1.5)
    assert trace.metrics["step_time_s"] == pytest.approx(1.0)
    # 0.3 s of conv = 300 samples of 1 ms of its kernel's frame, per step.
    samples = trace.samples
    conv_frame = next(i for i, f in enumerate(samples.frames) if f.name.endswith("_MklNativeFusedConv2D"))
    conv_rows = [c for s, c in zip(samples.stack, samples.count, strict=True) if samples.stacks[s] == [conv_frame]]
    assert sum(conv_rows) == 600


def test_a_step_tail_longer_than_the_last_layers_kernels_is_the_hosts() -> None:
    # dense ran 2 ms of kernels, then the step went back to Python for 98 ms (Keras's loop, callbacks, or a wait
    # for the interpreter's lock that input code in Python threads held): the host's time, not dense's work
    rec = _recording()
    rec.timeline.ops = [op if "dense" not in op.node else _kernel(op.node, op.op_type, op.start, 0.002)
                        for op in rec.timeline.ops]
    for t0 in (100.0, 101.0):
        rec.timeline.ops.append(_kernel("StatefulPartitionedCall/sequential/dense/Relu", "Relu", t0 + 0.8, 0.05))
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    step = trace.operations[0]
    assert [c.name for c in step.children] == ["input pipeline (wait)", "conv_a", "dense", "host (Python, dispatch)"]
    dense, host = step.children[2:]
    assert (dense.start, dense.end, host.end) == pytest.approx((100.7, 100.752, 101.0))
    assert host.start == dense.end and host.parents == [dense.id] and host.attributes["placement"] == "host"
    # a tail within the group's own busy time stays its dispatch (the test above: dense's 0.2 s takes 0.1 s)


def test_small_groups_fold_into_other_but_the_optimizer_update_stays() -> None:
    # Kernel time per step 0.5 s + tiny 5 ms + adam 5 ms + mid (15 ms in the first step, 5 ms in the
    # second): 1.04 s over the window, 2 % of it = 20.8 ms. tiny (10 ms) and mid (20 ms) fold into "other"
    # in both steps -- mid too, though it is 2.9 % of the first step alone; adam (10 ms) keeps its part.
    rec = _recording()
    for t0, mid in ((100.0, 0.015), (101.0, 0.005)):
        rec.timeline.ops += [
            _kernel("StatefulPartitionedCall/sequential/tiny/Relu", "Relu", t0 + 0.90, 0.005),
            _kernel("StatefulPartitionedCall/sequential/mid/Relu", "Relu", t0 + 0.91, mid),
            _kernel("StatefulPartitionedCall/adam/Mul_19", "Mul", t0 + 0.95, 0.005),
        ]
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    for step, other in zip(trace.operations, (0.020, 0.010), strict=True):
        names = {c.name: c for c in step.children}
        assert {"conv_a", "dense", "adam", "other"} <= set(names) and not {"tiny", "mid"} & set(names)
        assert names["adam"].attributes["phase"] == "update"
        assert names["other"].metrics["run_time_s"] == pytest.approx(other)


def test_bottleneck_and_threads_prediction_of_the_assembled_trace() -> None:
    trace = build_trace(_recording(), run_id="fit-1", name="m", framework_version="2.21.0")
    profile = build_profile(trace, KeywordClassifier(), locators=[])
    # The parts tile each step: wait 0.4, conv 0.3, dense 0.2 + the 0.1 s tail of the step (dispatch, Python)
    # it absorbs: CPU 0.6 per step. The wait is for the input pipeline, whose kernels (3/4 disk, 1/4 CPU)
    # explain it: it is the pipeline's time on the path, 0.3 s disk and 0.1 s CPU per step.
    from crystalperf.core.profile.bottleneck import find_bottleneck

    found = find_bottleneck(profile)
    assert found.resource == "cpu"
    assert found.seconds["waiting"] == pytest.approx(0.0) and found.seconds["cpu"] == pytest.approx(1.4)
    assert found.seconds["disk"] == pytest.approx(0.6)
    # Most of the CPU is the steps' own, so the verdict is not "through the input".
    assert found.upstream_work is None
    # 2 -> 1 thread. From above: U = 1.5, of which the pipeline's DecodePng (0.1 CPU-s per 1 s step) is 0.1 cores:
    # the steps' threads 1.4, p = (1 - 1/1.4) / (1/2) = 4/7. From below: one kernel at a time, 0.5 s a step, and
    # 0.1 s of host time beside the 0.4 s wait: 0.6 threads' work, p = 0. Midway, p = 2/7: the steps' CPU parts
    # x1 / (5/7 + 1/7) = x7/6 -> each step 1.0 + 0.6 / 6 = 1.1 s; 2 steps: 2.2 s. The wait given to the
    # pipeline's CPU stays as it was: prefetching, not the step's threads.
    predictor = Predictor(profile)
    prediction = predictor.predict(Changes.parse(["cores=1"]), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(2.2)
    # The band spans both ends: p = 0, the steps as they were (2 x 1.0 s), to p = 4/7 (x1.4 -> 2 x 1.24 s).
    banded = predictor.predict(Changes.parse(["cores=1"]))
    assert banded.crystalperf.runtime_s == pytest.approx(2.2)
    assert banded.crystalperf.model_low_s == pytest.approx(2.0) and banded.crystalperf.model_high_s == pytest.approx(2.48)
    assert any("parallel fraction of 0.00 to 0.57" in note for note in banded.notes)
    assert predictor.predict(Changes.parse(["cores=1"]), band=False).crystalperf.runtime_s == pytest.approx(2.2)


def test_kernels_side_by_side_bound_the_parallel_fraction_from_below() -> None:
    # In a 1 s window: A 0-0.6 s and B 0.2-0.8 s on the compute threads, so 0.8 s busy and 0.2 + 2 x 0.4 + 0.2 =
    # 1.2 core-seconds; the pipeline's kernel and the accelerator's are not the host's training kernels.
    timeline = Timeline()
    timeline.ops = [_kernel("a", "Conv2D", 0.0, 0.6), _kernel("b", "MatMul", 0.2, 0.6),
                    _kernel("r", "ReadFile", 0.0, 1.0, "tf_data_private_threadpool"),
                    OpEvent("g", "Conv2D", 0.0, 1.0, "/device:GPU:0", device=True)]
    assert kernel_core_seconds(timeline, 0.0, 1.0, 2) == pytest.approx((0.8, 1.2))
    assert kernel_core_seconds(timeline, 0.0, 1.0, 1) == pytest.approx((0.8, 0.8))  # no more than the cores
    assert kernel_core_seconds(timeline, 0.5, 1.0, 2) == pytest.approx((0.3, 0.4))  # the window cuts A and B
    # 0.2 s of host time beside the kernels: (0.2 + 1.2) / 1 s = 1.4 threads' work, p >= (1 - 1/1.4) / (1/2) = 4/7.
    metrics = {"steps": 1.0, "step_time_s": 1.0, "kernel_busy_s": 0.8, "kernel_core_s": 1.2, "cpu_utilization": 1.8}
    assert kernel_utilization(metrics) == pytest.approx(1.4)
    # A wait for the input is neither: with 0.1 s of it, 1.3 threads' work.
    assert kernel_utilization({**metrics, "input_wait_fraction": 0.1}) == pytest.approx(1.3)
    assert kernel_utilization({"steps": 1.0, "step_time_s": 1.0}) is None


def test_the_trace_records_the_kernels_side_by_side_on_the_host_only() -> None:
    # the recording's two steps run conv_a 0.3 s and dense 0.2 s one after the other: 1.0 s busy, 1.0 core-seconds
    metrics = build_trace(_recording(), run_id="fit-1", name="m", framework_version="2.21.0").metrics
    assert (metrics["kernel_busy_s"], metrics["kernel_core_s"]) == pytest.approx((1.0, 1.0))
    # with an accelerator the host's time beside its kernels is partly the device's: no lower bound
    rec = _recording()
    rec.timeline.ops.append(OpEvent("g", "Conv2D", 100.5, 0.1, "/device:GPU:0", device=True))
    assert "kernel_core_s" not in build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0").metrics


def test_the_report_gives_the_mean_step_time_and_predicted_step_times() -> None:
    from crystalperf.core.analysis import analyze

    trace = build_trace(_recording(), run_id="fit-1", name="m", framework_version="2.21.0")
    report = analyze(trace, classifier=KeywordClassifier(), locators=[],
                     scenarios=[Changes.parse(["cores=1"])]).report
    assert report["iterations"]["steps"] == 2 and report["iterations"]["step_time_s"] == pytest.approx(1.0)
    assert report["iterations"]["predicted_step_time_s"]["cores=1"] == pytest.approx(1.1)
    assert report["input_bound"]["highly_input_bound"]  # 40 % of each step waits for input


def test_a_step_waits_for_what_prefetching_cannot_hide() -> None:
    from crystalperf.integrations.tensorflow.whatif import new_wait

    assert new_wait(0.4, 0.6, 1.0, 1.5) == pytest.approx(0.9)  # at the limit: +0.5 s per batch shows in full
    assert new_wait(0.0, 1.0, 0.3, 0.8) == 0.0  # 0.8 s per batch still hides behind 1 s of compute
    assert new_wait(0.0, 1.0, 0.3, 1.5) == pytest.approx(0.5)
    assert new_wait(0.0005, 1.0, 0.3, 0.2) == 0.0005  # the iterator call's own cost, not the pipeline's limit
    # a pipeline a little slower that still hides behind the compute: the call's own cost stays (it was dropped)
    assert new_wait(0.0005, 1.0, 0.3, 0.31) == 0.0005
    assert new_wait(0.0005, 1.0, 0.3, 1.5) == pytest.approx(0.5005)  # and what it no longer hides comes on top


def test_slower_storage_by_the_bytes_read() -> None:
    rec = _recording()
    rec.read_bytes = 60_000_000
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    # ReadFile 0.3 s per step, one kernel at a time: 60 MB in 0.6 s -> the storage gave >= 100 MB/s.
    assert trace.environment.disk_bandwidth == pytest.approx(100e6)
    profile = build_profile(trace, KeywordClassifier(), locators=[])
    # At 50 MB/s the 60 MB take 1.2 s: the pipeline needs (0.2 + 1.2) / 2 = 0.7 s per batch instead of
    # 0.4; each step already waited 0.4 s, so it waits 0.7 s: 1.3 s per step, 2.6 s in all.
    prediction = Predictor(profile).predict(Changes.parse(["disk=50MB/s"]), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(2.6)
    assert any("60.0 MB read from storage" in n for n in prediction.notes)


def _input_bound_recording() -> Recording:
    # Two 1 s steps that each wait 0.8 s for a batch while a py_function map sleeps: 0.2 s of compute.
    timeline = Timeline()
    for t0 in (100.0, 101.0):
        timeline.input_waits.append((t0, 0.8))
        timeline.stage_busy["Root"] += 0.8
        timeline.stage_busy["ParallelMapV2"] += 0.8
        timeline.ops += [
            _kernel("EagerPyFunc", "EagerPyFunc", t0, 0.8, "tf_data_private_threadpool"),
            _kernel("StatefulPartitionedCall/sequential/dense/BiasAdd", "_MklNativeFusedMatMul", t0 + 0.8, 0.2),
        ]
    return Recording(steps=[Step(2, 0, 100.0, 101.0), Step(3, 0, 101.0, 102.0)], timeline=timeline,
                     python_samples=None, threads=2, cpu_count=2, cpu_seconds=0.5, memory_bytes=8 << 30,
                     layer_names=LAYERS)


def test_a_step_waiting_for_its_input_pipeline_is_input_bound_not_cpu_bound() -> None:
    from crystalperf.core.analysis import analyze

    trace = build_trace(_input_bound_recording(), run_id="fit-1", name="m", framework_version="2.21.0")
    wait = trace.operations[0].children[0]
    assert wait.attributes["waits_on"] == "input pipeline (ParallelMapV2)"  # the busiest dataset, not Root
    # The pipeline's time was a py_function's: its kernels cannot say what that did (here: sleep).
    assert "waits_on_work" not in wait.attributes
    # and the sampler saw none of its code: the trace says so
    assert any(w.startswith("the input pipeline's work was Python functions (py_function, Dataset.from_generator: "
                            "1.60 s of PyFunc kernels") for w in trace.warnings), trace.warnings
    report = analyze(trace, classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    bottleneck = report["bottleneck"]
    assert bottleneck["resource"] == "waiting", bottleneck
    assert bottleneck["waiting_on"] == "waiting on input pipeline (ParallelMapV2)"
    assert bottleneck["seconds"]["waiting"] == pytest.approx(1.6) and bottleneck["seconds"]["cpu"] == pytest.approx(0.4)
    inputs = [o for o in report["operations"] if o["kind"] == "input"]
    assert all(o["vector"]["waiting"] == 1 and o["measured"] == {"waiting": 1.0} for o in inputs), inputs


def test_python_samples_keep_their_thread_states() -> None:
    from crystalperf.core import trace as tr
    from crystalperf.core.record.sampletable import SampleTable

    python = SampleTable(100.0, interval_s=0.005)
    frame = python.frame_id("__main__.slow_map", "/job/train.py", 10)
    sleep = python.frame_id("time.sleep", None, None)
    key = tr.SampleKey(operation="s2/input", thread="tf_data_private_threadpool")
    python.add(key, python.stack_id([sleep, frame], tr.THREAD_WAITING), 100.1, 3)
    python.add(key, python.stack_id([frame], tr.THREAD_RUNNABLE), 100.2, 1)
    rec = _input_bound_recording()
    rec.python_samples = python.to_samples()
    built = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    assert not any(w.startswith("the input pipeline's work was Python functions") for w in built.warnings)
    samples = built.samples
    assert samples is not None
    states = {tuple(samples.frames[i].name for i in stack): samples.state_of(s)
              for s, stack in enumerate(samples.stacks) if samples.frames[stack[-1]].name == "__main__.slow_map"}
    assert states == {("time.sleep", "__main__.slow_map"): "waiting", ("__main__.slow_map",): "runnable"}


def test_a_step_waiting_for_a_pipeline_that_reads_files_is_disk_bound_through_it() -> None:
    from crystalperf.core.analysis import analyze

    rec = _input_bound_recording()
    assert rec.timeline is not None
    # The same waits, but the pipeline's time went to file reads (0.6 s of every 0.8 s) and a map (0.2 s).
    rec.timeline.ops = [o for o in rec.timeline.ops if o.op_type != "EagerPyFunc"]
    for t0 in (100.0, 101.0):
        rec.timeline.ops += [_kernel("ReadFile", "ReadFile", t0, 0.6, "tf_data_private_threadpool"),
                             _kernel("DecodeCSV", "DecodeCSV", t0 + 0.6, 0.2, "tf_data_private_threadpool")]
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    wait = trace.operations[0].children[0]
    assert wait.attributes["waits_on_work"] == "cpu=0.2500,disk=0.7500,network=0.0000"
    bottleneck = analyze(trace, classifier=KeywordClassifier(), locators=[], scenarios=[]).report["bottleneck"]
    assert bottleneck["resource"] == "disk"
    assert bottleneck["sentence"].startswith("The job is disk-bound through its input")


def test_file_reads_of_a_window_that_read_nothing_from_storage_are_page_cache_copies() -> None:
    from crystalperf.core.analysis import analyze

    rec = _recording()
    rec.read_bytes = 0  # /proc/self/io: the files came from the page cache
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    assert trace.operations[0].children[0].attributes["waits_on_work"] == "cpu=1.0000,disk=0.0000,network=0.0000"
    assert trace.metrics["input_work_disk_s"] == 0.0 and trace.metrics["input_work_cpu_s"] == pytest.approx(0.8)
    report = analyze(trace, classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    assert report["bottleneck"]["resource"] == "cpu"
    inputs = [o for o in report["operations"] if o["kind"] == "input"]
    assert inputs and all(o["vector"]["cpu"] == 1 for o in inputs), inputs


def test_input_code_sampled_in_some_steps_says_what_the_pipeline_did_in_all() -> None:
    # A generator computing in Python, caught by the sampler in the first step's wait only (calls shorter than the
    # interpreter's switch interval are seldom caught): both steps' waits are that code's CPU.
    from crystalperf.core import trace as tr
    from crystalperf.core.analysis import analyze
    from crystalperf.core.record.sampletable import SampleTable

    python = SampleTable(100.0, interval_s=0.02)
    generator = python.frame_id("__main__.gen", "/job/train.py", 12)
    driver = python.frame_id("tensorflow.python.data.ops.from_generator_op.generator_py_func",
                             "/tf/python/data/ops/from_generator_op.py", 40)
    key = tr.SampleKey(operation="s2/input", thread="tf_data_private_threadpool")
    python.add(key, python.stack_id([generator, driver], tr.THREAD_RUNNABLE), 100.3, 10)
    rec = _input_bound_recording()
    rec.python_samples = python.to_samples()
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    report = analyze(trace, classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    inputs = [o for o in report["operations"] if o["kind"] == "input"]
    assert len(inputs) == 2 and all(o["vector"]["cpu"] == pytest.approx(1.0) for o in inputs), inputs
    assert report["bottleneck"]["sentence"].startswith("The job is cpu-bound through its input")


def test_a_step_of_several_batches_waits_as_long_as_its_waits() -> None:
    """steps_per_execution=4: one callback step runs four batches, each fetched by its own GetNext. The step waited
    4 x 0.02 s, not from its first wait to its last (0.77 s, nearly the whole step); the dense kernels between the
    waits are the step's work."""
    from crystalperf.core.analysis import analyze

    timeline = Timeline()
    for t0 in (100.0, 101.0):
        for batch in range(4):
            at = t0 + 0.25 * batch
            timeline.input_waits.append((at, 0.02))
            timeline.ops.append(_kernel("StatefulPartitionedCall/sequential/dense/BiasAdd", "_MklNativeFusedMatMul",
                                        at + 0.02, 0.23))
            timeline.ops.append(_kernel("BatchV2", "BatchV2", at, 0.02, "tf_data_private_threadpool"))
    rec = Recording(steps=[Step(2, 0, 100.0, 101.0), Step(3, 0, 101.0, 102.0)], timeline=timeline,
                    python_samples=None, threads=2, cpu_count=2, cpu_seconds=2.0, memory_bytes=8 << 30,
                    layer_names=LAYERS)
    trace = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0")
    wait = trace.operations[0].children[0]
    assert (wait.start, wait.end) == pytest.approx((100.0, 100.08))
    assert wait.metrics["run_time_s"] == pytest.approx(0.08)
    assert trace.metrics["input_wait_fraction"] == pytest.approx(0.08)
    report = analyze(trace, classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    assert report["bottleneck"]["resource"] == "cpu", report["bottleneck"]


def test_a_step_of_several_iterations_is_the_sum_of_its_iterations() -> None:
    # steps_per_execution=2: one 25 ms Keras step runs the train step twice in a while loop whose condition is
    # evaluated before each iteration (at 0 and 10 ms). Each iteration: dense 2 ms from +1 ms, adam 1 ms from +4 ms;
    # then Python until the next iteration (5 ms) and after the last (10 ms).
    loop = "while/body/_1/while/cond/then/_119/while/cond/StatefulPartitionedCall"
    ops = []
    for t0 in (100.0, 100.010):
        ops += [_kernel("while/cond/_0/while/Less", "Less", t0, 1e-6),
                _kernel(f"{loop}/sequential/dense/MatMul", "_MklMatMul", t0 + 0.001, 0.002),
                _kernel(f"{loop}/adam/Sub", "Sub", t0 + 0.004, 0.001)]
    rec = Recording(steps=[Step(2, 0, 100.0, 100.025)], timeline=Timeline(ops=ops), python_samples=None, threads=2,
                    cpu_count=2, cpu_seconds=0.03, memory_bytes=None, layer_names=LAYERS)
    assert iteration_starts(ops) == [100.0, 100.010]
    step = build_trace(rec, run_id="fit-1", name="m", framework_version="2.21.0").operations[0]
    # each iteration tiled as a step: the loop's condition takes the 1 ms up to dense, dense its 2 ms and the
    # dispatch up to adam, adam its 1 ms, the host the rest; summed over both iterations, laid end to end
    assert [(c.name, round(c.end - c.start, 6)) for c in step.children] == [
        ("other", 0.002), ("dense", 0.006), ("adam", 0.002), ("host (Python, dispatch)", 0.015)]
    assert step.children[0].start == step.start and step.children[-1].end == step.end
    assert all(b.parents == [a.id] for a, b in zip(step.children, step.children[1:], strict=False))


def test_the_profiled_steps_are_set_beside_the_steps_timed_after_them() -> None:
    """Medians by hand: the profiled steps after the first (whose begin follows the profiler's start) 20, 22, 24
    and 21 ms -> 21.5 ms; the later steps 20, 19, 21, 20, 20 and 30 ms -> 20 ms. Their standard errors from the
    median absolute deviations (1 ms and 0.5 ms): 1.2533 * 1.4826 * MAD / sqrt(n) = 0.929 ms and 0.379 ms, so the
    ratio 1.075 is known to 1.075 * hypot(0.929 / 21.5, 0.379 / 20) = 0.0507."""
    starts = [100.0, 100.5, 100.52, 100.542, 100.566, 100.587]
    steps = [Step(2 + i, 0, a, b) for i, (a, b) in enumerate(zip(starts, starts[1:], strict=False))]
    rec = Recording(steps=steps, timeline=None, python_samples=None, threads=2, cpu_count=2, cpu_seconds=1.0,
                    memory_bytes=None, later_step_s=[0.020, 0.019, 0.021, 0.020, 0.020, 0.030])
    metrics = later_step_metrics(rec)
    assert metrics["profiled_step_median_s"] == pytest.approx(0.0215)
    assert metrics["later_step_median_s"] == pytest.approx(0.020)
    assert metrics["later_steps"] == 6
    assert metrics["step_slowdown_se"] == pytest.approx(0.0507, abs=5e-4)
    # too few steps after the window (or in it) to say anything
    assert later_step_metrics(Recording(steps=steps, timeline=None, python_samples=None, threads=2, cpu_count=2,
                                        cpu_seconds=1.0, memory_bytes=None, later_step_s=[0.02] * 4)) == {}
    assert later_step_metrics(Recording(steps=steps[:3], timeline=None, python_samples=None, threads=2, cpu_count=2,
                                        cpu_seconds=1.0, memory_bytes=None, later_step_s=[0.02] * 9)) == {}
