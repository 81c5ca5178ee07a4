"""What TensorFlow's profiler alone costs the steps of a Keras fit, and what it records per step: the bench's
``keras-fit`` model (``bench/overhead.py``) in one process, fits alternating without the profiler and with it at
host tracer levels 2 (the default, what the callback uses) and 1, each fit timing its steady steps (after the
profiler started); per mode the median over rounds of the ratio to the round's fit without it, in wall and CPU time.
The first round's profiles are read back and their events counted per step by kind (kernel executions "node:Op",
tf.data's "Iterator::…", the thread-pool listener's three events per closure, the rest).

    .nox/tensorflow/bin/python bench/tf_profiler_cost.py --steps 120 --rounds 6 [--wide]

``--wide`` triples the convolutions' width (steps about five times as long, more work per kernel). Nothing is
asserted: the figures go to docs/overhead.md."""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

MODES = ("off", "level2", "level1")
FIRST = 5  # the profiler starts at this step's begin; the steady steps are those after it
KERNEL = re.compile(r"^[^\s:]+:[A-Za-z_]\w*$")  # a kernel execution, as crystalperf's reader recognises it


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _images(folder: Path, count: int = 256) -> list[str]:
    import numpy as np
    import tensorflow as tf

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        path = folder / f"{i:04d}.png"
        if not path.exists():
            tf.io.write_file(str(path), tf.io.encode_png(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)))
    return sorted(glob.glob(str(folder / "*.png")))


def _event_kinds(logdir: str, steps: int) -> dict[str, float]:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from crystalperf.integrations.tensorflow.reader import find_xplane

    found = find_xplane(Path(logdir))
    if found is None:
        return {}
    space = xplane_pb2.XSpace()
    space.ParseFromString(found.read_bytes())
    kinds: collections.Counter[str] = collections.Counter()
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names.get(event.metadata_id, "")
                kinds["kernel executions" if KERNEL.match(name) else "tf.data iterators"
                      if name.startswith("Iterator::") else "thread-pool listener"
                      if name.startswith("ThreadpoolListener::") else "other"] += 1
    return {kind: count / steps for kind, count in kinds.most_common()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=120, help="steps per fit (the steady ones follow step 5)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--wide", action="store_true", help="three times the convolutions' width")
    args = parser.parse_args(argv)
    if args.steps < FIRST + 3:
        parser.error(f"--steps must be at least {FIRST + 3}")

    import keras
    import tensorflow as tf

    files = _images(Path(tempfile.gettempdir()) / "crystalperf-tf-profiler-cost")

    def load(path: Any, label: Any) -> Any:
        image = tf.io.decode_png(tf.io.read_file(path), channels=3)
        image = tf.image.random_flip_left_right(tf.cast(image, tf.float32) / 255.0)
        return tf.image.random_crop(image, (56, 56, 3)), label

    data = (tf.data.Dataset.from_tensor_slices((files, [i % 10 for i in range(len(files))])).repeat()
            .map(load, num_parallel_calls=2).batch(32).prefetch(2))
    width = 3 if args.wide else 1
    model = keras.Sequential([keras.Input((56, 56, 3)), keras.layers.Conv2D(32 * width, 3, activation="relu"),
                              keras.layers.MaxPooling2D(), keras.layers.Conv2D(64 * width, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Window(keras.callbacks.Callback):
        def __init__(self, mode: str) -> None:
            super().__init__()
            self.mode, self.logdir = mode, ""
            self.wall = self.cpu = 0.0

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if batch == FIRST and self.mode != "off":
                self.logdir = tempfile.mkdtemp()
                level = int(self.mode[-1])
                tf.profiler.experimental.start(self.logdir,
                                               tf.profiler.experimental.ProfilerOptions(host_tracer_level=level))
            if batch == FIRST + 1:
                self.t0, self.c0 = time.perf_counter(), _cpu()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == args.steps - 1:
                self.wall, self.cpu = time.perf_counter() - self.t0, _cpu() - self.c0
                if self.mode != "off":
                    tf.profiler.experimental.stop()

    model.fit(data, epochs=1, steps_per_epoch=20, verbose=0)  # traced and compiled before any round
    tf.profiler.experimental.start("")  # the first start in a process costs more than the next ones
    tf.profiler.experimental.stop(save=False)
    figures: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    steady = args.steps - FIRST - 1
    for round_ in range(args.rounds):
        for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
            window = Window(mode)
            model.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0, callbacks=[window])
            figures[mode].append((window.wall, window.cpu))
            if round_ == 0 and mode != "off":
                kinds = _event_kinds(window.logdir, args.steps - FIRST)
                print(f"{mode}: {sum(kinds.values()):,.0f} events a step: "  # noqa: T201
                      + ", ".join(f"{kind} {count:,.0f}" for kind, count in kinds.items()))
    base = figures["off"]
    print(f"{steady} steady steps a fit, {args.rounds} rounds, step median without the profiler "  # noqa: T201
          f"{1000 * statistics.median(w for w, _ in base) / steady:.1f} ms")
    for mode in MODES[1:]:
        wall = [on[0] / off[0] - 1 for on, off in zip(figures[mode], base, strict=True)]
        cpu = [on[1] / off[1] - 1 for on, off in zip(figures[mode], base, strict=True)]
        print(f"{mode}: wall {100 * statistics.median(wall):+.1f} % ({100 * min(wall):+.1f} to "  # noqa: T201
              f"{100 * max(wall):+.1f}), CPU {100 * statistics.median(cpu):+.1f} % ({100 * min(cpu):+.1f} to "
              f"{100 * max(cpu):+.1f})")


if __name__ == "__main__":
    main()
