"""The reporter's I/O counters on a real local Flink job: a filesystem source scanning a CSV file that is not in
the page cache shows as storage bytes read by the mini cluster's process, over the job's span (the trace's
``io``, schema 1.3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crystalperf.integrations import flink as cpflink

from .sql_jobs import batch_table_env

FILE_BYTES = 48 * 1024 * 1024


def write_uncached(path: Path, size: int) -> None:
    """A CSV file of ``size`` bytes whose pages are not cached: reading it reaches the storage device."""
    block = b"".join(b"%08d,crystalperf-io-counter-test-line\n" % i for i in range(1024))
    with path.open("wb") as out:
        written = 0
        while written < size:
            out.write(block)
            written += len(block)
        out.flush()
        os.fsync(out.fileno())
        os.posix_fadvise(out.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/<pid>/io")
def test_a_filesystem_scan_shows_in_the_io_rows(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    from pyflink.common import Configuration

    data = tmp_path / "data"
    data.mkdir()
    write_uncached(data / "part-0.csv", FILE_BYTES)
    out = tmp_path / "out"
    env = batch_table_env(cpflink.configure(Configuration(), out, analyze=False), parallelism=1)
    env.execute_sql(f"CREATE TABLE src (n STRING, s STRING) WITH ('connector'='filesystem', 'path'='{data}', "
                    "'format'='csv')")
    env.execute_sql("CREATE TABLE snk (n STRING, s STRING) WITH ('connector'='blackhole')")
    env.execute_sql("INSERT INTO snk SELECT n, s FROM src").wait()

    [part] = cpflink.wait_for_metrics(out)
    trace = cpflink.read_metrics(part)
    jvm = [r for r in trace.io if r.source.startswith("minicluster:")]
    assert len(jvm) >= 2, trace.io
    times = [r.t for r in jvm]
    assert times == sorted(times)
    reads = [r.storage_read_bytes for r in jvm]
    assert all(r is not None for r in reads)
    assert reads[0] == 0 and reads == sorted(reads)  # counted from the job's first row, never going down
    grown = reads[-1] - reads[0]
    assert 0.9 * FILE_BYTES <= grown <= 3 * FILE_BYTES, grown
    # within the job's span, bar one row before it and one after it
    start, end = trace.application.start, trace.application.end
    assert len([t for t in times if t < start]) <= 1 and len([t for t in times if t > end]) <= 1
    assert times[0] <= start + 0.5 and times[-1] >= end - 0.5
    # every source's rows are of this job's span alone (the Python program's too, when it spooled any)
    for source in {r.source for r in trace.io}:
        own = [r.t for r in trace.io if r.source == source]
        assert len([t for t in own if t < start]) <= 1 and len([t for t in own if t > end]) <= 1, source
