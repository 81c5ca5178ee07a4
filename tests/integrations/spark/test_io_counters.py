"""The listener's I/O counters on a real local application: a scan of a file that is not in the page cache
shows as storage bytes read, over the application's span (the trace's ``io``, schema 1.3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.cluster import SparkCluster
from crystalperf.core.trace import load_trace
from tests.integrations.spark.test_spark_cluster import standalone_cluster  # noqa: F401 - a fixture

FILE_BYTES = 48 * 1024 * 1024


def write_uncached(path: Path, size: int) -> None:
    """A file of ``size`` bytes whose pages are not cached: reading it reaches the storage device."""
    line = b"".join(b"%08d,crystalperf-io-counter-test-line\n" % i for i in range(1024))
    with path.open("wb") as out:
        written = 0
        while written < size:
            out.write(line)
            written += len(line)
        out.flush()
        os.fsync(out.fileno())
        os.posix_fadvise(out.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/<pid>/io")
def test_a_scan_of_an_uncached_file_shows_in_the_io_rows(run_app, tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    write_uncached(data, FILE_BYTES)
    out = tmp_path / "out"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        n = spark.read.text("{data}").count()
        assert n > 0
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    rows = [r for r in trace.io if r.source == "driver"]
    assert len(rows) >= 2
    times = [r.t for r in rows]
    assert times == sorted(times)
    reads = [r.storage_read_bytes for r in rows]
    assert all(r is not None for r in reads)
    assert reads[0] == 0 and reads == sorted(reads)  # cumulative from the first row, never going down
    # the file was read from the device once (Spark may read a little more: jars, its own files)
    grown = reads[-1] - reads[0]
    assert 0.9 * FILE_BYTES <= grown <= 3 * FILE_BYTES, grown
    # the rows span the job: one before it started and one after it ended
    jobs = trace.operations
    assert times[0] <= min(op.start for op in jobs) and times[-1] >= max(op.end for op in jobs)
    # the job-wide figure the IO model reads is the last row's
    assert trace.metrics["storage_read_bytes"] == reads[-1]
    assert all(r.host for r in rows)


BLKIO = Path("/sys/fs/cgroup/blkio")
LIMIT = 7 * 1024 * 1024


@pytest.mark.skipif(not (BLKIO / "cgroup.procs").exists() or os.geteuid() != 0,
                    reason="needs root and cgroup v1 blkio (/sys/fs/cgroup/blkio)")
def test_a_blkio_limit_set_after_start_up_shows_in_the_rows(run_app, tmp_path: Path) -> None:
    """The what-if benchmark moves the running driver into a throttled cgroup: the rows say when it held."""
    out = tmp_path / "out"
    group = BLKIO / f"crystalperf-test-{os.getpid()}"
    result = run_app(f'''
        import os, time
        from pathlib import Path
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        spark.range(0, 1000).count()
        pid = str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        group, root = Path("{group}"), Path("{BLKIO}")
        dev = os.stat("{tmp_path}").st_dev
        group.mkdir()
        try:
            try:
                (group / "blkio.throttle.read_bps_device").write_text(f"{{os.major(dev)}}:{{os.minor(dev)}} {LIMIT}")
            except OSError:
                print("NO_BLKIO_LIMIT")
            (group / "cgroup.procs").write_text(pid)
            time.sleep(1.5)
            spark.range(0, 1000).count()
        finally:
            (root / "cgroup.procs").write_text(pid)
            group.rmdir()
        spark.stop()
    ''')
    if "NO_BLKIO_LIMIT" in result.stdout:
        pytest.skip("this machine's disk takes no blkio throttle")
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    limits = [r.disk_read_limit for r in trace.io if r.source == "driver"]
    assert limits[0] is None  # not limited when it started
    assert LIMIT in limits  # limited from the moment it was moved, re-read at every row
    assert limits[-1] is None  # and no longer once moved back


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/<pid>/io")
def test_executors_on_a_cluster_ship_their_rows(standalone_cluster: SparkCluster, tmp_path: Path) -> None:  # noqa: F811
    """On a standalone cluster each executor's plugin counts its own process and ships the rows to the driver."""
    import subprocess
    import sys

    out = tmp_path / "report"
    script = tmp_path / "app.py"
    script.write_text(f'''
import time
from pyspark.sql import SparkSession
from crystalperf.integrations.spark import configure
builder = (SparkSession.builder.master("{standalone_cluster.master_url}").appName("crystalperf-io-cluster")
           .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
           .config("spark.executor.cores", "1").config("spark.cores.max", "2")
           .config("spark.crystalperf.outputDir", "{out}").config("spark.crystalperf.analysis", "false"))
spark = configure(builder).getOrCreate()
deadline = time.time() + 60
while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.time() < deadline:
    time.sleep(0.5)
print("ROWS", spark.range(0, 2_000_000, numPartitions=8).selectExpr("id % 7 AS k").groupBy("k").count().count())
time.sleep(1.5)
spark.stop()
''')
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=standalone_cluster.driver_env(),
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    sources = {r.source for r in trace.io}
    assert {"driver", "executor:0", "executor:1"} <= sources, sources
    for source in sources:
        rows = [r for r in trace.io if r.source == source]
        times = [r.t for r in rows]
        assert times == sorted(times) and rows[0].storage_read_bytes == 0, source
    # on a cluster the driver's own bytes are not the job's: no job-wide figure from them
    assert "storage_read_bytes" not in trace.metrics
