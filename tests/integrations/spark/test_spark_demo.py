"""``crystalperf demo`` end to end, on a small scale factor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from crystalperf.core.trace import load_trace
from tests.integrations.spark.reports import assert_no_plumbing_top_functions


def test_demo_runs_q6_and_q9_and_leaves_the_report(tmp_path: Path) -> None:
    out = tmp_path / "crystalperf-demo"
    env = dict(os.environ, CRYSTALPERF_TESTING="1")
    env.pop("PYSPARK_PYTHON", None)
    done = subprocess.run([sys.executable, "-m", "crystalperf.core.cli", "demo", "--out", str(out), "--scale", "0.02"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "report:" in done.stdout
    trace = load_trace(out / "crystalperf-trace.json.gz")
    names = [j.name for j in trace.operations]
    assert any("TPC-H Q6" in n for n in names) and any("TPC-H Q9" in n for n in names), names
    report = json.loads((out / "crystalperf-report.json").read_text())
    assert_no_plumbing_top_functions(report)
    assert report["bottleneck"]["resource"] in ("cpu", "disk", "network")
    assert (out / "crystalperf-report.html").is_file()
    assert all((out / "data" / t).is_dir() for t in ("lineitem", "orders", "part", "supplier", "partsupp", "nation"))
