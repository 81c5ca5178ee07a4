"""The Spark jobs of the fidelity benchmark, run as ``python -m bench.fidelity.spark_jobs CONFIG_JSON``
with the Spark environment's Python (the harness starts it inside the job's cgroups).

Each job is a fresh local[2] application with the crystalperf listener and executor plugin, configured
as a user would (``crystalperf.integrations.spark.configure``). The measured window is the job's
actions; ``OPERATION <resource> <line>`` lines name, by the source line of each action, the resource its
stages use by construction (Spark names a stage after the line of the action that ran it).
"""

from __future__ import annotations

import inspect
import json
import sys
import time
import urllib.request
from typing import Any

from bench.fidelity.probe import Window


def here(resource: str) -> None:
    """Declare the resource of the action on the caller's next line."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    print(f"OPERATION {resource} spark_jobs.py:{frame.f_back.f_lineno + 1}", flush=True)


def python_cpu(x: int) -> int:
    acc = x
    for i in range(6000):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def fetch(url: str, chunks: list[int]) -> Any:
    def read(_: Any) -> Any:
        total = 0
        for n in chunks:
            with urllib.request.urlopen(f"{url}/bytes/{n}") as answer:
                while block := answer.read(1 << 16):
                    total += len(block)
        yield total
    return read


def sleepy(x: int) -> int:
    time.sleep(0.1)
    return x


def parquet_files(spark: Any, folder: str, rows: int) -> str:
    """``rows`` rows of an id and two 128-character hex columns as uncompressed Parquet (nothing for the device to
    save on), written once."""
    import os

    path = os.path.join(folder, f"spark-parquet-{rows}")
    if not os.path.exists(os.path.join(path, "_SUCCESS")):
        (spark.range(0, rows, numPartitions=8)
         .selectExpr("id", "sha2(cast(id as string), 512) as a", "sha2(cast(id * 7 as string), 512) as b")
         .write.option("compression", "none").mode("overwrite").parquet(path))
    return path


def main() -> None:
    config = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession

    from crystalperf.integrations.spark import configure
    builder = (SparkSession.builder.master("local[2]").appName("fidelity-" + config["job"])
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4").config("spark.sql.adaptive.enabled", "false")
               # the report is read right after stop(): wait for the job-end analysis, which runs detached
               .config("spark.crystalperf.waitForAnalysisS", "900"))
    parquet_job = config["job"] == "parquet"
    if parquet_job:
        # Parquet's vectored reads (Hadoop's local file system reads the ranges on its asynchronous channel's
        # threads): the task thread waits for a reader thread blocked in the read
        builder = builder.config("spark.hadoop.parquet.hadoop.vectored.io.enabled", "true")
    spark = configure(builder, output_dir=config["out"]).getOrCreate()
    sc = spark.sparkContext
    sc.parallelize(range(100), 2).map(lambda x: x + 1).sum()  # Python workers up, outside the window
    job, p = config["job"], config["params"]
    if parquet_job:
        from pathlib import Path

        from bench.fidelity.machine import evict, warm

        parquet = parquet_files(spark, config["data_dir"], p["rows"])  # outside the window
        (evict if p["resource"] == "disk" else warm)([Path(parquet)])
    with Window(config, slots=2):
        if job in ("cpu", "mixed"):
            df = spark.range(0, p["rows"], numPartitions=4).selectExpr(
                "id % 1009 AS k", "sha2(sha2(cast(id AS string), 256), 512) AS h")
            here("cpu")
            df.groupBy("k").agg({"h": "max"}).collect()
        if job in ("disk", "mixed"):
            lines = spark.read.text(config["files"][0])
            # collect, not count: a DataFrame count() is named after a Java call site, not this line
            here("disk")
            lines.filter("value LIKE '%zzzz%'").groupBy().count().collect()
        if job == "network":
            here("network")
            sc.parallelize(range(4), 4).mapPartitions(fetch(config["url"], p["chunks"])).sum()
        if job == "idle":
            here("waiting")
            sc.parallelize(range(p["sleeps"]), 4).map(sleepy).sum()
        if job == "parquet":
            scan = spark.read.parquet(parquet)
            here(p["resource"])
            scan.filter("a LIKE '%ffff%' OR b LIKE '%ffff%'").groupBy().count().collect()
        if job == "pyudf":
            from pyspark.sql.functions import udf
            slow = udf(python_cpu, "long")
            frame = spark.range(0, p["rows"], numPartitions=4).select(slow("id").alias("v"))
            here("cpu")
            frame.agg({"v": "max"}).collect()
    spark.stop()


if __name__ == "__main__":
    main()
