"""Record the TensorFlow golden inputs of ``tests/data/``: a real profile and what the callback had besides it.

Runs a small Keras CNN ``fit`` on random images through a tf.data pipeline (a TF map, a ``py_function``
map the Python sampler sees, batch, prefetch) on the CPU with ``CrystalPerfCallback``, and keeps:

- ``tensorflow-fit.xplane.pb.gz``: the ``*.xplane.pb`` TensorFlow's profiler wrote for the window, gzipped;
- ``tensorflow-fit-recording.json.gz``: the callback's :class:`Recording` without the timeline (steps,
  Python samples, threads, CPU seconds, layer names, ...) and the run's names, as ``save_recording`` writes it;
- ``tensorflow-fit-trace.json.gz``: the trace the callback wrote (reader + assembly of the two files above
  must give exactly this trace).

Run it with the tensorflow test environment:
``.nox/tensorflow/bin/python tests/data/record/tensorflow_fit.py [OUT_DIR]`` (OUT_DIR defaults to tests/data).

``tensorflow_fit.py --reassemble [OUT_DIR]`` (any environment, no TensorFlow) writes only the trace again, from
the recorded profile and recording already in OUT_DIR, as the callback assembles it now: for when the assembly
changes but what the callback records does not.

``tensorflow_fit.py --xla [OUT_DIR]`` records ``tensorflow-fit-xla.xplane.pb.gz`` instead: the profile of a small
dense model compiled with XLA (``jit_compile=True``), whose kernels are XLA's and whose HLO is in the profile's
metadata plane.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REASSEMBLE = "--reassemble" in sys.argv[1:]
XLA = "--xla" in sys.argv[1:]
_ARGS = [a for a in sys.argv[1:] if a not in ("--reassemble", "--xla")]
OUT = Path(_ARGS[0]) if _ARGS else Path(__file__).resolve().parents[1]
NAME = "tensorflow-fit"


def reassemble() -> int:
    from crystalperf.core.trace import save_trace
    from crystalperf.integrations.tensorflow.assemble import build_trace_for
    from crystalperf.integrations.tensorflow.reader import load_recording

    rec, info = load_recording(OUT / f"{NAME}-recording.json.gz")
    path = save_trace(build_trace_for(rec, info), OUT / f"{NAME}-trace.json.gz")
    print(f"{path}: {path.stat().st_size} bytes")
    return 0


def _keeping_profile(callback: Any) -> dict[str, Any]:
    """Make the callback keep the bytes of the profile it reads, under ``"xplane"`` of the dict returned."""
    kept: dict[str, Any] = {}
    read_timeline = callback.read_timeline

    def keep_profile(path: Path, **options: Any) -> Any:
        kept["xplane"] = path.read_bytes()
        return read_timeline(path, **options)

    callback.read_timeline = keep_profile
    return kept


def record_xla() -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np

    from crystalperf.integrations.tensorflow import CrystalPerfCallback, callback

    kept = _keeping_profile(callback)
    rng = np.random.default_rng(5)
    features, labels = rng.random((256, 32), dtype=np.float32), np.arange(256) % 4
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu", name="hidden"),
                              keras.layers.Dense(4, name="logits")], name="golden_mlp")
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    with tempfile.TemporaryDirectory() as tmp:
        model.fit(features, labels, batch_size=32, epochs=1, verbose=0,
                  callbacks=[CrystalPerfCallback(output_dir=tmp, steps=4, analyze=False)])
    path = OUT / f"{NAME}-xla.xplane.pb.gz"
    path.write_bytes(gzip.compress(kept["xplane"], mtime=0))
    print(f"{path}: {path.stat().st_size} bytes")
    return 0


def main() -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from crystalperf.integrations.tensorflow import CrystalPerfCallback, callback
    from crystalperf.integrations.tensorflow.reader import Recording, RunInfo, save_recording

    kept: dict[str, Any] = _keeping_profile(callback)
    build_trace_for = callback.build_trace_for

    def keep_recording(rec: Recording, info: RunInfo) -> Any:
        kept["recording"] = (rec, info)
        return build_trace_for(rec, info)

    callback.build_trace_for = keep_recording  # type: ignore[assignment]

    def noisy(image: Any) -> Any:
        # Python input code: what the stack sampler attributes to the step's input wait.
        array = image.numpy()
        for _ in range(20):
            array = np.tanh(array + np.float32(0.01))
        return array

    def augment(image: Any, label: Any) -> Any:
        image = tf.image.random_flip_left_right(image)
        image = tf.py_function(noisy, [image], tf.float32)
        image.set_shape((40, 40, 3))
        return image, label

    rng = np.random.default_rng(11)
    images = rng.random((96, 40, 40, 3), dtype=np.float32)
    labels = np.arange(96) % 10
    data = (tf.data.Dataset.from_tensor_slices((images, labels)).map(augment, num_parallel_calls=2)
            .batch(16).prefetch(2))
    model = keras.Sequential([
        keras.Input((40, 40, 3)),
        keras.layers.Conv2D(8, 3, activation="relu", name="conv_a"),
        keras.layers.MaxPooling2D(name="pool"),
        keras.layers.Conv2D(16, 3, activation="relu", name="conv_b"),
        keras.layers.GlobalAveragePooling2D(name="gap"),
        keras.layers.Dense(10, name="logits"),
    ], name="golden_cnn")
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report"
        # 6 steps an epoch, 2 epochs: the window (steps 2-9) crosses the epoch boundary.
        model.fit(data, epochs=2, verbose=0,
                  callbacks=[CrystalPerfCallback(output_dir=out, steps=8, sample_interval_ms=5, analyze=False)])
        rec, info = kept["recording"]
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"{NAME}.xplane.pb.gz").write_bytes(gzip.compress(kept["xplane"], mtime=0))
        plain = Path(tmp) / "recording.json"
        save_recording(rec, info, plain, xplane=f"{NAME}.xplane.pb.gz")
        (OUT / f"{NAME}-recording.json.gz").write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
        shutil.copyfile(out / "crystalperf-trace.json.gz", OUT / f"{NAME}-trace.json.gz")
    for path in sorted(OUT.glob(f"{NAME}*")):
        print(f"{path}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(reassemble() if REASSEMBLE else record_xla() if XLA else main())
