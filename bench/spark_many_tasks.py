"""A real Spark job of many tiny tasks on a small driver, with and without crystalperf: does the hook stay
bounded, does the job still end with its report, and what does the hook cost?

Each run is a fresh Python + JVM (``local[2]``, ``spark.driver.memory=512m`` by default) running one stage of
``--tasks`` tasks and a shuffle of 64 x 64, then ``spark.stop()``. Printed per setting: the median time of the
actions (the A/B overhead) and the JVM's CPU time during them (less noisy than wall time on a shared machine),
the driver's heap used after a full GC just before ``stop()``, how long ``stop()`` took and how long after the
trace appeared it returned, and whether the report was written (the analysis runs detached; the bench waits
for it). Runs are interleaved so that load from other processes spreads evenly.

    python bench/spark_many_tasks.py [--tasks 50000] [--runs 3] [--driver-memory 512m]

To find where the hook's time goes, ``--setting NAME:KEY=VALUE,...`` adds a setting with crystalperf on (off where NAME
starts with ``off``) and those ``spark.crystalperf.*`` (or any Spark) properties (e.g. ``--setting nosampler:spark.crystalperf.sampling=false``),
``--only`` leaves out the plain off/on settings, and ``--jfr DIR`` records each run's driver under Java Flight
Recorder into ``DIR/<setting>-<run>.jfr`` (``jfr print --events jdk.ExecutionSample`` reads them).

``--java-options "..."`` sets the driver JVM's options in every setting. At 512 MB, G1's regions are 1 MiB and
Spark serialises every task's result into a fresh 1 MiB chunk (``SerializerHelper.serializeToChunkedBuffer``),
which is a humongous object: at 50,000 tasks G1 runs hundreds of young collections and concurrent cycles for
them with or without crystalperf (JFR: 49 GB of sampled ``byte[]`` allocations there, GC causes "G1 Humongous
Allocation" and "G1 Preventive Collection"), and that storm's run-to-run variation is larger than the hook's
cost. ``--java-options -XX:G1HeapRegionSize=4m`` takes it out of both sides of the comparison.
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
    extra = json.loads(sys.argv[5])
    builder = (SparkSession.builder.master("local[2]").appName("many-tasks")
               .config("spark.driver.memory", memory)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "64").config("spark.sql.adaptive.enabled", "false"))
    for key, value in extra.items():
        builder = builder.config(key, value)
    if not mode.startswith("off"):
        from crystalperf.integrations.spark import configure
        builder = configure(builder, output_dir=out)
    spark = builder.getOrCreate()
    spark.range(0, 1000, numPartitions=4).count()  # warm-up: JIT and codegen outside the timed part
    jvm_pid = spark.sparkContext._gateway.proc.pid  # spark-class execs the JVM: the launcher's pid is the JVM's
    def jvm_cpu_s():
        fields = open(f"/proc/{jvm_pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    def thread_cpu_s():
        # per thread id: (name without digits, CPU s); threads that ended are missing, hence only a breakdown
        found = {}
        for tid in os.listdir(f"/proc/{jvm_pid}/task"):
            try:
                text = open(f"/proc/{jvm_pid}/task/{tid}/stat").read()
            except OSError:
                continue
            name = "".join(c for c in text[text.index("(") + 1:text.rindex(")")] if not c.isdigit()).strip()
            fields = text.rsplit(")", 1)[1].split()
            found[tid] = (name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
        return found
    def gc_counts():
        # young (and mixed) collections and G1 concurrent cycles so far (jstat's YGC and CGC; -1: no jstat)
        try:
            import subprocess
            head, values = subprocess.run(["jstat", "-gc", str(jvm_pid)], capture_output=True, text=True,
                                          timeout=30).stdout.splitlines()[:2]
            row = dict(zip(head.split(), values.split()))
            return {"young_gcs": int(row["YGC"]), "concurrent_gcs": int(row.get("CGC", "-1"))}
        except Exception:
            return {"young_gcs": -1, "concurrent_gcs": -1}
    gc_start = gc_counts()
    threads_start = thread_cpu_s()
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
    gcs = {k: v - gc_start[k] for k, v in gc_counts().items()}
    threads = {}
    for tid, (name, cpu) in thread_cpu_s().items():
        threads[name] = threads.get(name, 0.0) + cpu - threads_start.get(tid, (name, 0.0))[1]
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
                                  "after_trace_s": after_trace, "threads": threads,
                                  **gcs}))
''')


def run_once(mode: str, tasks: int, memory: str, extra: dict[str, str]) -> dict[str, float | bool | None]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([sys.executable, "-c", JOB, mode, str(tasks), out, memory, json.dumps(extra)],
                              capture_output=True, text=True, env=env)
        if done.returncode != 0:
            sys.exit(f"the {mode} run failed:\n{done.stderr[-3000:]}")
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        result: dict[str, float | bool | None] = json.loads(line[len("RESULT "):])
        if not mode.startswith("off") and extra.get("spark.crystalperf.analysis") != "false":
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
    parser.add_argument("--setting", action="append", default=[], metavar="NAME:KEY=VALUE,...",
                        help="another setting with crystalperf on and these Spark properties")
    parser.add_argument("--only", action="store_true", help="run only the --setting ones (and off)")
    parser.add_argument("--jfr", type=Path, metavar="DIR", help="record each run's driver JVM with JFR here")
    parser.add_argument("--java-options", default="", help="driver JVM options for every setting")
    args = parser.parse_args()
    settings: dict[str, dict[str, str]] = {"off": {}} if args.only else {"off": {}, "on": {}}
    for spec in args.setting:
        name, _, props = spec.partition(":")
        settings[name] = dict(p.split("=", 1) for p in props.split(",") if p)
    results: dict[str, list[dict[str, float | bool | None]]] = {mode: [] for mode in settings}
    for run in range(args.runs):
        for mode, extra in settings.items():
            options = [args.java_options] if args.java_options else []
            if args.jfr:
                args.jfr.mkdir(parents=True, exist_ok=True)
                recording = (args.jfr / f"{mode}-{run}.jfr").resolve()
                options.append(f"-XX:StartFlightRecording=filename={recording},settings=profile")
            if options:
                extra = dict(extra, **{"spark.driver.extraJavaOptions": " ".join(options)})
            results[mode].append(run_once(mode, args.tasks, args.driver_memory, extra))
            shown = {k: v for k, v in results[mode][-1].items() if k != "threads"}
            print(mode, shown, flush=True)  # noqa: T201
    base = statistics.median(float(r["elapsed"] or 0) for r in results["off"])
    print(f"{args.tasks} tasks, driver memory {args.driver_memory}, {args.runs} runs each")  # noqa: T201
    print(f"{'setting':8} {'median s':>9} {'runs':>24} {'overhead':>9} {'JVM CPU s':>10} {'heap MB':>8} "  # noqa: T201
          f"{'stop() s':>9} {'stop() after trace s':>21} {'report':>7} {'young GCs':>10} {'G1 cycles':>10}")
    for mode, runs in results.items():
        times = [float(r["elapsed"] or 0) for r in runs]
        med = statistics.median(times)
        heap = statistics.median(float(r["heap"] or 0) for r in runs) / 1e6
        cpu = statistics.median(float(r["jvm_cpu"] or 0) for r in runs)
        stop = statistics.median(float(r["stop_s"] or 0) for r in runs)
        report = "-" if mode.startswith("off") else f"{sum(bool(r.get('report')) for r in runs)}/{len(runs)}"
        after = [float(r["after_trace_s"]) for r in runs if r.get("after_trace_s") is not None]
        after_text = f"{max(after):.2f} (max)" if after else "-"
        print(f"{mode:8} {med:9.2f} {' '.join(f'{t:.2f}' for t in times):>24} "  # noqa: T201
              f"{100 * (med / base - 1):8.1f}% {cpu:10.1f} {heap:8.0f} {stop:9.2f} {after_text:>21} {report:>7} "
              f"{statistics.median(int(r.get('young_gcs') or 0) for r in runs):10.0f} "
              f"{statistics.median(int(r.get('concurrent_gcs') or 0) for r in runs):10.0f}")
    # Where the JVM's CPU went, per thread kind (median over runs): what a setting adds, and on which threads.
    names = sorted({n for runs in results.values() for r in runs for n in r["threads"]},  # type: ignore[union-attr]
                   key=lambda n: -statistics.median(float(r["threads"].get(n, 0.0))  # type: ignore[union-attr]
                                                    for r in results["off"] + results[list(results)[-1]]))
    print(f"JVM CPU s per thread kind (median): {'thread':32}" + "".join(f"{m:>10}" for m in results))  # noqa: T201
    for name in names:
        row = [statistics.median(float(r["threads"].get(name, 0.0)) for r in runs)  # type: ignore[union-attr]
               for runs in results.values()]
        if max(row) >= 0.05:
            print(f"{'':36}{name:32}" + "".join(f"{v:10.2f}" for v in row))  # noqa: T201


if __name__ == "__main__":
    main()
