"""Overhead of crystalperf's Spark listener + task-thread sampler (and the Python worker sampler) on a
local[2] job, at 100 ms and 10 ms sampling, against the same job without crystalperf.

Every run is a fresh Python + JVM; the timed part is the job's actions only (not start-up, not the
trace writing and analysis at ``spark.stop()``, which happen after the job). Runs are interleaved so
that load from other processes on the machine spreads over all settings.

    python bench/spark_overhead.py [--runs 3] [--rows 4000000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

JOB = textwrap.dedent('''
    import sys, time
    from pyspark.sql import SparkSession
    mode, rows, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    builder = (SparkSession.builder.master("local[2]").appName("overhead")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "8"))
    if mode != "off":
        from crystalperf.integrations.spark import configure
        builder = configure(builder, output_dir=out, sample_interval_ms=int(mode))
        builder = builder.config("spark.crystalperf.analysis", "false")
    spark = builder.getOrCreate()
    spark.range(0, 1000).count()  # warm-up: JIT and codegen outside the timed part
    start = time.perf_counter()
    df = spark.range(0, rows).selectExpr("id % 10007 AS k", "sha2(cast(id AS string), 256) AS h")
    # collect(), not count(): a count lets the optimizer drop the unused aggregate and the hashing with it.
    df.groupBy("k").agg({"h": "max"}).collect()
    spark.sparkContext.parallelize(range(2000), 4).map(lambda x: sum(i * x % 7 for i in range(3000))).sum()
    elapsed = time.perf_counter() - start
    spark.stop()
    print("ELAPSED", elapsed)
''')


def run_once(mode: str, rows: int, out: str) -> float:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, "-c", JOB, mode, str(rows), out], capture_output=True, text=True,
                          env=env)
    if done.returncode != 0:
        sys.exit(f"the {mode} run failed:\n{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("ELAPSED"))
    return float(line.split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=4_000_000)
    args = parser.parse_args()
    modes = {"off": "no crystalperf", "100": "listener + sampler, 100 ms", "10": "listener + sampler, 10 ms"}
    times: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.runs):
            for mode in modes:
                times[mode].append(run_once(mode, args.rows, out))
    base = statistics.median(times["off"])
    print(f"{'setting':32} {'median s':>9} {'runs':>28} {'overhead':>9}")  # noqa: T201
    for mode, label in modes.items():
        med = statistics.median(times[mode])
        runs = " ".join(f"{t:.2f}" for t in times[mode])
        print(f"{label:32} {med:9.2f} {runs:>28} {100 * (med / base - 1):8.1f}%")  # noqa: T201


if __name__ == "__main__":
    main()
