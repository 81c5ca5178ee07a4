"""A real Keras ``fit`` whose tf.data pipeline records thousands of profiler events a step (a ``TextLineDataset``
batched by thousands): the memory budget ends the window after a few steps, and the steps still asked for are
timed and in the trace as one operation, so the report covers every requested step."""

from __future__ import annotations

from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from crystalperf.core.analysis import analyze  # noqa: E402
from crystalperf.core.attribution.classify import KeywordClassifier  # noqa: E402
from crystalperf.core.trace import load_trace  # noqa: E402
from crystalperf.integrations.tensorflow import CrystalPerfCallback  # noqa: E402


def test_the_steps_after_a_window_the_budget_ended_are_timed_and_reported(tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"{i:08d},{i % 10}\n" for i in range(40 * 4096)))
    width = 8

    def parse(batch: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        codes = tf.io.decode_raw(tf.strings.substr(batch, 0, width), tf.uint8)
        return tf.cast(codes, tf.float32) / 128.0, tf.strings.length(batch) % 10

    data = tf.data.TextLineDataset(str(lines)).batch(4096, drop_remainder=True).map(parse).prefetch(2)
    model = keras.Sequential([keras.Input((width,)), keras.layers.Dense(10, name="logits")])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    out = tmp_path / "report"
    callback = CrystalPerfCallback(output_dir=out, steps=(2, 38), analyze=False, memory_budget_bytes=4 * 2**20)
    history = model.fit(data, epochs=1, steps_per_epoch=40, verbose=0, callbacks=[callback])
    assert len(history.history["loss"]) == 1  # training itself was not cut

    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert any(w.startswith("the window ended after") for w in trace.warnings), trace.warnings
    tail = trace.operations[-1]
    assert tail.attributes.get("profiled") == "false", [o.name for o in trace.operations]
    profiled = int(trace.metrics["steps"])
    assert tail.name == f"steps {2 + profiled}-37 (not profiled)"
    assert profiled + int(tail.attributes["steps"]) == 36 == profiled + trace.metrics["unprofiled_steps"]
    assert [c.kind for c in tail.children] == ["input", "op"]
    assert tail.duration == pytest.approx(sum(c.duration for c in tail.children))
    report = analyze(trace, classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    assert report["iterations"]["steps"] == 36
    assert report["total_runtime_s"] == pytest.approx(trace.application.end - trace.application.start, rel=0.05)
