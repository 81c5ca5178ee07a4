"""The TensorFlow jobs of the fidelity benchmark, run as ``python -m bench.fidelity.tensorflow_jobs
CONFIG_JSON`` with the TensorFlow environment's Python (the harness starts it inside the job's cgroups).

Each job is a Keras ``fit`` with ``CrystalPerfCallback`` profiling a window of steps, as a user would add
it; the measured window is the same steps. The input pipeline decides the job's resource: tensors in
memory (CPU-bound training), a text file read cold through the disk throttle, chunks pulled from the data
server through the shaped link, or a generator that sleeps.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

from bench.fidelity.probe import Window

SKIP = 2


def main() -> None:
    config = json.loads(sys.argv[1])
    import keras
    import numpy as np
    import tensorflow as tf

    from crystalperf.integrations.tensorflow import CrystalPerfCallback

    job, p = config["job"], config["params"]
    width = p.get("features", 64)
    if job == "cpu":
        rng = np.random.default_rng(0)
        x = rng.standard_normal((4096, width), dtype=np.float32)
        y = rng.integers(0, 10, 4096)
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(p["batch"]).repeat().prefetch(2)
    elif job in ("disk", "mixed"):
        def parse(lines: Any) -> Any:
            codes = tf.io.decode_raw(tf.strings.substr(lines, 0, width), tf.uint8)
            return tf.cast(codes, tf.float32) / 128.0, tf.strings.length(lines) % 10

        data = (tf.data.TextLineDataset(config["files"][0], buffer_size=1 << 16)
                .batch(p["batch"], drop_remainder=True).map(parse).prefetch(2))
    else:
        url = config.get("url", "")

        def chunks() -> Iterator[Any]:
            while True:
                if job == "network":
                    with urllib.request.urlopen(f"{url}/bytes/{p['chunk']}") as answer:
                        raw = answer.read()
                    yield np.frombuffer(raw[: width * (len(raw) // width)], np.uint8).reshape(-1, width)[:8] / 255, 1
                else:
                    time.sleep(p["sleep_s"])
                    yield np.zeros((8, width)), 1

        data = tf.data.Dataset.from_generator(
            chunks, output_signature=(tf.TensorSpec((8, width), tf.float64), tf.TensorSpec((), tf.int64)))
        data = data.map(lambda a, b: (tf.cast(a, tf.float32), tf.fill((8,), b))).unbatch().batch(8).prefetch(1)
    L = keras.layers
    inputs = keras.Input((width,))
    x = inputs
    for i, units in enumerate(p.get("layers", [16])):
        x = L.Dense(units, activation="relu", name=f"dense{i}")(x)
    model = keras.Model(inputs, L.Dense(10, name="logits")(x))
    model.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    steps = p["steps"]
    window = Window(config, slots=2)

    class Measure(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if batch == SKIP:
                window.__enter__()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if batch == SKIP + steps - 1:
                window.__exit__(None, None, None)

    profiler = CrystalPerfCallback(output_dir=config["out"], steps=(SKIP, SKIP + steps))
    model.fit(data, epochs=1, steps_per_epoch=SKIP + steps, verbose=0, callbacks=[Measure(), profiler])


if __name__ == "__main__":
    main()
