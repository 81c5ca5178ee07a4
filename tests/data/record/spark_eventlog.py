"""Record the Spark golden inputs of ``tests/data/``: a real event log and a real PySpark worker spool file.

Runs a small local[2] PySpark application with Spark's event log on (uncompressed) and crystalperf's
listener + Python worker sampler on, then keeps:

- ``spark-eventlog.json.gz``: Spark's own event log of the run (the one file of its rolling log), gzipped;
- ``spark-pyworker.json.gz``: one ``pyworker-<pid>.json`` the sampler wrote into the spool, gzipped.

The application: a DataFrame groupBy over a Python UDF (an SQL job with a shuffle), an RDD reduceByKey
counted (a job with a shuffle), and a join of that RDD with another (a job whose reduceByKey stage is
skipped, its shuffle output being reused).

Run it with the spark test environment: ``.nox/spark/bin/python tests/data/record/spark_eventlog.py [OUT_DIR]``
(OUT_DIR defaults to tests/data).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]


def slow_square(x: int) -> int:
    # Enough Python work per row that the worker sampler (every 0.1 s) catches it.
    total = 0
    for i in range(15_000):
        total = (total + i * x) % 1_000_003
    return total


def main() -> int:
    from operator import add

    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf

    from crystalperf.integrations.spark import configure

    work = Path(tempfile.mkdtemp(prefix="crystalperf-record-"))
    events, spool, report = work / "events", work / "spool", work / "report"
    events.mkdir()
    spool.mkdir()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master("local[2]").appName("crystalperf-golden")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.eventLog.enabled", "true")
               .config("spark.eventLog.dir", str(events))
               .config("spark.eventLog.compress", "false")
               .config("spark.crystalperf.outputDir", str(report)))
    spark = configure(builder, spool_dir=str(spool)).getOrCreate()
    sc = spark.sparkContext

    square = udf(slow_square, "long")
    rows = spark.range(0, 3000, numPartitions=4).selectExpr("id % 25 AS k", "id AS v")
    groups = rows.select("k", square("v").alias("s")).groupBy("k").sum("s").collect()

    pairs = sc.parallelize(range(3000), 4).map(lambda x: (x % 40, x)).reduceByKey(add)
    keys = pairs.count()
    other = sc.parallelize(range(40), 2).map(lambda k: (k, k * k))
    joined = pairs.join(other).count()
    sys.stdout.write(f"groups={len(groups)} keys={keys} joined={joined}\n")

    # The workers rewrite their file after every task; the listener's finish step deletes the spool
    # when the application ends, so the files are taken before that.
    workers = sorted(spool.glob("pyworker-*.json"), key=lambda p: sum(json.loads(p.read_text())["count"]))
    kept = workers[-1].read_bytes() if workers else None  # the worker that was sampled most
    spark.stop()

    # Spark 4 writes a rolling log by default: eventlog_v2_<app>/events_1_<app> (one file, the run being short).
    (log,) = (p for p in sorted(events.glob("*/events_*")) if not p.name.endswith(".inprogress"))
    with log.open("rb") as src, gzip.GzipFile(OUT / "spark-eventlog.json.gz", "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    if kept is not None:
        with gzip.GzipFile(OUT / "spark-pyworker.json.gz", "wb", mtime=0) as dst:
            dst.write(kept)
    sys.stdout.write(f"recorded {log.name} ({len(workers)} worker spool file(s)) into {OUT}; scratch {work}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
