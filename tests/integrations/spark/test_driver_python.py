"""A real PySpark program that works in Python between its jobs: the driver's sampler names that work, which no
JVM sampler sees, in the report's ``bottleneck.driver_work`` and its advice."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from crystalperf.core import trace as tr  # noqa: E402
from crystalperf.core.trace import load_trace  # noqa: E402


def test_the_drivers_python_between_jobs_is_named(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        spark.range(0, 100_000, numPartitions=2).selectExpr("sum(id)").collect()

        def rank_rows_in_python(n):
            total = 0
            for i in range(n):
                total = (total + i * i) % 1_000_003
            return total

        import time
        started = time.time()
        while time.time() - started < 1.5:
            rank_rows_in_python(200_000)
        spark.range(0, 100_000, numPartitions=2).selectExpr("max(id)").collect()
        spark.stop()

        # a second session of the same process: its report has its own driver work only
        def sort_rows_in_python(n):
            return sorted(range(n, 0, -1))[:3]

        spark = session(**{{"spark.crystalperf.outputDir": "{out}-2"}})
        started = time.time()
        while time.time() - started < 1.0:
            sort_rows_in_python(200_000)
        spark.range(0, 100_000, numPartitions=2).selectExpr("max(id)").collect()
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert trace.samples is not None
    assert any(k.operation == tr.DRIVER_OPERATION for k in trace.samples.keys)
    assert not any(op.id == tr.DRIVER_OPERATION for op in trace.iter_operations())
    work = result.report(out)["bottleneck"]["driver_work"]
    assert work is not None, "no driver work in the report"
    ranked = {f["name"]: f for f in work["functions"]}
    assert "__main__.rank_rows_in_python" in ranked, work["functions"]
    assert ranked["__main__.rank_rows_in_python"]["resource"] == "cpu"
    assert ranked["__main__.rank_rows_in_python"]["where"].endswith("app.py:" + str(
        next(n for n, line in enumerate((tmp_path / "app.py").read_text().splitlines(), 1)
             if line.startswith("def rank_rows_in_python"))))
    assert ranked["__main__.rank_rows_in_python"]["seconds"] >= 0.5
    assert not any(name.startswith("crystalperf.") for name in ranked)
    second = {f["name"] for f in result.report(Path(f"{out}-2"))["bottleneck"]["driver_work"]["functions"]}
    assert "__main__.sort_rows_in_python" in second and "__main__.rank_rows_in_python" not in second, second
