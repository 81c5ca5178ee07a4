"""Spark scale cases, local mode (the cluster ones are in ``bench.whatif.scale.cluster``):

- ``sha-up`` / ``sha-down``: CPU-bound Spark SQL, three rounds of SHA-256 chains over 400,000 rows in 16
  partitions, ``local[1]`` -> ``local[2]`` and back. On a 2-core machine the JVM's own threads (JIT, GC, the
  driver, the shuffle) already use part of the second core at ``local[1]``.
- ``parquet-disk``: a Parquet scan (16 uncompressed files, about 64 MB of random hex, evicted from the page cache
  before every run) behind a 5 MB/s cgroup read limit on their device, ``local[2]`` -> ``local[4]``: the device is
  the ceiling, more slots gain nothing. Parquet's vectored reads are on (``parquet.hadoop.vectored.io.enabled``,
  Hadoop's local file system reads the ranges on its asynchronous channel's threads): a task thread waits for
  reader threads blocked in a read.

The runtime is the application's span up to the end of the action (``spark.stop()`` excluded), as the other
Spark what-if cases measure it. Every run is traced.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from bench.fidelity.machine import evict
from bench.whatif import machine
from bench.whatif.interpreters import spark_python
from bench.whatif.machine import cgroup
from bench.whatif.runner import Run, Target

JOB = textwrap.dedent('''
    import json, os, sys, time
    config = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.appName("scale-" + config["case"])
    if config.get("master"):
        builder = builder.master(config["master"])
    for key, value in config.get("conf", {}).items():  # a cluster's master, driver address...
        builder = builder.config(key, value)
    builder = (builder
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.adaptive.enabled", "false").config("spark.sql.shuffle.partitions", "16")
               .config("spark.sql.files.maxPartitionBytes", str(8 * 1024 * 1024))
               .config("spark.hadoop.parquet.hadoop.vectored.io.enabled", "true"))
    if config.get("out"):
        from crystalperf.integrations.spark import configure
        builder = configure(builder, output_dir=config["out"]).config("spark.crystalperf.analysis", "false")
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    deadline = time.time() + 120
    while config.get("executors") and time.time() < deadline and \
            sc._jsc.sc().getExecutorMemoryStatus().size() < config["executors"] + 1:
        time.sleep(0.2)
    # Limits are joined after start-up: the JVM's start-up reads hundreds of MB of jars from the same device.
    for group in config.get("cgroups", []):
        for pid in (os.getpid(), sc._gateway.proc.pid):
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(pid))
    if config["case"] == "sha":
        df = spark.range(0, config["rows"], numPartitions=16).selectExpr(
            "sha2(sha2(sha2(cast(id as string), 256), 256), 256) as h")
        for _ in range(3):
            df = df.selectExpr("sha2(sha2(h, 256), 256) as h")
        result = df.selectExpr("count(distinct substring(h, 1, 3)) as n").collect()[0][0]
    elif config["case"] == "parquet-write":
        (spark.range(0, config["rows"], numPartitions=16)
         .selectExpr("id", "sha2(cast(id as string), 512) as a", "sha2(cast(id * 7 as string), 512) as b")
         .write.option("compression", "none").mode("overwrite").parquet(config["data"]))
        result = 0
    else:
        scan = spark.read.parquet(config["data"])
        result = scan.filter("a LIKE '%ffff%' OR b LIKE '%ffff%'").count()
    end = time.time()
    print("RESULT", json.dumps({"runtime_s": end - sc.startTime / 1000, "result": result}))
    spark.stop()
''')

SHA_ROWS = 400_000
PARQUET_ROWS = 250_000  # two 128-character hex columns and an id: about 64 MB uncompressed
DISK_BPS = 5_000_000


def _not_installed(python: str | None) -> Any:
    return (lambda: None) if python else (lambda: "pyspark is not installed (set CRYSTALPERF_SPARK_PYTHON)")


def run_job(python: str, job: dict[str, Any], timeout_s: float = 1800, env: dict[str, str] | None = None) -> float:
    """One application in a fresh Python (its driver); its runtime."""
    done = subprocess.run([python, "-c", JOB, json.dumps(job)], capture_output=True, text=True, timeout=timeout_s,
                          env=env)
    if done.returncode != 0:
        raise RuntimeError(f"spark {job['case']} job failed: {done.stderr[-2000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return float(json.loads(line.split(" ", 1)[1])["runtime_s"])


def ensure_parquet(python: str, folder: Path, rows: int = PARQUET_ROWS) -> Path:
    """The scan's Parquet files, written once."""
    data = folder / f"scale-parquet-{rows}"
    marker = data / "_SUCCESS"
    if not marker.exists():
        run_job(python, {"case": "parquet-write", "master": "local[2]", "rows": rows, "data": str(data)})
    return data


def traced_run(out_dir: Path, runtime: float) -> Run:
    trace = out_dir / "crystalperf-trace.json.gz"
    return Run(runtime, trace if trace.exists() else None, runtime)


class ShaCase:
    """CPU-bound SQL at ``local[N]``: traced at ``cores`` and re-run at ``target_cores``."""

    framework = "spark"
    where = "local"
    ceiling: str | None = None
    expect = ("cores",)

    def __init__(self, cores: int, target_cores: int) -> None:
        self.name = "sha-up" if target_cores > cores else "sha-down"
        self.python = spark_python()
        self.baseline: dict[str, Any] = {"case": "sha", "master": f"local[{cores}]", "rows": SHA_ROWS}
        self.target_cores = target_cores

    def targets(self, quick: bool) -> list[Target]:
        kind = "cores-up" if self.name.endswith("up") else "cores"
        cores = self.baseline["master"][6:-1]
        return [Target(f"local[{cores}] -> local[{self.target_cores}]", kind,
                       {**self.baseline, "master": f"local[{self.target_cores}]"}, [f"cores={self.target_cores}"],
                       _not_installed(self.python))]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        assert self.python is not None
        return traced_run(out_dir, run_job(self.python, {**config, "out": str(out_dir)}))


class ParquetDiskCase:
    """A Parquet scan behind a 5 MB/s read limit, ``local[2]`` -> ``local[4]``: the device is the ceiling."""

    framework = "spark"
    where = "local"
    ceiling: str | None = "disk"
    expect = ("cores",)
    name = "parquet-disk"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.python = spark_python()
        self.baseline: dict[str, Any] = {"case": "parquet", "master": "local[2]", "read_bps": DISK_BPS}

    def targets(self, quick: bool) -> list[Target]:
        no_spark = _not_installed(self.python)
        return [Target("local[2] -> local[4], 5 MB/s device", "cores-up", {**self.baseline, "master": "local[4]"},
                       ["cores=4"], lambda: no_spark() or machine.disk_throttle_unavailable(self.data_dir))]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        assert self.python is not None
        data = ensure_parquet(self.python, self.data_dir)
        limits = {"blkio.throttle.read_bps_device": f"{machine.block_device(data)} {config['read_bps']}"}
        evict([data])
        with cgroup("blkio", limits) as group:
            job = {**config, "data": str(data), "out": str(out_dir), "cgroups": [str(group)] if group else []}
            return traced_run(out_dir, run_job(self.python, job))


def cases(data_dir: Path) -> list[Any]:
    return [ParquetDiskCase(data_dir), ShaCase(1, 2), ShaCase(2, 1)]
