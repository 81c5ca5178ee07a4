"""Skew on real local[2] Spark: one key holding 90 % of the rows makes one reduce task do most of a window's
work, and the report must flag that stage, name that partition and predict a gain; the same job over evenly
spread keys must flag nothing. AQE is off: it would split or coalesce the partitions this is about.

Behaviour only: which stage and partition, and that balancing helps; never how long anything took."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crystalperf.core.trace import METRIC_SHUFFLE_READ_BYTES, load_trace

PARTITIONS = 4
ROWS = 1_500_000

JOB = '''
spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.sql.adaptive.enabled": "false",
                   "spark.sql.shuffle.partitions": "{partitions}", "spark.ui.showConsoleProgress": "false"}})
# {key}: the key of each row; a window over it sorts and numbers each key's rows in the reduce task that holds it
rows = spark.range(0, {rows}, numPartitions={partitions}).selectExpr("{key} AS k", "crc32(cast(id AS string)) AS v")
result = rows.selectExpr("k", "v", "row_number() OVER (PARTITION BY k ORDER BY v) AS rn") \\
    .selectExpr("sum(rn % 7) AS s").collect()
print("RESULT", result[0]["s"])
# the reduce partition the hot key 0 went to: Spark's hash partitioning is pmod(murmur3 hash, partitions)
print("HOT", spark.range(1).selectExpr("pmod(hash(CAST(0 AS BIGINT)), {partitions}) AS p").first()["p"])
spark.stop()
'''

SKEWED_KEY = "CASE WHEN id % 10 < 9 THEN 0 ELSE id % 1009 + 1 END"
BALANCED_KEY = "id % 1009 + 1"


def _run(run_app, tmp_path: Path, key: str) -> tuple[dict[str, Any], Path, int]:
    out = tmp_path / "out"
    result = run_app(JOB.format(out=out, partitions=PARTITIONS, rows=ROWS, key=key))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RESULT" in result.stdout
    hot = int(next(line for line in result.stdout.splitlines() if line.startswith("HOT ")).split()[1])
    return result.report(out), out, hot


def _window_stage(out: Path) -> str:
    """The path of the stage that read the window's shuffle (the reduce side of the exchange by key)."""
    trace = load_trace(out / "crystalperf-trace.json.gz")
    reduce = [f"{job.id}/{stage.id}" for job in trace.operations for stage in job.children
              if len(stage.tasks) == PARTITIONS and sum(t.metrics.get(METRIC_SHUFFLE_READ_BYTES, 0.0)
                                                        for t in stage.tasks) > 0]
    assert len(reduce) == 1, reduce
    return reduce[0]


def test_a_hot_key_is_flagged_with_its_stage_partition_and_gain(run_app, tmp_path: Path) -> None:
    report, out, hot = _run(run_app, tmp_path, SKEWED_KEY)
    stage = _window_stage(out)
    flagged = {s["operation"]: s for s in report["skew"]}
    assert stage in flagged, report["skew"]
    skew = flagged[stage]
    # the hot partition's task read most of the shuffle: data skew, named by its partition
    assert skew["cause"] == "data"
    assert skew["slowest"][0]["index"] == hot
    read = skew["task_time_s"]["read"]
    assert read["unit"] == "bytes" and skew["slowest"][0]["read"] == read["max"] > 5 * read["p50"]
    # balanced, the stage and the job are predicted faster
    assert skew["balanced_runtime_s"] < skew["runtime_s"]
    assert skew["job_saved_s"] > 0 and skew["balanced_job_runtime_s"] < skew["job_runtime_s"]
    assert report["skew"][0]["job_saved_s"] >= skew["job_saved_s"]  # the largest gain first
    assert report["skew"][0]["sentence"] in report["advice"]
    entry = next(o for o in report["operations"] if o["path"] == stage)
    assert entry["skewed"] is True and entry["task_time_s"]["count"] == PARTITIONS
    assert f"(partition {hot})" in (out / "crystalperf-report.html").read_text()


def test_evenly_spread_keys_are_not_flagged(run_app, tmp_path: Path) -> None:
    report, out, _ = _run(run_app, tmp_path, BALANCED_KEY)
    stage = _window_stage(out)
    assert report["skew"] == [], report["skew"]
    entry = next(o for o in report["operations"] if o["path"] == stage)
    # the distribution is reported all the same, and the tasks read about the same
    assert entry["skewed"] is False and entry["task_time_s"]["count"] == PARTITIONS
    read = entry["task_time_s"]["read"]
    assert read["max"] < 1.5 * read["p50"]
    assert not any(line.startswith(("Data skew in", "Straggler in", "Skew in")) for line in report["advice"])
