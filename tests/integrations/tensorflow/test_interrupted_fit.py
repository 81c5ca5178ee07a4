"""A real Keras ``fit`` that does not end normally -- SIGTERM'd, interrupted, its SIGTERM handled by the user --
still leaves a readable trace marked partial, and the process ends as it would without the callback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("keras")

from crystalperf.core.trace import load_trace  # noqa: E402

TRAINING = """
import signal, sys, time
import keras, numpy as np
from crystalperf.integrations.tensorflow import CrystalPerfCallback

out, mode = sys.argv[1], sys.argv[2]
# Ctrl-C raises KeyboardInterrupt, as in a terminal's Python: a test run started in the background by a
# non-interactive shell hands its children SIGINT ignored, and Python then leaves it so.
signal.signal(signal.SIGINT, signal.default_int_handler)
if mode == "user-handler":
    def users_handler(signum, frame):
        print("user handler ran", flush=True)
        sys.exit(3)
    signal.signal(signal.SIGTERM, users_handler)

class Progress(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.05)  # slow enough steps to be signalled in the middle of training
        print(f"batch {batch}", flush=True)

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, name="hidden"), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x = np.random.rand(256, 8).astype("float32"); y = np.random.rand(256, 1).astype("float32")
model.fit(x, y, batch_size=8, epochs=50, verbose=0,
          callbacks=[CrystalPerfCallback(output_dir=out, analyze=False), Progress()])
print("fit returned", flush=True)
"""


def _train_until_signalled(tmp_path: Path, mode: str, signum: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "report"
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CRYSTALPERF_TESTING"}
    env["TMPDIR"] = str(temp)  # where the profiler's directory goes: it must be gone afterwards
    child = subprocess.Popen([sys.executable, "-c", TRAINING, str(out), mode], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    assert child.stdout is not None
    for line in child.stdout:
        lines.append(line)
        if line.startswith("batch ") and int(line.split()[1]) >= 10:  # inside the window of steps 2-21
            child.send_signal(signum)
            break
    try:
        rest, err = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        raise
    done = subprocess.CompletedProcess(child.args, child.returncode, "".join(lines) + rest, err)
    assert not list(temp.glob("crystalperf-tf-*")), "the profiler's temporary directory was left behind"
    return done, out / "crystalperf-trace.json.gz"


def test_a_sigterm_mid_training_leaves_a_partial_trace_and_still_kills(tmp_path: Path) -> None:
    done, path = _train_until_signalled(tmp_path, "default", signal.SIGTERM)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]  # as without the callback
    assert "fit returned" not in done.stdout
    trace = load_trace(path)
    assert trace.partial is not None and trace.partial.startswith("fit() received SIGTERM after")
    assert trace.application.status == "cancelled"
    steps = [op for op in trace.operations if op.kind == "step"]
    assert len(steps) >= 5 and trace.metrics["steps"] == len(steps)  # the steps profiled before the signal
    assert all(op.children for op in steps)  # with their layers: the profiler's events were read


def test_a_users_sigterm_handler_is_still_called(tmp_path: Path) -> None:
    done, path = _train_until_signalled(tmp_path, "user-handler", signal.SIGTERM)
    assert "user handler ran" in done.stdout and done.returncode == 3, done.stderr[-2000:]
    trace = load_trace(path)
    assert trace.partial is not None and "SIGTERM" in trace.partial


def test_an_interrupted_fit_leaves_a_partial_trace_at_exit(tmp_path: Path) -> None:
    done, path = _train_until_signalled(tmp_path, "default", signal.SIGINT)
    assert "KeyboardInterrupt" in done.stderr and done.returncode != 0
    trace = load_trace(path)
    assert trace.application.status == "failed"
    assert trace.partial is not None and "KeyboardInterrupt" in trace.partial
    assert len([op for op in trace.operations if op.kind == "step"]) >= 5


def test_input_code_in_a_file_whose_name_is_not_utf8_leaves_a_trace_and_a_report(tmp_path: Path) -> None:
    import importlib.util
    import json

    import keras
    import numpy as np
    import tensorflow as tf

    from crystalperf.integrations.tensorflow import CrystalPerfCallback

    source = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"input-\xff\xfe.py"))  # '\udcff\udcfe' in the name
    Path(source).write_text("import time\n\ndef slow_features(index):\n    time.sleep(0.02)\n"
                            "    return [float(index % 7)] * 16\n")
    spec = importlib.util.spec_from_file_location("input_not_utf8", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def load(index: object) -> object:
        features = tf.py_function(lambda i: np.asarray(module.slow_features(int(i)), np.float32), [index], tf.float32)
        features.set_shape((16,))
        return features, index % 2

    data = tf.data.Dataset.range(64).map(load).batch(4)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    out = tmp_path / "report"
    model.fit(data, epochs=1, steps_per_epoch=12, verbose=0,
              callbacks=[CrystalPerfCallback(output_dir=out, steps=8, sample_interval_ms=5, cpu_budget=0.1)])
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert trace.samples is not None
    files = {f.file for f in trace.samples.frames if f.file}
    assert any(f.endswith("input-\\xff\\xfe.py") for f in files), files  # sampled, its bytes escaped
    deadline = time.monotonic() + 600  # the report comes from the finish process fit did not wait for
    while not (out / "crystalperf-report.json").is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert json.loads((out / "crystalperf-report.json").read_text())["operations"]
