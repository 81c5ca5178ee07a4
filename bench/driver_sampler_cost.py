"""What the driver JVM's sampler (``DriverSampler.java``, ``spark.crystalperf.driverSampling``) costs, and what it
finds, on a PySpark program of many small jobs, where the driver plans a query between every two of them.

Each round runs the program twice in fresh processes, with the driver's sampler and without (the order alternating),
under ``configure()`` on ``local[2]`` for ``--seconds``; it prints the hook's own figures from each trace (the
driver JVM's ``sampler`` and ``pauses`` parts and its process CPU), the JVM driver work the samples add up to, and
what it measures: the CPU time of py4j's threads (``Thread-N``) over the run, read by the program before it stops
(it includes their few milliseconds submitting each job, which the sampler leaves to the jobs).

``.nox/spark/bin/python bench/driver_sampler_cost.py [--rounds 3] [--seconds 15]``
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = """
import sys, time
from pyspark.sql import SparkSession
from crystalperf.integrations.spark import configure
builder = (SparkSession.builder.master("local[2]").appName("many-jobs").config("spark.ui.enabled", "false")
           .config("spark.crystalperf.driverSampling", sys.argv[2]).config("spark.crystalperf.analysis", "false"))
spark = configure(builder, output_dir=sys.argv[1]).getOrCreate()
started, jobs = time.time(), 0
while time.time() - started < float(sys.argv[3]):
    spark.range(0, 20000, numPartitions=2).selectExpr("sum(id)").collect()
    jobs += 1
print("JOBS", jobs)
# ground truth: the CPU time of the JVM threads serving the program's calls (py4j's, named Thread-N)
mx = spark._jvm.java.lang.management.ManagementFactory.getThreadMXBean()
cpu = 0
for tid in mx.getAllThreadIds():
    info = mx.getThreadInfo(tid)
    if info is not None and info.getThreadName().startswith("Thread-"):
        cpu += max(0, mx.getThreadCpuTime(tid))
print("PY4J_CPU_S", cpu / 1e9)
spark.stop()
"""


def figures(trace_path: Path) -> dict[str, float]:
    with gzip.open(trace_path, "rt") as f:
        trace = json.load(f)
    driver = next(p for p in trace["hook"]["processes"] if p.get("source") == "driver")
    samples = trace["samples"]
    jvm = {i for i, key in enumerate(samples["keys"]) if key.get("thread") == "jvm-driver"}
    counted = sum(c for k, c in zip(samples["key"], samples["count"], strict=True) if k in jvm)
    return {"sampler_s": driver["parts"]["sampler"], "pauses_s": driver["parts"]["pauses"],
            "process_cpu_s": driver.get("process_cpu_s") or 0.0, "jvm_driver_s": counted * samples["interval_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="crystalperf-driver-sampler-"))
    script = work / "program.py"
    script.write_text(PROGRAM)
    results: dict[str, list[dict[str, float]]] = {"true": [], "false": []}
    for round_number in range(args.rounds):
        for mode in (("true", "false") if round_number % 2 == 0 else ("false", "true")):
            out = work / f"{mode}-{round_number}"
            done = subprocess.run([sys.executable, str(script), str(out), mode, str(args.seconds)], capture_output=True,
                                  text=True, env=dict(os.environ, PYSPARK_PYTHON=sys.executable), timeout=600)
            if done.returncode != 0:
                sys.exit(f"the program failed: {done.stderr[-2000:]}")
            results[mode].append(figures(out / "crystalperf-trace.json.gz"))
            results[mode][-1]["py4j_threads_cpu_s"] = float(done.stdout.split("PY4J_CPU_S", 1)[1].split()[0])
            print(f"round {round_number} driverSampling={mode}: {results[mode][-1]}", flush=True)
    for mode, runs in results.items():
        medians = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
        print(f"driverSampling={mode}, medians of {len(runs)}: {medians}")


if __name__ == "__main__":
    main()
