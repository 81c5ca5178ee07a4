"""``crystalperf diff`` and ``crystalperf validate`` on real local Spark runs traced by the listener.

- diff: the same text scan run twice, the second time reading its (evicted) input through a cgroup v1 blkio
  read limit (the helpers of ``test_whatif_up``); the diff must name the scan stage as what slowed, by disk;
- validate: a CPU-bound job traced on ``local[1]`` and re-run on ``local[2]``; validate must derive the cores
  change from the two traces and report the predicted and measured runtimes and the error.

Behaviour only: no accuracy bound (that is ``bench/whatif``'s business).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from bench.fidelity.machine import evict
from bench.whatif.spark import UP_JOB, ensure_text
from crystalperf.core.trace import load_trace
from tests.integrations.spark.test_whatif_up import blkio_unavailable, read_limit

READ_LIMIT = 4_000_000  # bytes/s: the 24 MB scan takes about 6 s behind it, well under one unthrottled

CPU_JOB = textwrap.dedent('''
    import json, sys
    config = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession
    from crystalperf.integrations.spark import configure
    builder = (SparkSession.builder.appName("diff-validate-cpu").master(config["master"])
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.adaptive.enabled", "false").config("spark.sql.shuffle.partitions", "2"))
    spark = configure(builder, output_dir=config["out"]).config("spark.crystalperf.analysis", "false").getOrCreate()
    rows = spark.range(0, 12_000_000, numPartitions=8).selectExpr(
        "sum(crc32(concat(cast(id as string), 'x'))) as s").collect()
    print("RESULT", json.dumps({"result": int(rows[0]["s"])}))
    spark.stop()
''')


def _spark(script: str, config: dict[str, Any], cwd: Path) -> dict[str, Any]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, CRYSTALPERF_TESTING="1")
    done = subprocess.run([sys.executable, "-c", script, json.dumps(config)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.split(" ", 1)[1])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crystalperf.core.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_diff_names_the_scan_stage_read_through_a_throttled_device(tmp_path: Path) -> None:
    reason = blkio_unavailable(tmp_path)
    if reason:
        pytest.skip(reason)
    data = ensure_text(tmp_path, files=6, size=4_000_000)
    dev = data.stat().st_dev
    device = f"{os.major(dev)}:{os.minor(dev)}"
    job = {"case": "scan", "master": "local[2]", "data": str(data)}
    evict([data])
    fast = _spark(UP_JOB, {**job, "out": str(tmp_path / "a")}, tmp_path)
    evict([data])
    with read_limit(device, READ_LIMIT) as group:
        slow = _spark(UP_JOB, {**job, "out": str(tmp_path / "b"), "cgroups": [str(group)]}, tmp_path)
    assert fast["result"] == slow["result"]
    a, b = tmp_path / "a" / "crystalperf-trace.json.gz", tmp_path / "b" / "crystalperf-trace.json.gz"

    done = _cli("diff", str(a), str(b), "--json", str(tmp_path / "diff.json"), "--html", str(tmp_path / "diff.html"))
    print(done.stdout)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "diff.json").read_text())
    # The whole runtime also holds the JVM's start-up, which a busy machine stretches by seconds either way:
    # the slowed operation is what must show, whichever way the total moved.
    top = result["slowed"][0]
    assert top["kind"] == "stage" and top["resource"] == "disk", result["slowed"]
    assert top["resource_delta_s"] > 0
    stages = {op.id: op for op in load_trace(b).iter_operations()}
    scan = stages[top["path"].rsplit("/", 1)[-1]]
    assert "FileScanRDD" in scan.attributes.get("rdd_lineage", ""), scan.attributes
    assert "disk +" in done.stdout
    assert 'id="slowed"' in (tmp_path / "diff.html").read_text()
    slower = result["runtime"]["b_s"] > result["runtime"]["a_s"] * 1.1
    assert _cli("diff", str(a), str(b), "--fail-if-slower", "10%").returncode == (1 if slower else 0)


def test_validate_reports_the_error_of_a_cores_prediction(tmp_path: Path) -> None:
    one = _spark(CPU_JOB, {"master": "local[1]", "out": str(tmp_path / "one")}, tmp_path)
    two = _spark(CPU_JOB, {"master": "local[2]", "out": str(tmp_path / "two")}, tmp_path)
    assert one["result"] == two["result"]
    traced, rerun = tmp_path / "one" / "crystalperf-trace.json.gz", tmp_path / "two" / "crystalperf-trace.json.gz"

    done = _cli("validate", str(traced), str(rerun), "--json", str(tmp_path / "validate.json"))
    print(done.stdout)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "validate.json").read_text())
    assert result["changes"]["values"] == {"cores": 2}
    assert result["measured_runtime_s"] == pytest.approx(load_trace(rerun).application.duration, abs=1e-3)
    assert result["predicted"]["crystalperf"]["runtime_s"] > 0
    for name in ("crystalperf", "linear", "replay"):
        assert math.isfinite(result["error"][name])
    assert result["operations"], "no operation of the two runs was matched"
    assert all(r["measured_s"] >= 0 and r["predicted_s"] >= 0 for r in result["operations"])
    assert "Predicted" in done.stdout and "error" in done.stdout
