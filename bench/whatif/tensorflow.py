"""TensorFlow workloads of the what-if benchmark (paper Table 3, scaled to a 2-core machine): a
ResNet-style and a VGG-style CNN trained on PNG images read from disk through tf.data (decode +
augment). The runtime is the paper's: the mean iteration time, here the wall time of a fixed window
of training steps (the same window the callback profiles).

Each run is a fresh Python process (TensorFlow fixes its thread pools at start-up), in the TensorFlow
environment: ``$CRYSTALPERF_TF_PYTHON``, else this interpreter when it has TensorFlow, else the nox
``tensorflow`` session's. Real variations: cores (``taskset``), CPU share (cgroup v1/v2 CPU quota), TF
intra-/inter-op threads, and storage bandwidth (a cgroup read limit on the image folder's device, with
the images evicted from the page cache before every run so reads reach the device).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from bench.fidelity.machine import evict
from bench.whatif import machine
from bench.whatif.interpreters import tf_python
from bench.whatif.machine import cgroup
from bench.whatif.runner import Run, Target

SKIP = 2  # warm-up steps before the window (tracing, first allocations)
IMAGES = 1536

JOB = textwrap.dedent('''
    import glob, json, os, sys, time
    config = json.loads(sys.argv[1])
    import tensorflow as tf, keras
    if config.get("threads"):
        tf.config.threading.set_intra_op_parallelism_threads(config["threads"])
        tf.config.threading.set_inter_op_parallelism_threads(config["threads"])
    files = sorted(glob.glob(os.path.join(config["images"], "*.png")))
    def load(path, label):
        image = tf.io.decode_png(tf.io.read_file(path), channels=3)
        image = tf.image.random_flip_left_right(tf.cast(image, tf.float32) / 255.0)
        image = tf.image.random_crop(image, (56, 56, 3))
        return image, label
    data = (tf.data.Dataset.from_tensor_slices((files, [i % 10 for i in range(len(files))]))
            .map(load, num_parallel_calls=2).batch(config["batch"]).repeat().prefetch(2))
    L = keras.layers
    inputs = keras.Input((56, 56, 3))
    if config["model"] == "resnet":
        x = L.Conv2D(32, 3, padding="same", use_bias=False, name="stem")(inputs)
        x = L.ReLU()(L.BatchNormalization(name="stem_bn")(x))
        for i, (width, stride) in enumerate(((32, 1), (64, 2), (128, 2))):
            shortcut = x if stride == 1 and x.shape[-1] == width else L.Conv2D(width, 1, strides=stride, name=f"proj{i}")(x)
            y = L.Conv2D(width, 3, strides=stride, padding="same", use_bias=False, name=f"block{i}_a")(x)
            y = L.ReLU()(L.BatchNormalization(name=f"block{i}_a_bn")(y))
            y = L.Conv2D(width, 3, padding="same", use_bias=False, name=f"block{i}_b")(y)
            y = L.BatchNormalization(name=f"block{i}_b_bn")(y)
            x = L.ReLU()(L.Add()([shortcut, y]))
        x = L.GlobalAveragePooling2D()(x)
    else:
        x = inputs
        for i, width in enumerate((32, 64, 128)):
            x = L.Conv2D(width, 3, padding="same", activation="relu", name=f"conv{i}_a")(x)
            x = L.Conv2D(width, 3, padding="same", activation="relu", name=f"conv{i}_b")(x)
            x = L.MaxPooling2D(name=f"pool{i}")(x)
        x = L.Flatten()(x)
        x = L.Dense(256, activation="relu", name="fc")(x)
    model = keras.Model(inputs, L.Dense(10, name="logits")(x))
    model.compile(keras.optimizers.SGD(0.01, momentum=0.9),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    skip, window = config["skip"], config["steps"]
    marks = {}
    class Window(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            # Resource limits apply from training on: TensorFlow's start-up reads ~1 GB of libraries,
            # which a read limit on the same device would turn into minutes of waiting.
            for group in config.get("cgroups", []):
                with open(os.path.join(group, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
        def on_train_batch_begin(self, batch, logs=None):
            if batch == skip:
                marks["start"] = time.time()
        def on_train_batch_end(self, batch, logs=None):
            if batch == skip + window - 1:
                marks["end"] = time.time()
    callbacks = [Window()]
    if config.get("out"):
        from crystalperf.integrations.tensorflow import CrystalPerfCallback
        callbacks.append(CrystalPerfCallback(output_dir=config["out"], steps=(skip, skip + window), analyze=False))
    model.fit(data, epochs=1, steps_per_epoch=skip + window, verbose=0, callbacks=callbacks)
    print("RESULT", json.dumps({"window_s": marks["end"] - marks["start"]}))
''')


def ensure_images(folder: Path, python: str, count: int = IMAGES, size: int = 64) -> Path:
    """``size``x``size`` PNG images of noise, written once (random content: PNG cannot compress it away)."""
    if folder.is_dir() and len(list(folder.glob("*.png"))) >= count:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    script = ("import sys, numpy as np, tensorflow as tf\n"
              "rng = np.random.default_rng(0)\n"
              f"for i in range({count}):\n"
              f"    img = rng.integers(0, 255, ({size}, {size}, 3), dtype=np.uint8)\n"
              "    tf.io.write_file(f'{sys.argv[1]}/img-{i:05d}.png', tf.io.encode_png(img))\n")
    subprocess.run([python, "-c", script, str(folder)], check=True, capture_output=True)
    return folder


class CnnWorkload:
    """One CNN trained on images from disk; configs vary cores, CPU share, threads and disk."""

    framework = "tensorflow"
    trace_every_run = False  # else only the baseline's runs are traced

    def __init__(self, model: str, data_dir: Path, *, steps: int = 40, batch: int = 32) -> None:
        self.name = f"{model}-cnn"
        self.model = model
        self.data_dir = data_dir
        self.python = tf_python()
        self.baseline: dict[str, Any] = {"model": model, "steps": steps, "batch": batch, "cores": 2}
        self._images: Path | None = None

    def images(self) -> Path:
        if self._images is None:
            assert self.python is not None
            size = self.baseline.get("image_size", 64)
            folder = self.data_dir / ("tf-images" if size == 64 else f"tf-images-{size}")
            self._images = ensure_images(folder, self.python, size=size)
        return self._images

    def targets(self, quick: bool) -> list[Target]:
        base = self.baseline
        no_tf = (lambda: None) if self.python else (lambda: "TensorFlow is not installed (set CRYSTALPERF_TF_PYTHON)")

        def needs(probe: Any) -> Any:
            return lambda: no_tf() or probe()

        targets = [
            Target("cores 2->1", "cores", {**base, "cores": 1}, ["cores=1"], needs(machine.taskset_unavailable)),
            Target("cpu share 50%", "cpu_share", {**base, "cpu_share": 0.5}, ["cpu_share=0.5"],
                   needs(machine.cpu_quota_unavailable)),
        ]
        if quick:
            return targets
        disk_probe = lambda: machine.disk_throttle_unavailable(self.data_dir)  # noqa: E731
        return targets + [
            Target("cpu share 75%", "cpu_share", {**base, "cpu_share": 0.75}, ["cpu_share=0.75"],
                   needs(machine.cpu_quota_unavailable)),
            Target("TF threads 2->1", "cores", {**base, "threads": 1}, ["cores=1"], no_tf),
            # Prefetching hides 4 MB/s behind the compute; at 1 MB/s the pipeline becomes the limit.
            Target("disk 4 MB/s", "disk", {**base, "read_bps": 4_000_000}, ["disk=4MB/s"], needs(disk_probe)),
            Target("disk 1 MB/s", "disk", {**base, "read_bps": 1_000_000}, ["disk=1MB/s"], needs(disk_probe)),
        ]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        assert self.python is not None
        out_dir.mkdir(parents=True, exist_ok=True)
        traced = self.trace_every_run or config is self.baseline
        job = {**config, "images": str(self.images()), "skip": SKIP,
               "out": str(out_dir) if traced else None}
        command = [self.python, "-c", JOB, json.dumps(job)]
        if config.get("cores", 2) < (os.cpu_count() or 2):
            command = ["taskset", "-c", ",".join(str(c) for c in range(config["cores"]))] + command
        share = config.get("cpu_share")
        cpu_limits = {}
        if share:
            period = 100_000
            cpu_limits = {"cpu.cfs_period_us": str(period),
                          "cpu.cfs_quota_us": str(int(share * (os.cpu_count() or 2) * period))}
        read_limits = {}
        if config.get("read_bps"):
            read_limits = {"blkio.throttle.read_bps_device":
                           f"{machine.block_device(self.images())} {config['read_bps']}"}
        evict([self.images()])
        with cgroup("cpu", cpu_limits) as cpu_group, cgroup("blkio", read_limits) as io_group:
            job["cgroups"] = [str(g) for g in (cpu_group, io_group) if g is not None]
            command = command[:-1] + [json.dumps(job)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} failed: {done.stderr[-2000:]}")
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        window = float(json.loads(line.split(" ", 1)[1])["window_s"])
        trace = out_dir / "crystalperf-trace.json.gz" if traced else None
        return Run(window, trace if trace is not None and trace.exists() else None, window)


class CnnStorageUpWorkload(CnnWorkload):
    """The "up" direction for storage: the ResNet traced reading its images behind a 5 MB/s read limit,
    predicted and re-run at 20 MB/s. Its images are 144x144 (≈62 KB of PNG each, cropped to the same 56x56):
    ≈2 MB per step, so that 5 MB/s makes the steps wait for their input (≈0.4 s of reading per ≈0.2 s step)
    and 20 MB/s hands the limit back to the compute. With the 64x64 images prefetching hides even 4 MB/s,
    and an up case that changes nothing would not tell a model from task replay."""

    def __init__(self, data_dir: Path, *, steps: int = 40, batch: int = 32) -> None:
        super().__init__("resnet", data_dir, steps=steps, batch=batch)
        self.name = "resnet-cnn-storage"
        self.baseline.update(image_size=144, read_bps=5_000_000)

    def targets(self, quick: bool) -> list[Target]:
        base = self.baseline

        def unavailable() -> str | None:
            if self.python is None:
                return "TensorFlow is not installed (set CRYSTALPERF_TF_PYTHON)"
            return machine.disk_throttle_unavailable(self.data_dir)

        return [Target("disk 5->20 MB/s", "disk-up", {**base, "read_bps": 20_000_000}, ["disk=20MB/s"],
                       unavailable)]


def workloads(data_dir: Path, quick: bool) -> list[CnnWorkload]:
    models = ("resnet",) if quick else ("resnet", "vgg")
    return [CnnWorkload(m, data_dir) for m in models]


def up_workloads(data_dir: Path, quick: bool) -> list[CnnWorkload]:
    """The "up" cases (none in quick mode: each traces a deliberately slow run)."""
    return [] if quick else [CnnStorageUpWorkload(data_dir)]
