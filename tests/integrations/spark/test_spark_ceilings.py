"""A slow device is a ceiling no task slot lifts (issue 42): a real local[2] Parquet scan with Parquet's vectored
(asynchronous) reads on, its files evicted from the page cache and read behind a cgroup v1 blkio read limit, is
reported disk-bound, and the settings advice at job end adds no cores. With vectored reads the task thread waits
for Hadoop's reader threads, which are the ones blocked in the read.

Needs root and a writable cgroup v1 blkio hierarchy; skips with the reason elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from bench.fidelity.machine import evict
from bench.whatif.machine import blkio_read_limit_unavailable, block_device, cgroup

READ_BPS = 2_000_000
ROWS = 80_000  # two 128-character hex columns and an id, uncompressed: about 21 MB, 10 s at READ_BPS

WRITE = textwrap.dedent('''
    import sys
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    (spark.range(0, int(sys.argv[2]), numPartitions=12)
     .selectExpr("id", "sha2(cast(id as string), 512) as a", "sha2(cast(id * 7 as string), 512) as b")
     .write.option("compression", "none").parquet(sys.argv[1]))
    spark.stop()
''')


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("parquet")
    reason = blkio_read_limit_unavailable(folder)
    if reason:
        pytest.skip(reason)
    data = folder / "data"
    done = subprocess.run([sys.executable, "-c", WRITE, str(data), str(ROWS)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    assert done.returncode == 0, done.stderr[-3000:]
    return data


@pytest.fixture(scope="module")
def disk_report(parquet: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The job-end report of the scan: the application joins the limited group after its start-up (the JVM's jars
    are read from the same device) and leaves it before ``stop()``, so the analysis it starts runs unthrottled."""
    from tests.integrations.spark.conftest import PRELUDE, wait_for_finish

    out = tmp_path_factory.mktemp("scan")
    evict([parquet])
    limits = {"blkio.throttle.read_bps_device": f"{block_device(parquet)} {READ_BPS}"}
    with cgroup("blkio", limits) as group:
        assert group is not None
        body = textwrap.dedent(f'''
            import os
            spark = session(**{{"spark.crystalperf.outputDir": "{out}",
                               "spark.hadoop.parquet.hadoop.vectored.io.enabled": "true"}})
            pids = [os.getpid(), spark.sparkContext._gateway.proc.pid]
            def join(group):
                for pid in pids:
                    with open(os.path.join(group, "cgroup.procs"), "w") as f:
                        f.write(str(pid))
            join("{group}")
            n = spark.read.parquet("{parquet}").filter("a LIKE '%ffff%' OR b LIKE '%ffff%'").count()
            join("{group.parent}")
            print("MATCHED", n)
            spark.stop()
        ''')
        done = subprocess.run([sys.executable, "-c", PRELUDE + body], cwd=out, capture_output=True, text=True,
                              timeout=600, env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    assert done.returncode == 0, done.stderr[-3000:]
    wait_for_finish(done.stderr)
    report_path = out / "crystalperf-report.json"
    assert report_path.exists(), done.stderr[-3000:]
    return dict(json.loads(report_path.read_text()))


def test_a_parquet_scan_behind_a_slow_device_is_disk_bound(disk_report: dict[str, Any]) -> None:
    bottleneck = disk_report["bottleneck"]
    assert bottleneck["resource"] == "disk", bottleneck["sentence"]


def adds_slots(changes: dict[str, Any], baseline: dict[str, Any]) -> bool:
    """Whether a what-if gives the job more task slots than it was traced with."""
    return (changes.get("cores", 0) > (baseline.get("cores_per_executor") or 0)
            or changes.get("executors", 0) > (baseline.get("executors") or 0)
            or max(changes.get("parallelism", 0), changes.get("slots", 0)) > (baseline.get("slots") or 0))


def test_its_settings_advice_adds_no_cores(disk_report: dict[str, Any]) -> None:
    faster = [s for s in disk_report.get("settings_advice") or []
              if adds_slots(s["changes"], disk_report["baseline"]) and s["speedup"] > 1.0]
    assert not faster, (f"the device is the ceiling, yet the advice adds slots: {faster}; "
                        f"advice: {disk_report.get('advice')}")
