"""The Keras callback records the process's I/O counters over ``fit`` (``Trace.io``): real fits over tf.data
pipelines reading files that were dropped from the page cache, so that the reads reach the device."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from crystalperf.core import trace as tr  # noqa: E402
from crystalperf.core.trace import load_trace  # noqa: E402
from crystalperf.integrations.tensorflow import CrystalPerfCallback  # noqa: E402
from crystalperf.integrations.tensorflow.assemble import read_limit, window_read_bytes  # noqa: E402

from .blkio import blkio_unavailable, read_limited  # noqa: E402


def _files(folder: Path, count: int, size: int) -> list[str]:
    """Random files (nothing to compress or dedupe), written through to the device and evicted from the page
    cache: reading them is reading the device."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"blob-{i:03d}.bin"
        with open(path, "wb") as f:
            f.write(os.urandom(size))
            f.flush()
            os.fsync(f.fileno())
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        paths.append(str(path))
    return paths


def _fit(paths: list[str], out: Path) -> tr.Trace:
    def load(path: Any) -> Any:
        raw = tf.io.decode_raw(tf.strings.substr(tf.io.read_file(path), 0, 32), tf.uint8)
        return tf.cast(raw, tf.float32) / 255.0, tf.constant(1)

    data = tf.data.Dataset.from_tensor_slices(paths).map(load).batch(2).prefetch(1)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callback = CrystalPerfCallback(output_dir=out, steps=(1, len(paths) // 2), analyze=False)
    history = model.fit(data, epochs=1, verbose=0, callbacks=[callback])
    assert len(history.history["loss"]) == 1
    assert callback.trace_path is not None
    return load_trace(callback.trace_path)


def test_fit_records_the_bytes_it_read_from_storage(tmp_path: Path) -> None:
    size = 4 << 20
    paths = _files(tmp_path / "blobs", 24, size)
    trace = _fit(paths, tmp_path / "report")

    rows = trace.io
    assert len(rows) >= 2, rows
    pid = f"python:{os.getpid()}"
    assert {r.source for r in rows} == {pid}
    assert all(r.host for r in rows)
    times = [r.t for r in rows]
    assert times == sorted(times)
    reads = [r.storage_read_bytes for r in rows]
    assert all(v is not None for v in reads) and reads[0] == 0  # cumulative since the first row
    assert all(b >= a for a, b in zip(reads, reads[1:], strict=False))  # never goes down
    # The pipeline read whole files (tf.io.read_file) from the device: most of their bytes show.
    assert reads[-1] >= 0.5 * len(paths) * size, reads[-1]
    # The rows span the profiled window; the window's reads (the callback's own reading at its edges) are part
    # of what the rows counted over the fit (rows 0.25 s apart locate a sub-second window only roughly).
    assert times[0] <= trace.application.start and times[-1] >= trace.application.end
    window = window_read_bytes(rows, trace.application.start, trace.application.end)
    assert window is not None and 0 <= window <= reads[-1]
    assert 0 < trace.metrics["input_read_bytes"] <= reads[-1]


@pytest.mark.skipif(blkio_unavailable() is not None, reason=str(blkio_unavailable()))
def test_a_read_limit_in_force_is_the_storage_bandwidth_the_trace_declares(tmp_path: Path) -> None:
    limit = 16_000_000
    paths = _files(tmp_path / "blobs", 16, 2 << 20)  # 32 MB: about 2 s at the limit
    with read_limited(tmp_path, limit):
        trace = _fit(paths, tmp_path / "report")
    reading = [r for r in trace.io if r.disk_read_limit is not None]
    assert reading and {r.disk_read_limit for r in reading} == {float(limit)}
    assert read_limit(trace.io, trace.application.start, trace.application.end) == limit
    # The device bandwidth the job had is the limit, not what its kernels' time made of the reads.
    assert trace.environment.disk_bandwidth == limit
    assert trace.metrics["disk_read_limit"] == limit
    # Reading at the limit: the bytes read over the fit took at least bytes / limit seconds.
    moved = trace.io[-1].storage_read_bytes or 0.0
    assert moved >= 0.5 * 16 * (2 << 20)
    assert trace.io[-1].t - trace.io[0].t >= 0.8 * moved / limit


def test_counter_rows_give_the_window_reads_and_the_limit_while_reading() -> None:
    def row(t: float, read: float, limit: float | None = None) -> tr.IoSample:
        return tr.IoSample(t=t, source="python:1", storage_read_bytes=read, disk_read_limit=limit)

    rows = [row(0.0, 0), row(1.0, 0, 5e6), row(2.0, 5e6, 5e6), row(3.0, 10e6, 5e6), row(4.0, 10e6)]
    assert window_read_bytes(rows, 1.5, 3.0) == pytest.approx(7.5e6)
    assert window_read_bytes(rows, -1.0, 9.0) == pytest.approx(10e6)
    assert window_read_bytes(rows[:1], 0.0, 1.0) is None
    assert read_limit(rows, 0.0, 4.0) == 5e6
    # A limit set only where nothing was read is no bandwidth of the job's reads.
    idle = [row(0.0, 0), row(1.0, 5e6), row(2.0, 10e6), row(3.0, 10e6, 1e6)]
    assert read_limit(idle, 0.0, 3.0) is None
