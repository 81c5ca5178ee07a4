"""Record ``tests/data/spark-fleet/``: a History Server directory of real local Spark applications of different
shapes, as Spark 4 writes them with nothing but ``spark.eventLog.enabled=true`` (rolling, zstd).

One Python process runs the applications one after the other (a session stopped, the next started), so the JVM
starts once; no crystalperf listener is involved (the fleet reads what any platform's History Server has):

- ``fleet-cpu``: a groupBy over a Python UDF that computes (CPU);
- ``fleet-skewed``: a reduce side where one key holds most of the rows, and each row costs (a skewed stage);
- ``fleet-failed``: a job whose tasks raise (the application ends, its job failed);
and, in ``tests/data/spark-fleet-running/``, the CPU application's log copied while it ran (an in-progress
rolling log).

Run it with the spark test environment: ``.nox/spark/bin/python tests/data/record/spark_fleet.py [OUT_DIR]``
(OUT_DIR defaults to tests/data/spark-fleet; the running copy goes beside it, OUT_DIR-running).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "spark-fleet"


def burn(x: int) -> int:
    total = 0
    for i in range(4000):
        total = (total + i * x) % 1_000_003
    return total


def session(name: str, log_dir: Path):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2]").appName(name)
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4").config("spark.sql.adaptive.enabled", "false")
            .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", str(log_dir))
            .getOrCreate())


def main() -> int:
    from pyspark.sql.functions import udf

    work = Path(tempfile.mkdtemp(prefix="crystalperf-record-fleet-"))
    logs = work / "spark-events"
    logs.mkdir()
    running = work / "running"

    spark = session("fleet-cpu", logs)
    square = udf(burn, "long")
    spark.range(0, 2000, numPartitions=4).selectExpr("id % 10 AS k", "id AS v") \
        .select("k", square("v").alias("s")).groupBy("k").sum("s").collect()
    time.sleep(2)  # the listener bus writes the job's events asynchronously
    app = spark.sparkContext.applicationId
    (live,) = [p for p in logs.iterdir() if app in p.name]
    shutil.copytree(live, running / live.name)
    spark.stop()

    spark = session("fleet-skewed", logs)
    sc = spark.sparkContext
    hot = sc.parallelize(range(6000), 4).map(lambda x: (0 if x % 10 else x % 8, x))  # 90 % of rows under key 0
    hot.groupByKey(8).mapValues(lambda values: sum(burn(v) for v in values)).count()
    spark.stop()

    spark = session("fleet-failed", logs)

    def fail(x: int) -> int:
        raise ValueError(f"a bad row: {x}")

    try:
        spark.sparkContext.parallelize(range(10), 2).map(fail).count()
    except Exception as exc:  # noqa: BLE001 - the job's failure is what is recorded
        sys.stdout.write(f"the job failed as it should: {type(exc).__name__}\n")
    spark.stop()

    running_out = OUT.with_name(OUT.name + "-running")
    for source, target in ((logs, OUT), (running, running_out)):
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(".*"))  # not Hadoop's .crc files
        for path in sorted(target.rglob("*")):
            sys.stdout.write(f"{path.relative_to(target.parent)} {path.stat().st_size if path.is_file() else ''}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
