"""A real Keras ``fit`` whose requested window does not fit the callback's memory budget: the window is
shortened, the trace says so, and fit is not affected."""

from __future__ import annotations

from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
keras = pytest.importorskip("keras")

from crystalperf.core.trace import load_trace  # noqa: E402
from crystalperf.integrations.tensorflow import CrystalPerfCallback  # noqa: E402


def test_a_window_larger_than_the_budget_is_shortened_and_said(tmp_path: Path) -> None:
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, name="hidden"), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.random.rand(320, 8).astype("float32")
    y = np.random.rand(320, 1).astype("float32")
    out = tmp_path / "report"
    callback = CrystalPerfCallback(output_dir=out, steps=(2, 10**6), analyze=False, memory_budget_bytes=4 * 2**20)
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[callback])
    assert len(history.history["loss"]) == 2  # training itself was not cut
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert any("shortened" in w and "memory budget" in w for w in trace.warnings), trace.warnings
    assert 4 <= trace.metrics["steps"] <= 38 and trace.partial is None
