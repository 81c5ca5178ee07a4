"""A real Spark job of many tiny tasks on a small driver, with and without crystalperf: does the hook stay
bounded, does the job still end with its report, and what does the hook cost?

Each run is a fresh Python + JVM (``local[2]``, ``spark.driver.memory=512m`` by default) running one stage of
``--tasks`` tasks and a shuffle of 64 x 64, then ``spark.stop()``. Printed per setting: the median time of the
actions (the A/B overhead) and the JVM's CPU time during them (less noisy than wall time on a shared machine),
the driver's heap used after a full GC just before ``stop()``, how long ``stop()`` took and how long after the
trace appeared it returned, and whether the report was written (the analysis runs detached; the bench waits
for it). Runs are interleaved so that load from other processes spreads evenly.

    python bench/spark_many_tasks.py [--tasks 50000] [--runs 3] [--driver-memory 512m]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

JOB = textwrap.dedent('''
    import json, os, sys, time
    from pyspark.sql import SparkSession
    mode, tasks, out, memory = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    builder = (SparkSession.builder.master("local[2]").appName("many-tasks")
               .config("spark.driver.memory", memory)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "64").config("spark.sql.adaptive.enabled", "false"))
    if mode == "on":
        from crystalperf.integrations.spark import configure
        builder = configure(builder, output_dir=out)
    spark = builder.getOrCreate()
    spark.range(0, 1000, numPartitions=4).count()  # warm-up: JIT and codegen outside the timed part
    jvm_pid = spark.sparkContext._gateway.proc.pid  # spark-class execs the JVM: the launcher's pid is the JVM's
    def jvm_cpu_s():
        fields = open(f"/proc/{jvm_pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    cpu_start = jvm_cpu_s()
    start = time.perf_counter()
    # one stage of `tasks` tasks (the noop sink: no shuffle whose blocks would grow as tasks squared), then a
    # shuffle of 64 x 64 blocks
    rows = spark.range(0, tasks * 20, numPartitions=tasks).selectExpr("id % 64 AS k", "id * 31 % 1009 AS v")
    rows.write.format("noop").mode("overwrite").save()
    spark.range(0, 640_000, numPartitions=64).selectExpr("id % 64 AS k", "id AS v").groupBy("k").agg(
        {"v": "sum"}).collect()
    elapsed = time.perf_counter() - start
    jvm_cpu = jvm_cpu_s() - cpu_start
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.gc()
    runtime = jvm.java.lang.Runtime.getRuntime()
    heap = runtime.totalMemory() - runtime.freeMemory()
    before_stop = time.time()
    spark.stop()
    stopped = time.time()
    # read at once: the detached job end rewrites the trace later, this is still the listener's own write
    trace = os.path.join(out, "crystalperf-trace.json.gz")
    after_trace = stopped - os.path.getmtime(trace) if os.path.exists(trace) else None
    print("RESULT " + json.dumps({"elapsed": elapsed, "jvm_cpu": jvm_cpu, "heap": heap, "stop_s": stopped - before_stop,
                                  "after_trace_s": after_trace}))
''')


def run_once(mode: str, tasks: int, memory: str) -> dict[str, float | bool | None]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([sys.executable, "-c", JOB, mode, str(tasks), out, memory], capture_output=True,
                              text=True, env=env)
        if done.returncode != 0:
            sys.exit(f"the {mode} run failed:\n{done.stderr[-3000:]}")
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        result: dict[str, float | bool | None] = json.loads(line[len("RESULT "):])
        if mode == "on":
            report = Path(out) / "crystalperf-report.json"
            deadline = time.time() + 600
            while not report.exists() and time.time() < deadline:
                time.sleep(1)
            result["report"] = report.exists()
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--driver-memory", default="512m")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float | bool | None]]] = {"off": [], "on": []}
    for _ in range(args.runs):
        for mode in results:
            results[mode].append(run_once(mode, args.tasks, args.driver_memory))
            print(mode, results[mode][-1], flush=True)  # noqa: T201
    base = statistics.median(float(r["elapsed"] or 0) for r in results["off"])
    print(f"{args.tasks} tasks, driver memory {args.driver_memory}, {args.runs} runs each")  # noqa: T201
    print(f"{'setting':8} {'median s':>9} {'runs':>24} {'overhead':>9} {'JVM CPU s':>10} {'heap MB':>8} "  # noqa: T201
          f"{'stop() s':>9} {'stop() after trace s':>21} {'report':>7}")
    for mode, runs in results.items():
        times = [float(r["elapsed"] or 0) for r in runs]
        med = statistics.median(times)
        heap = statistics.median(float(r["heap"] or 0) for r in runs) / 1e6
        cpu = statistics.median(float(r["jvm_cpu"] or 0) for r in runs)
        stop = statistics.median(float(r["stop_s"] or 0) for r in runs)
        report = "-" if mode == "off" else f"{sum(bool(r.get('report')) for r in runs)}/{len(runs)}"
        after = [float(r["after_trace_s"]) for r in runs if r.get("after_trace_s") is not None]
        after_text = f"{max(after):.2f} (max)" if after else "-"
        print(f"{mode:8} {med:9.2f} {' '.join(f'{t:.2f}' for t in times):>24} "  # noqa: T201
              f"{100 * (med / base - 1):8.1f}% {cpu:10.1f} {heap:8.0f} {stop:9.2f} {after_text:>21} {report:>7}")


if __name__ == "__main__":
    main()
