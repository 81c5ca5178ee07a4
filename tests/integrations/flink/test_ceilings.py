"""A slow device is a ceiling no parallelism lifts (issue 42): a real PyFlink batch job scanning CSV files (the
filesystem connector, FLIP-27 split fetchers) that are evicted from the page cache and read behind a cgroup v1
blkio read limit is reported disk-bound, not input-bound, and its settings advice adds no parallelism.

The mini cluster's JVM (the PyFlink gateway) joins the limited group for the job only and leaves it before the job
is finished by hand (``crystalperf.integrations.flink.finish``, as docs/flink.md describes), so the analysis runs
unthrottled. Needs root and a writable cgroup v1 blkio hierarchy; skips with the reason elsewhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.fidelity.machine import evict
from bench.whatif.flink import ensure_csv
from bench.whatif.machine import blkio_read_limit_unavailable, block_device, cgroup
from crystalperf.integrations import flink as cpflink

from .sql_jobs import batch_table_env

READ_BPS = 2_000_000
FILES = 4
TOTAL_BYTES = 20_000_000  # 10 s at READ_BPS
PARALLELISM = 2


def _move(pid: int, group: Path) -> None:
    (group / "cgroup.procs").write_text(str(pid))


@pytest.fixture(scope="module")
def disk_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("pyflink")
    from pyflink.common import Configuration
    from pyflink.java_gateway import get_gateway

    root = tmp_path_factory.mktemp("flink-ceiling")
    reason = blkio_read_limit_unavailable(root)
    if reason:
        pytest.skip(reason)
    data = ensure_csv(root / "csv", FILES, TOTAL_BYTES)
    out = root / "out"
    env = batch_table_env(cpflink.configure(Configuration(), out, analyze=False), parallelism=PARALLELISM)
    env.execute_sql(f"CREATE TABLE src (id BIGINT, k INT, v DOUBLE, s STRING) WITH ('connector'='filesystem', "
                    f"'path'='file://{data}', 'format'='csv')")
    env.execute_sql("CREATE TABLE snk (k INT, n BIGINT, total DOUBLE) WITH ('connector'='blackhole')")
    statement = "INSERT INTO snk SELECT k, COUNT(*), SUM(v) FROM src GROUP BY k"
    cpflink.record_plan(env, out, statement)
    jvm = int(get_gateway().jvm.java.lang.ProcessHandle.current().pid())
    evict([data])
    with cgroup("blkio", {"blkio.throttle.read_bps_device": f"{block_device(data)} {READ_BPS}"}) as group:
        assert group is not None
        _move(jvm, group)
        try:
            env.execute_sql(statement).wait()
        finally:
            _move(jvm, group.parent)
    [part] = cpflink.wait_for_metrics(out)
    cpflink.finish(part, out)
    return dict(json.loads((out / "crystalperf-report.json").read_text()))


def test_a_batch_file_scan_behind_a_slow_device_is_disk_bound(disk_report: dict[str, Any]) -> None:
    bottleneck = disk_report["bottleneck"]
    assert bottleneck["resource"] == "disk", bottleneck["sentence"]


def test_its_settings_advice_adds_no_parallelism(disk_report: dict[str, Any]) -> None:
    traced = disk_report["baseline"]["slots"]
    faster = [s for s in disk_report.get("settings_advice") or []
              if int(s["settings"].get("parallelism.default", 0)) > traced and s["speedup"] > 1.0]
    assert not faster, (f"the device is the ceiling, yet the advice raises parallelism.default: {faster}; "
                        f"advice: {disk_report.get('advice')}")
