"""Overhead of CrystalPerfCallback on a Keras fit: a small CNN on PNG images read from disk through
tf.data (decode + augment), against the same fit without the callback.

The callback costs nothing outside its window (default: 20 steps after 2 warm-up steps); inside it
TensorFlow's profiler traces every kernel and our sampler reads Python stacks. So two figures: the
slowdown of the profiled steps (the price while profiling) and of the whole fit. The trace writing
and the analysis at the end of training are timed separately (they run after the last step).

Every run is a fresh Python process; runs are interleaved so that other load spreads evenly.

    python bench/tf_overhead.py [--runs 3] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap

JOB = textwrap.dedent('''
    import json, sys, time, glob, os
    import numpy as np, tensorflow as tf, keras
    mode, steps, images, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    files = sorted(glob.glob(images + "/*.png"))
    def load(path, label):
        image = tf.io.decode_png(tf.io.read_file(path), channels=3)
        image = tf.image.random_flip_left_right(tf.cast(image, tf.float32) / 255.0)
        return tf.image.random_crop(image, (56, 56, 3)), label
    data = (tf.data.Dataset.from_tensor_slices((files, [i % 10 for i in range(len(files))])).repeat()
            .map(load, num_parallel_calls=2).batch(32).prefetch(2))
    model = keras.Sequential([keras.Input((56, 56, 3)), keras.layers.Conv2D(32, 3, activation="relu"),
                              keras.layers.MaxPooling2D(), keras.layers.Conv2D(64, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    times = []
    class StepTimes(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.t = time.perf_counter()
        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - self.t)
    callbacks = [StepTimes()]
    if mode != "off":
        from crystalperf.integrations.tensorflow import CrystalPerfCallback
        callbacks.append(CrystalPerfCallback(output_dir=out, analyze=(mode == "analyze")))
    start = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=callbacks)
    total = time.perf_counter() - start
    print("RESULT", json.dumps({"fit": total, "window": sum(times[2:22]), "steps": sum(times)}))
''')


def run(mode: str, steps: int, images: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([sys.executable, "-c", JOB, mode, str(steps), images, out],
                              capture_output=True, text=True, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.split(" ", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    modes = ("off", "trace", "analyze")
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as images:
        _write_images(images)
        for _ in range(args.runs):
            for mode in modes:
                results[mode].append(run(mode, args.steps, images))
    med = {m: {k: statistics.median(r[k] for r in results[m]) for k in ("fit", "window", "steps")} for m in modes}
    base = med["off"]
    print(f"Keras fit, {args.steps} steps, median of {args.runs} fresh processes")
    print(f"  without crystalperf: fit {base['fit']:.2f} s, steps 2-21 {base['window']:.3f} s")
    for mode, label in (("trace", "callback, trace only"), ("analyze", "callback + analysis at the end")):
        m = med[mode]
        print(f"  {label}: fit {m['fit']:.2f} s ({(m['fit'] / base['fit'] - 1) * 100:+.1f} %), "
              f"profiled steps {m['window']:.3f} s ({(m['window'] / base['window'] - 1) * 100:+.1f} %), "
              f"all steps {(m['steps'] / base['steps'] - 1) * 100:+.1f} %")


def _write_images(folder: str) -> None:
    import tensorflow as tf

    rng = tf.random.Generator.from_seed(0)
    for i in range(256):
        image = tf.cast(rng.uniform((64, 64, 3), 0, 255), tf.uint8)
        tf.io.write_file(f"{folder}/img-{i:03d}.png", tf.io.encode_png(image))


if __name__ == "__main__":
    main()
