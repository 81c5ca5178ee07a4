"""Real Keras ``fit`` runs with CrystalPerfCallback: images on disk through tf.data, the report's
contents, the input-bound and compute-bound diagnoses (paper §7.1, "diagnosing slow iteration"),
and the callback's failures never failing ``fit``."""

from __future__ import annotations

import gzip
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
np = pytest.importorskip("numpy")

from crystalperf.core.trace import load_trace  # noqa: E402
from crystalperf.integrations.tensorflow import CrystalPerfCallback  # noqa: E402

from .blkio import blkio_unavailable, read_limited  # noqa: E402


def _report(out: Path, timeout_s: float = 600) -> dict[str, Any]:
    """The report the callback's finish process writes after fit returned (fit does not wait for it)."""
    path = out / "crystalperf-report.json"
    deadline = time.monotonic() + timeout_s
    while not path.is_file():
        assert time.monotonic() < deadline, f"no report in {out} after {timeout_s} s: {_log(out)}"
        time.sleep(0.2)
    return json.loads(path.read_text())


def _log(out: Path) -> str:
    log_path = out / "crystalperf-analysis.log"
    return log_path.read_text()[-3000:] if log_path.is_file() else "no analysis log"


def _ops(report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [o for o in report["operations"] if o["kind"] == kind]


def _assert_no_plumbing_top_function(report: dict[str, Any]) -> None:
    """Sleeps, locks, queues and thread pools are never what an operation's time is said to be spent in."""
    from crystalperf.core.attribution.waiting import is_plumbing

    plumbing = {(o["name"], f["name"]) for o in report["operations"] for f in o["top_functions"]
                if is_plumbing(f["name"])}
    assert not plumbing, plumbing


@pytest.fixture(scope="module")
def image_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """128 PNG images of 48x48 written to disk, as a user's image folder would be."""
    folder = tmp_path_factory.mktemp("images")
    rng = tf.random.Generator.from_seed(7)
    paths = []
    for i in range(128):
        image = tf.cast(rng.uniform((48, 48, 3), 0, 255), tf.uint8)
        path = folder / f"img-{i:03d}.png"
        tf.io.write_file(str(path), tf.io.encode_png(image))
        paths.append(str(path))
    return paths


def _image_dataset(files: list[str], batch: int = 16) -> Any:
    def load(path: Any, label: Any) -> Any:
        image = tf.io.decode_png(tf.io.read_file(path), channels=3)
        image = tf.image.random_flip_left_right(tf.cast(image, tf.float32) / 255.0)
        image = tf.image.random_crop(image, (40, 40, 3))
        return image, label

    labels = [i % 10 for i in range(len(files))]
    return (tf.data.Dataset.from_tensor_slices((files, labels)).map(load, num_parallel_calls=2)
            .batch(batch).prefetch(2))


def _cnn(width: int = 16, input_shape: tuple[int, ...] = (40, 40, 3), jit_compile: bool = False) -> Any:
    model = keras.Sequential([
        keras.Input(input_shape),
        keras.layers.Conv2D(width, 3, activation="relu", name="conv_a"),
        keras.layers.MaxPooling2D(name="pool"),
        keras.layers.Conv2D(width * 2, 3, activation="relu", name="conv_b"),
        keras.layers.GlobalAveragePooling2D(name="gap"),
        keras.layers.Dense(10, name="logits"),
    ])
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit_compile)
    return model


def _steady_image_batches() -> Any:
    """16 batches in memory, for one epoch whose profiled steps (2..11) are all alike: the first step of a second
    epoch sometimes waits about a second on the host (a new iterator over the cache; seen with and without the
    callback), which a GPU would not shorten and which would make a compute-bound window look partly host-bound."""
    images = tf.random.stateless_uniform((512, 48, 48, 3), seed=(1, 2))
    labels = tf.random.stateless_uniform((512,), seed=(3, 4), maxval=10, dtype=tf.int32)
    return tf.data.Dataset.from_tensor_slices((images, labels)).batch(32).cache().prefetch(2)


def test_cnn_on_images_from_disk_gets_a_report(image_files: list[str], tmp_path: Path) -> None:
    out = tmp_path / "report"
    callback = CrystalPerfCallback(output_dir=out, steps=12)
    history = _cnn().fit(_image_dataset(image_files), epochs=2, callbacks=[callback], verbose=0)
    assert len(history.history["loss"]) == 2  # the callback did not disturb training

    report = _report(out)
    assert (out / "crystalperf-report.html").is_file() and callback.trace_path == out / "crystalperf-trace.json.gz"
    assert report["application"]["framework"] == "tensorflow"
    assert report["iterations"]["steps"] == 12 and report["iterations"]["step_time_s"] > 0
    steps = _ops(report, "step")
    assert len(steps) == 12  # steps 2..13 of 16: warm-up skipped, the window crosses the epoch boundary
    assert {s["name"].split(" (")[0] for s in steps} == {f"step {i}" for i in range(2, 14)}
    groups = {o["name"] for o in _ops(report, "op")}
    # Kernels grouped by the Keras layer in their node names, forward and backward, plus the optimizer.
    assert {"conv_a", "conv_b", "conv_a backward", "conv_b backward"} <= groups, groups
    assert any(o["name"] == "input pipeline (wait)" for o in _ops(report, "input"))
    assert "adam" in groups
    edges = {(e["from"], e["to"]) for e in report["edges"]}
    first = steps[0]["path"]
    inside = [(a, b) for a, b in edges if a.startswith(first + "/") and b.startswith(first + "/")]
    assert inside, "the step's parts are chained by their order of execution"

    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert trace.metrics["steps"] == 12 and 0 <= trace.metrics["input_wait_fraction"] <= 1
    # The allocator's peak comes from the profile's MemoryAllocation events, which this TensorFlow build does
    # not always emit for the CPU allocator (none on 2.20/2.21 with Keras 3.14/3.15): where it is
    # in the trace it is a size.
    assert trace.metrics.get("tensor_bytes", 1.0) > 0
    assert trace.environment.properties["distribute.strategy"]
    kernel_frames = {f.name for f in trace.samples.frames}
    assert any("Conv2D" in name for name in kernel_frames), kernel_frames
    assert "tensorflow.op.ReadFile" in kernel_frames and "tensorflow.op.DecodePng" in kernel_frames

    # Kernels' documentation was found for nearly all samples (oneDNN's internal names included).
    assert report["sources"]["located_fraction"] >= 0.95, report["sources"]
    conv = next(o for o in _ops(report, "op") if o["name"] == "conv_a")
    assert conv["vector"]["network"] == 0  # one process, no collectives: nothing can wait on a network
    assert any("Conv2D" in f["name"] for f in conv["top_functions"])
    described = {p["description"] for p in report["predictions"]}
    assert {"cores=4", "cores=1", "device=gpu"} <= described, described
    fewer = next(p for p in report["predictions"] if p["description"] == "cores=1")
    # One thread is never faster; how much slower depends on the parallelism measured in this run.
    assert fewer["crystalperf"]["runtime_s"] >= report["total_runtime_s"]
    amdahl = next(n for n in fewer["notes"] if "Amdahl" in n)
    assert "CPU utilisation" in amdahl
    if "kernel_core_s" in trace.metrics:  # more than one thread traced: the kernels side by side bound it from below
        assert "side by side" in amdahl, amdahl
    assert "input_bound" in report
    # Compute kernels are compute by where they ran, not by what their docs say ("filter", "variable"):
    # located as kernels, measured as compute.
    kernels = [f for o in _ops(report, "op") for f in o["top_functions"] if f["origin"] == "op-kernel"]
    assert any("Conv2DBackpropFilter" in f["name"] for f in kernels), kernels
    backward = next(o for o in _ops(report, "op") if o["name"] == "conv_a backward")
    assert backward["vector"]["cpu"] == 1 and backward["measured"]["cpu"] > 0.99, backward
    _assert_no_plumbing_top_function(report)


def _write_evicted(path: Path, size: int) -> Path:
    """A file of random bytes, on the device and evicted from the page cache, so that its next read goes there."""
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return path


def _slow_disk_pipeline(folder: Path, files: int = 32, size: int = 16 << 20) -> Any:
    """Reads a whole 16 MB file per example, one at a time, and uses a few bytes of it."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [str(_write_evicted(folder / f"blob-{i:03d}.bin", size)) for i in range(files)]

    def load(path: Any) -> Any:
        raw = tf.io.decode_raw(tf.strings.substr(tf.io.read_file(path), 0, 64), tf.uint8)
        return tf.cast(raw, tf.float32) / 255.0, tf.constant(1)

    return tf.data.Dataset.from_tensor_slices(paths).map(load).batch(1)


def _evicted_read_slowdown(folder: Path, size: int = 64 << 20) -> float:
    """How many times longer a file takes to read once evicted from the page cache than from the cache: near 1
    where the device is as fast as a memory copy (a virtual disk the host caches), and then there is no slow
    disk for the test below to diagnose."""
    folder.mkdir(parents=True, exist_ok=True)
    path = _write_evicted(folder / "probe.bin", size)
    timings = []
    for _ in range(2):
        started = time.perf_counter()
        path.read_bytes()
        timings.append(time.perf_counter() - started)
    path.unlink()
    return timings[0] / max(timings[1], 1e-9)


def test_slow_disk_reading_input_pipeline_is_diagnosed_as_input_bound(tmp_path: Path) -> None:
    out = tmp_path / "report"
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callback = CrystalPerfCallback(output_dir=out, steps=30)
    if blkio_unavailable() is None:
        # A disk of 32 MB/s whatever the machine's: each example's 4 MB read takes about 0.13 s
        pipeline = _slow_disk_pipeline(tmp_path / "blobs", size=4 << 20)
        with read_limited(tmp_path, 32_000_000):
            model.fit(pipeline, epochs=1, verbose=0, callbacks=[callback])
    else:
        slowdown = _evicted_read_slowdown(tmp_path / "probe")
        if slowdown < 2.0:
            pytest.skip(f"reads from the device under {tmp_path} are only {slowdown:.1f}x slower than from the "
                        f"page cache, and no read limit can be set ({blkio_unavailable()}): no slow disk here")
        model.fit(_slow_disk_pipeline(tmp_path / "blobs"), epochs=1, verbose=0, callbacks=[callback])
    report = _report(out)
    # The training thread waits for its batches: waiting on the input pipeline, whose work is reading files.
    # The steps waited for the pipeline, and the pipeline read files: disk-bound through its input.
    assert report["bottleneck"]["resource"] == "disk", report["bottleneck"]
    # the cores the process could use, and that it left them mostly idle (no JVM: no split by kind of thread)
    machine = report["machine"]
    assert machine["cores"] >= 1 and 0 < machine["busy_cores"] < 0.9 * machine["cores"] and "threads" not in machine
    assert report["bottleneck"]["through_input"]["disk"] > 0.5, report["bottleneck"]
    # The wait is the pipeline's disk time on the path: given to the disk, and said to be a wait.
    assert report["bottleneck"]["seconds"]["disk"] > report["bottleneck"]["seconds"]["waiting"]
    assert any(o.get("waited_for_work", {}).get("disk", 0) > 0.5 for o in _ops(report, "input"))
    assert "input pipeline" in report["bottleneck"]["waiting_on"], report["bottleneck"]
    assert report["input_bound"]["highly_input_bound"], report["input_bound"]
    assert any("input pipeline is the limit" in line for line in report["advice"])
    inputs = _ops(report, "input")
    assert any("disk" in o["attributes"]["pipeline_work"] for o in inputs)
    assert any(f["name"] == "tensorflow.op.ReadFile" for o in inputs for f in o["top_functions"])
    faster = [p for p in report["predictions"] if p["changes"].get("disk") and p["speedup"] > 1]
    assert faster, "faster storage must shorten an input-bound, disk-reading step"
    _assert_no_plumbing_top_function(report)


def test_compute_heavy_model_is_cpu_bound(tmp_path: Path) -> None:
    out = tmp_path / "report"
    data = _steady_image_batches()
    _cnn(width=48, input_shape=(48, 48, 3)).fit(
        data, epochs=1, verbose=0, callbacks=[CrystalPerfCallback(output_dir=out, steps=10)])
    report = _report(out)
    assert report["bottleneck"]["resource"] == "cpu", report["bottleneck"]
    assert not report["input_bound"]["highly_input_bound"]
    gpu = next(p for p in report["predictions"] if p["description"] == "device=gpu")
    assert gpu["speedup"] > 1.5  # the compute kernels are what a GPU would take over
    layers = [o for o in _ops(report, "op") if o["name"].startswith("conv")]
    assert layers and all(o["measured"].get("cpu", 0) > 0.99 for o in layers), [o["measured"] for o in layers]
    _assert_no_plumbing_top_function(report)


def test_a_model_compiled_with_xla_is_profiled_by_layer(tmp_path: Path) -> None:
    """jit_compile=True (Keras's default on a GPU): the step runs as one XLA program whose kernels the profiler
    names after XLA's instructions; the report still names the layers and the ops they were lowered from."""
    out = tmp_path / "report"
    data = _steady_image_batches()
    _cnn(width=48, input_shape=(48, 48, 3), jit_compile=True).fit(
        data, epochs=1, verbose=0, callbacks=[CrystalPerfCallback(output_dir=out, steps=10)])
    report = _report(out)
    assert report["bottleneck"]["resource"] == "cpu", report["bottleneck"]
    names = {o["name"] for o in _ops(report, "op")}
    assert {"conv_a", "conv_a backward"} <= names, names
    layers = [o for o in _ops(report, "op") if o["name"].startswith("conv")]
    assert all(o["measured"].get("cpu", 0) > 0.99 for o in layers), [o["measured"] for o in layers]
    tops = {f["name"] for o in layers for f in o["top_functions"]}
    # the TensorFlow ops the layer's kernels were lowered from, not XLA's instruction names (convolution.1)
    assert any(name.startswith("tensorflow.op.Conv") for name in tops), tops
    assert not any("." in name.removeprefix("tensorflow.op.") for name in tops), tops
    gpu = next(p for p in report["predictions"] if p["description"] == "device=gpu")
    assert gpu["speedup"] > 1.5


def test_a_model_run_eagerly_is_profiled_by_its_ops(tmp_path: Path) -> None:
    """run_eagerly=True (debugging, or a layer that cannot be traced): each op runs on the training thread as it is
    called, with no graph node to name its layer; its kernels are the step's "eager ops", not Python dispatch."""
    out = tmp_path / "report"
    features = tf.random.stateless_uniform((512, 256), seed=(1, 2))
    labels = tf.random.stateless_uniform((512,), seed=(3, 4), maxval=10, dtype=tf.int32)
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu", name="hidden"),
                              keras.layers.Dense(10, name="logits")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), run_eagerly=True)
    model.fit(features, labels, batch_size=64, epochs=2, verbose=0,
              callbacks=[CrystalPerfCallback(output_dir=out, steps=6)])
    report = _report(out)
    eager = [o for o in _ops(report, "op") if o["name"] == "eager ops"]
    assert eager, [o["name"] for o in _ops(report, "op")]
    assert all(o["measured"].get("cpu", 0) > 0.99 for o in eager), [o["measured"] for o in eager]
    tops = [f["name"] for o in eager for f in o["top_functions"][:3]]
    # the matrix products lead, not the step's many microsecond ops (Shape, ReadVariableOp, Cast)
    assert "tensorflow.op.MatMul" in tops or "tensorflow.op._MklMatMul" in tops, tops
    _assert_no_plumbing_top_function(report)


def sleepy_decode(index: Any) -> Any:
    """A user's Python map that waits on something slow (a remote service, a lock, a sleep)."""
    import time

    time.sleep(0.03)
    return np.full((16,), float(index) % 7, dtype=np.float32)


def test_a_slow_python_map_makes_the_steps_wait_on_the_input_pipeline(tmp_path: Path) -> None:
    def load(index: Any) -> Any:
        features = tf.py_function(sleepy_decode, [index], tf.float32)
        features.set_shape((16,))
        return features, index % 2

    data = tf.data.Dataset.range(200).map(load).batch(4)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    out = tmp_path / "report"
    # sampled densely under a raised budget: the default (1 % of the cores) allows a few rounds in these 12 steps
    model.fit(data, epochs=1, steps_per_epoch=16, verbose=0,
              callbacks=[CrystalPerfCallback(output_dir=out, steps=12, sample_interval_ms=5, cpu_budget=0.1)])
    report = _report(out)
    bottleneck = report["bottleneck"]
    # Each batch takes ~120 ms of sleeping in the map; the step's own compute is well under a millisecond.
    assert bottleneck["resource"] == "waiting", bottleneck
    assert "input pipeline" in bottleneck["waiting_on"], bottleneck
    assert "input-bound" in bottleneck["sentence"]
    inputs = _ops(report, "input")
    # The wait is for the map's Python, which slept: waiting (a few tf.data kernels around it computed).
    assert all(o["vector"]["waiting"] > 0.8 for o in inputs if o["runtime_s"] > 0), [o["vector"] for o in inputs]
    # The map's Python is named, not the sleep it waits in.
    functions = {f["name"] for o in inputs for f in o["top_functions"]}
    assert any(name.endswith("sleepy_decode") for name in functions), functions
    _assert_no_plumbing_top_function(report)


class HashedBatches(keras.utils.PyDataset):
    """Batches a worker process makes by hashing (``sleep_s`` 0) or by sleeping, as a user's loader decodes or
    waits on storage."""

    def __init__(self, sleep_s: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return 48

    def __getitem__(self, index: int) -> Any:
        import hashlib

        features = np.random.default_rng(index).random((32, 16), dtype=np.float32)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        else:
            block = features.tobytes() * 32  # 64 KiB
            for _ in range(800):  # 50 MiB: tens of milliseconds of hashing, far more than handing the batch over
                hashlib.sha256(block).digest()
        return features, (features.sum(axis=1) > 8).astype("int32")


def test_input_made_in_worker_processes_is_resolved_by_their_cpu_time(tmp_path: Path) -> None:
    """PyDataset(use_multiprocessing=True) makes each batch in a pool's process, which no sampler of the training
    process sees (its own threads only wait for the results): the workers' CPU time says whether they computed."""
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    reports = {}
    for kind, sleep_s in (("hashing", 0.0), ("sleeping", 0.03)):
        out = tmp_path / kind
        # a short queue: the steps of the window wait for batches being made, not for ones made before it began
        model.fit(HashedBatches(sleep_s, workers=2, use_multiprocessing=True, max_queue_size=2), epochs=1, verbose=0,
                  callbacks=[CrystalPerfCallback(output_dir=out, steps=16, wait_for_report_s=None)])
        reports[kind] = _report(out)
        metrics = load_trace(out / "crystalperf-trace.json.gz").metrics
        assert metrics["input_worker_processes"] == 2, metrics
    hashing = reports["hashing"]["bottleneck"]
    assert hashing["resource"] == "cpu" and hashing["through_input"]["cpu"] > 0.9, hashing
    assert "cpu-bound through its input" in hashing["sentence"]
    # workers that slept used almost no CPU: what they waited on is not known, so the wait stays waiting, and the
    # report says why
    sleeping = reports["sleeping"]
    assert sleeping["bottleneck"]["resource"] == "waiting", sleeping["bottleneck"]
    assert any("worker processes ran" in w for w in sleeping["warnings"]), sleeping["warnings"]


def test_the_end_of_fit_does_not_wait_for_the_report(image_files: list[str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The analysis runs in a process of its own after fit. Made slow here (a test-only knob), fit has returned
    with the trace written and the report still to come; the report follows. The trace says what the callback
    cost, and times the steps after the window to set the profiled ones beside them."""
    from crystalperf.integrations.base import SLOW_FINISH_ENV

    monkeypatch.setenv(SLOW_FINISH_ENV, "20")
    out = tmp_path / "report"
    callback = CrystalPerfCallback(output_dir=out, steps=4)
    _cnn().fit(_image_dataset(image_files, batch=8), epochs=1, verbose=0, callbacks=[callback])  # 16 steps
    assert callback.trace_path is not None and callback.trace_path.is_file()
    assert not (out / "crystalperf-report.json").exists()  # the finish process is still asleep
    hook = load_trace(callback.trace_path).hook
    assert hook is not None and hook.processes[0].source == f"python:{os.getpid()}"
    assert {"callbacks", "profile_start", "profile_read", "trace_build"} <= set(hook.processes[0].parts)
    assert 0 < hook.cpu_s < (hook.processes[0].process_cpu_s or 0.0)
    metrics = load_trace(callback.trace_path).metrics
    assert metrics["later_steps"] == 9  # steps 6-15 begin after the window (2-5): nine begin-to-begin times
    assert metrics["profiled_step_median_s"] > 0 and metrics["later_step_median_s"] > 0
    cost = _report(out)["hook_cost"]
    assert cost["cpu_s"] == pytest.approx(hook.cpu_s, abs=1e-6)
    ratio = metrics["profiled_step_median_s"] / metrics["later_step_median_s"] - 1
    assert cost["step_slowdown"]["ratio"] == pytest.approx(ratio, abs=1e-5)
    assert "steps timed after them" in cost["sentence"]


def test_default_output_dir_is_next_to_the_tensorboard_logs(image_files: list[str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    logs = tmp_path / "tb"
    callback = CrystalPerfCallback(steps=4)
    _cnn().fit(_image_dataset(image_files[:96]), epochs=1, verbose=0,
               callbacks=[keras.callbacks.TensorBoard(log_dir=str(logs), profile_batch=0), callback])
    assert callback.trace_path is not None
    assert callback.trace_path.parent.parent == logs / "crystalperf"
    assert _report(callback.trace_path.parent)["operations"]


def test_unwritable_output_dir_never_fails_fit(image_files: list[str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("CRYSTALPERF_TESTING", raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    callback = CrystalPerfCallback(output_dir=blocker / "report", steps=3)
    with caplog.at_level(logging.WARNING, logger="crystalperf"):
        history = _cnn().fit(_image_dataset(image_files[:64]), epochs=1, verbose=0, callbacks=[callback])
    assert len(history.history["loss"]) == 1
    assert callback.trace_path is None
    assert any("crystalperf" in r.getMessage() and "a-file" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]


def test_profiler_already_running_from_tensorboard(image_files: list[str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("CRYSTALPERF_TESTING", raising=False)
    out = tmp_path / "report"
    # TensorBoard profiles batches 2-5 and is first in the list: its profiler holds the session when
    # ours wants to start at batch 2.
    tensorboard = keras.callbacks.TensorBoard(log_dir=str(tmp_path / "tb"), profile_batch=(2, 5))
    with caplog.at_level(logging.WARNING, logger="crystalperf"):
        history = _cnn().fit(_image_dataset(image_files[:96]), epochs=1, verbose=0,
                             callbacks=[tensorboard, CrystalPerfCallback(output_dir=out, steps=4)])
    assert len(history.history["loss"]) == 1
    assert any("profiler could not start" in r.getMessage() for r in caplog.records)
    report = _report(out)  # still a report: step times and Python samples
    assert len(_ops(report, "step")) == 4
    assert any("profiler unavailable" in w for w in report["warnings"])


def test_a_failing_fit_still_leaves_its_trace(tmp_path: Path) -> None:
    out = tmp_path / "report"
    script = textwrap.dedent(f"""
        import keras, numpy as np
        from crystalperf.integrations.tensorflow import CrystalPerfCallback

        class Boom(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if batch == 8:
                    raise RuntimeError("user code failed")

        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        x = np.random.rand(640, 8).astype("float32"); y = np.random.rand(640, 1).astype("float32")
        model.fit(x, y, batch_size=32, verbose=0,
                  callbacks=[CrystalPerfCallback(output_dir={str(out)!r}, steps=20, analyze=False), Boom()])
    """)
    env = {k: v for k, v in os.environ.items() if k != "CRYSTALPERF_TESTING"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0 and "user code failed" in done.stderr  # the user's error, untouched
    with gzip.open(out / "crystalperf-trace.json.gz", "rt") as f:
        doc = json.load(f)
    assert doc["application"]["status"] == "failed"
    assert len(doc["operations"]) >= 5  # the steps profiled before the failure


def test_keras_on_pytorch_is_reported_from_its_python_samples(tmp_path: Path) -> None:
    """KERAS_BACKEND=torch: TensorFlow's profiler would see none of the step's ops. The callback does not start it,
    runs its default window on to a few seconds of samples, and the report names the PyTorch and Keras functions the
    training thread was in, with PyTorch's thread setting in the settings search."""
    pytest.importorskip("torch")  # the nox session installs it
    out = tmp_path / "report"
    script = textwrap.dedent(f"""
        import keras, numpy as np
        from crystalperf.integrations.tensorflow import CrystalPerfCallback
        assert keras.backend.backend() == "torch"
        model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = np.random.rand(2048, 256).astype("float32"); y = np.random.randint(0, 10, 2048)
        model.fit(x, y, batch_size=64, epochs=200, verbose=0,
                  callbacks=[CrystalPerfCallback(output_dir={str(out)!r}, wait_for_report_s=300,
                                                 sample_interval_ms=10, cpu_budget=0.1)])
    """)
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = _report(out)
    assert any("torch backend" in w for w in report["warnings"]), report["warnings"]
    parts = {o["name"] for o in _ops(report, "op")}
    assert parts == {"training step (Python samples)"}, parts
    window = report["total_runtime_s"]
    assert window >= 2.5, window  # ran on past its 20 steps of a few ms, for samples
    tops = {f["name"] for o in _ops(report, "op") for f in o["top_functions"]}
    assert any(name.startswith(("torch.", "keras.src.backend.torch")) for name in tops), tops
    assert report["settings_search"]["searched"] == ["torch_num_threads"]
    assert not any("tf.config" in line for line in report["advice"]), report["advice"]


def test_predict_and_evaluate_outside_fit_are_runs_of_their_own(tmp_path: Path) -> None:
    """One callback through fit (with its validation), then predict and evaluate: three traces, none of them the
    validation's, the later ones beside the fit's instead of over it."""
    out = tmp_path / "report"
    callback = CrystalPerfCallback(output_dir=out, steps=6, analyze=False)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="relu", name="hidden"),
                              keras.layers.Dense(2, name="logits")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.default_rng(1).random((1024, 16), dtype=np.float32)
    y = (x.sum(axis=1) > 8).astype("int32")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    model.fit(data, validation_data=data.take(4), epochs=2, verbose=0, callbacks=[callback])
    fit_trace = load_trace(out / "crystalperf-trace.json.gz")
    assert fit_trace.environment.properties["keras.run"] == "fit"
    assert fit_trace.application.name == model.name and fit_trace.application.status == "succeeded"

    model.predict(data.map(lambda features, label: features), verbose=0, callbacks=[callback])
    predicted = callback.trace_path
    assert predicted is not None and predicted.parent.parent == out and predicted.parent.name.startswith("predict-")
    model.evaluate(data, verbose=0, callbacks=[callback])
    evaluated = callback.trace_path
    assert evaluated is not None and evaluated.parent.name.startswith("evaluate-")
    for path, run in ((predicted, "predict"), (evaluated, "evaluate")):
        trace = load_trace(path)
        assert trace.environment.properties["keras.run"] == run
        assert trace.application.name == f"{model.name}.{run}()"
        steps = [op for op in trace.iter_operations() if op.kind == "step"]
        assert len(steps) == 6, [op.name for op in steps]
        assert any(op.name.startswith("hidden") for op in trace.iter_operations())
    assert load_trace(out / "crystalperf-trace.json.gz").application.name == model.name  # the fit's, kept


MIRRORED = """
import sys
import numpy as np, tensorflow as tf, keras
from crystalperf.integrations.tensorflow import CrystalPerfCallback

out = sys.argv[1]
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((24, 24, 3)), keras.layers.Conv2D(8, 3, activation="relu", name="conv"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4, name="logits")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = np.random.default_rng(0).random((256, 24, 24, 3), dtype=np.float32)
y = np.arange(256) % 4
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
model.fit(data, epochs=1, steps_per_epoch=8, verbose=0, callbacks=[CrystalPerfCallback(output_dir=out, steps=4)])
"""


def test_mirrored_strategy_on_cpu_devices(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-c", MIRRORED, str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = _report(out)
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert trace.environment.properties["distribute.strategy"] == "MirroredStrategy"
    assert trace.environment.properties["distribute.replicas"] == "2"
    assert len(_ops(report, "step")) == 4 and any(o["name"].startswith("conv") for o in _ops(report, "op"))
    # Both replicas on one machine: their all-reduce copies memory, it does not wait on a network.
    assert report["bottleneck"]["seconds"]["network"] == 0


def read_examples(folder: str) -> Any:
    """A user's Python input code: tf.data runs it on its own threads, where the profiler can't see it."""
    import hashlib

    for path in sorted(Path(os.fsdecode(folder)).iterdir()):
        with open(path, "rb") as f:
            data = f.read()
        digest = b""
        # Deliberately slow decoding, a few ms an example: the 20 profiled steps then take a few hundred ms, so
        # the sampler catches this function many times, not once or twice between tf.data's own frames.
        for _ in range(16):
            digest = hashlib.sha256(digest + data).digest()
        yield [b / 255 for b in digest[:16]], 1


def test_python_input_code_is_sampled_and_named(tmp_path: Path) -> None:
    folder = tmp_path / "records"
    folder.mkdir()
    for i in range(120):
        (folder / f"r{i:03d}").write_bytes(os.urandom(256 << 10))
    data = tf.data.Dataset.from_generator(
        read_examples, args=[str(folder)],
        output_signature=(tf.TensorSpec((16,), tf.float32), tf.TensorSpec((), tf.int32))).batch(4)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    out = tmp_path / "report"
    # a few hundred ms profiled, sampled densely: the default budget (1 % of the cores) would allow a few rounds
    model.fit(data, epochs=1, verbose=0, callbacks=[CrystalPerfCallback(output_dir=out, steps=20,
                                                                         sample_interval_ms=5, cpu_budget=0.1)])
    report = _report(out)
    inputs = _ops(report, "input")
    assert inputs and report["input_bound"]["highly_input_bound"]
    functions = {f["name"] for o in inputs for f in o["top_functions"]}
    assert any(name.endswith("read_examples") for name in functions), functions
    # The steps waited for the generator (measured, a few ms a step here): the generator's own samples say what
    # that wait was, so the wait is given to them rather than left as waiting.
    assert all(o["attributes"]["waits_on"].startswith("input pipeline") for o in inputs)
    assert all(o["attributes"]["waits_on_work"] == "samples" for o in inputs)
    assert any("waited_for_work" in o for o in inputs if o["runtime_s"] > 0)
    _assert_no_plumbing_top_function(report)


class _SlowBatchLogger(keras.callbacks.Callback):
    """A program's own batch callback doing about 20 ms of Python after every step."""

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        total = 0
        for i in range(400_000):
            total += i * i
        self.total = total


def test_a_slow_batch_callback_is_named_in_the_steps_host_time(tmp_path: Path) -> None:
    """The op timeline shows no Python: the training thread's samples inside a batch callback name the step's host
    part, and crystalperf's own callback (after the program's in the list) is not one of them."""
    out = tmp_path / "report"
    x = np.random.default_rng(3).random((2048, 32), dtype=np.float32)
    y = np.random.default_rng(4).integers(0, 10, 2048)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=64, epochs=1, verbose=0,
              callbacks=[_SlowBatchLogger(), CrystalPerfCallback(output_dir=out, steps=20)])
    report = _report(out)
    hosts = [o for o in _ops(report, "op") if o["name"] == "host (Python, dispatch)"]
    assert hosts, [o["name"] for o in _ops(report, "op")]
    named = {f["name"] for o in hosts for f in o["top_functions"]}
    assert any(name.endswith("_SlowBatchLogger.on_train_batch_end") for name in named), named
    assert not any(name.startswith("crystalperf.") for name in named), named
    assert report["bottleneck"]["resource"] == "cpu"
