"""Do the hand labels of the framework set agree with what the frameworks' own methods measure? (docs/models.md,
"What stands between the classifier and the targets").

The shipped classifier learns measured labels (a method's dominant share of the time below it, under JDK Flight
Recorder) and is scored, among others, on the hand-labelled framework set (``evaldata/frameworks.jsonl``), whose
labels say what a method's time is *for*. Where those two disagree on the frameworks' own methods, a classifier
that predicted every measured label perfectly would still be wrong on the hand label, so their agreement bounds
what a measured-label classifier can score on the set.

This runs real local jobs under JFR with the measurement's settings (``crystalperf.models.measure.jvm``), with the
page cache dropped between phases (root):

- ``--framework spark``: the demo's TPC-H data generation (Parquet writes, shuffles), then Q6 and Q9 over it, a
  ``DISK_ONLY`` cache and Parquet/ORC/JSON writes;
- ``--framework flink``: a batch phase (a generated GROUP BY into a blackhole, a GROUP BY of CSV files into CSV
  files), then a streaming phase checkpointing every 300 ms (a keyed join and a tumbling window over the CSV
  files into CSV files).

With ``--read-limit-mbps`` the second phase reads the first phase's files cold through a cgroup v1 read limit on
their disk (``bench.fidelity.machine``): the same code on a slower disk.

Every framework method on the recorded stacks gets its measured own work (``measure.jvm.own_work_frames``, libraries
told apart by their package names) and the inclusive time below it; the variants of one method (lambdas, ``Foo$``
forwarders) are merged as the set merges them (``framework_collect.function_key``) and labelled with the corpus's
rule (``measure.jvm.label_of``). It prints, for the set's functions of that framework the jobs measured with enough
evidence: the agreement of the hand labels with the own-work and with the inclusive labels, the confusion and the
disagreements of the own-work ones, and the shipped classifier scored against each label.

Framework code never enters training: nothing here is written to a corpus.

Usage: python -m bench.framework_measured [--framework spark|flink] [--scale 1] [--read-limit-mbps MB/s]
       [--work DIR] [--keep] [--json F]
(pyspark or apache-flink installed in this Python; root to drop the page cache; about 5 and 2 min on 2 cores)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from crystalperf.models.framework_collect import function_key
from crystalperf.models.framework_eval import CLASSES, load_set, seam_classes
from crystalperf.models.measure.jvm import (
    Attribution,
    JfrEvent,
    JfrFrame,
    MethodTime,
    build_toolchain,
    drop_page_cache,
    jfc_settings,
    label_of,
    package_library,
    recording_events,
)
from crystalperf.models.sparse import SparseClassifier


def jfr_options(out: Path) -> str:
    """A recording named ``measure`` with the measured corpus's settings, dumped by :func:`dump_recording`."""
    return (f"-XX:FlightRecorderOptions:stackdepth=256 "
            f"-XX:StartFlightRecording=name=measure,settings={out / 'measure.jfc'}")


def dump_recording(pid: int, out: Path, phase: str) -> None:
    """Write the JVM's recording now: the gateway JVMs are not always left to exit on their own."""
    subprocess.run(["jcmd", str(pid), "JFR.dump", "name=measure", f"filename={out / (phase + '.jfr')}"],
                   check=True, capture_output=True, timeout=600)


def run_spark(phase: str, data: Path, out: Path, scale: float) -> None:
    """One phase of the Spark job, in this process (the driver JVM records itself: see ``measure``)."""
    from pyspark import StorageLevel
    from pyspark.sql import SparkSession

    from crystalperf.integrations.spark import demo

    spark = (SparkSession.builder.appName(f"crystalperf-framework-measured-{phase}").master("local[2]")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g").config("spark.sql.shuffle.partitions", "8")
             .config("spark.sql.adaptive.enabled", "false").config("spark.local.dir", str(out / "spark-local"))
             .config("spark.driver.extraJavaOptions", jfr_options(out)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if phase == "generate":
            demo.generate(spark, data, scale)
            return
        for name in ("lineitem", "orders", "part", "supplier", "partsupp", "nation"):
            spark.read.parquet(str(data / name)).createOrReplaceTempView(name)
        spark.sql(demo.Q6).collect()
        spark.sql(demo.Q9).collect()
        cached = spark.table("lineitem").repartition(16, "l_orderkey").persist(StorageLevel.DISK_ONLY)
        cached.count()
        cached.groupBy("l_suppkey").count().collect()
        joined = cached.join(spark.table("orders"), cached.l_orderkey == spark.table("orders").o_orderkey)
        for fmt in ("parquet", "orc", "json"):
            joined.write.mode("overwrite").format(fmt).save(str(out / f"written-{fmt}"))
        spark.read.json(str(out / "written-json")).groupBy("o_orderdate").count().collect()
    finally:
        dump_recording(spark.sparkContext._jvm.ProcessHandle.current().pid(), out, phase)
        spark.stop()


def write_csv_inputs(data: Path, scale: float) -> None:
    """Event and dimension files for the Flink jobs: ``events/`` (key, value, event time), ``users/``."""
    import random

    rng = random.Random(0)
    (data / "events").mkdir(parents=True, exist_ok=True)
    (data / "users").mkdir(parents=True, exist_ok=True)
    rows = int(400_000 * scale)
    for part in range(4):
        with open(data / "events" / f"part-{part}.csv", "w") as f:
            for i in range(part, rows, 4):
                second = i // 2000
                f.write(f"{rng.randrange(5000)},{rng.random() * 100:.4f},2026-01-01 00:{second // 60 % 60:02d}:"
                        f"{second % 60:02d}.{i % 1000:03d}\n")
    with open(data / "users" / "users.csv", "w") as f:
        for k in range(5000):
            f.write(f"{k},user-{k}-{rng.randrange(10**6)}\n")


def run_flink(phase: str, data: Path, out: Path, scale: float) -> None:
    """One phase of the Flink job: ``batch`` (a generated GROUP BY and a CSV GROUP BY into CSV files) or
    ``streaming`` (a keyed join and a tumbling window over the CSV files into CSV files, checkpointing)."""
    os.environ["JVM_ARGS"] = jfr_options(out)  # the local gateway JVM takes its options from here
    from pyflink.common import Configuration
    from pyflink.java_gateway import get_gateway
    from pyflink.table import EnvironmentSettings, TableEnvironment

    config = Configuration()
    config.set_string("parallelism.default", "2")
    settings = EnvironmentSettings.new_instance().with_configuration(config)
    if phase == "batch":
        write_csv_inputs(data, scale)
        env = TableEnvironment.create(settings.in_batch_mode().build())
    else:
        config.set_string("execution.checkpointing.interval", "300 ms")
        config.set_string("state.backend.type", "hashmap")
        config.set_string("execution.checkpointing.dir", (out / "checkpoints").as_uri())
        env = TableEnvironment.create(settings.in_streaming_mode().build())
    source = "'connector'='filesystem', 'format'='csv', 'path'="
    env.execute_sql(f"CREATE TABLE events (k INT, v DOUBLE, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' "
                    f"SECOND) WITH ({source}'{data / 'events'}')")
    env.execute_sql(f"CREATE TABLE users (k INT, name STRING) WITH ({source}'{data / 'users'}')")
    statements = env.create_statement_set()
    if phase == "batch":
        env.execute_sql(f"CREATE TABLE gen (k INT, v DOUBLE) WITH ('connector'='datagen', "
                        f"'number-of-rows'='{int(3_000_000 * scale)}', 'rows-per-second'='1000000000', 'fields.k.min'='0', "
                        "'fields.k.max'='9999')")
        env.execute_sql("CREATE TABLE hole (k INT, s DOUBLE, n BIGINT) WITH ('connector'='blackhole')")
        env.execute_sql(f"CREATE TABLE per_key (k INT, s DOUBLE, n BIGINT) WITH ({source}'{out / 'per-key'}')")
        statements.add_insert_sql("INSERT INTO hole SELECT k, SUM(v), COUNT(*) FROM gen GROUP BY k")
        statements.add_insert_sql("INSERT INTO per_key SELECT k, SUM(v), COUNT(*) FROM events GROUP BY k")
    else:
        env.execute_sql(f"CREATE TABLE enriched (k INT, name STRING, v DOUBLE) WITH ({source}'{out / 'enriched'}')")
        env.execute_sql(f"CREATE TABLE windows (k INT, w TIMESTAMP(3), s DOUBLE, n BIGINT) WITH "
                        f"({source}'{out / 'windows'}')")
        statements.add_insert_sql("INSERT INTO enriched SELECT e.k, u.name, e.v FROM events e JOIN users u "
                                  "ON e.k = u.k")
        statements.add_insert_sql("INSERT INTO windows SELECT k, window_start, SUM(v), COUNT(*) FROM TABLE(TUMBLE("
                                  "TABLE events, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY k, window_start, "
                                  "window_end")
    statements.execute().wait()
    dump_recording(get_gateway().jvm.ProcessHandle.current().pid(), out, phase)


REPOSITORY = Path(__file__).resolve().parents[1]
PHASES = {"spark": ("generate", "queries"), "flink": ("batch", "streaming")}
PREFIXES = {"spark": ("org.apache.spark.", "org.sparkproject."), "flink": ("org.apache.flink.",)}


def measure(framework: str, work: Path, scale: float, read_limit_mbps: float | None = None) -> dict[str, MethodTime]:
    """The framework's phases under JFR; returns the measured time of each of the framework's methods, by set id."""
    classes = build_toolchain(work, drivers=()).classes  # the JFR converter only, no drivers
    (work / "measure.jfc").write_text(jfc_settings())
    attribution = Attribution(library_of=package_library)
    for number, phase in enumerate(PHASES[framework]):
        command = [sys.executable, "-m", "bench.framework_measured", "--framework", framework, "--job", phase,
                   "--work", str(work), "--scale", str(scale)]
        started = time.monotonic()
        with contextlib.ExitStack() as stack:
            if number and read_limit_mbps:
                from bench.fidelity.machine import block_device, cgroups, evict

                # Only the data leaves the page cache: the framework's jars stay warm, as on a machine that
                # has run the job before, and are not read through the limit.
                evict([work / "data"])
                groups = stack.enter_context(cgroups(block_device(work / "data"), int(read_limit_mbps * 1e6)))
                command = groups.command(command)
            elif number and not drop_page_cache():
                print("note: the page cache was not dropped (not root): later phases read cached files")
            subprocess.run(command, check=True, timeout=3600, cwd=REPOSITORY)
        events = merged_variants(recording_events(work / f"{phase}.jfr", classes), PREFIXES[framework])
        used = attribution.add_recording(events, phase)
        print(f"{phase}: {time.monotonic() - started:.0f} s, {used} events attributed")
    return {f"{framework}:{name}": entry for name, entry in attribution.methods.items()
            if name.startswith(PREFIXES[framework])}


def merged_variants(events: Iterable[JfrEvent], prefixes: tuple[str, ...]) -> Iterator[JfrEvent]:
    """The events with each framework frame renamed to its set key (``function_key``), before attribution: a
    lambda and the method it is written in, both on one stack, then count the event once, as one method."""
    renamed: dict[JfrFrame, JfrFrame] = {}

    def rename(frame: JfrFrame) -> JfrFrame:
        if frame not in renamed:
            owner, _, method = function_key(frame.qualified_name).rpartition(".")
            renamed[frame] = dataclasses.replace(frame, class_name=owner, method=method)
        return renamed[frame]

    for event in events:
        frames = tuple(rename(f) if f.class_name.startswith(prefixes) else f for f in event.frames)
        yield dataclasses.replace(event, frames=frames)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--framework", choices=tuple(PHASES), default="spark")
    parser.add_argument("--scale", type=float, default=1.0, help="the jobs' data scale")
    parser.add_argument("--read-limit-mbps", type=float,
                        help="read the data through a cgroup v1 blkio limit of this many MB/s after the first phase")
    parser.add_argument("--work", type=Path, help="working directory (default: a temporary one, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    parser.add_argument("--json", type=Path, help="also write the per-function comparison here")
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        run = run_spark if args.framework == "spark" else run_flink
        run(args.job, args.work / "data", args.work, args.scale)
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="crystalperf-framework-measured-"))
    try:
        merged = measure(args.framework, work, args.scale, args.read_limit_mbps)
    finally:
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    functions = [f for f in load_set() if f.framework == args.framework]
    predicted4 = SparseClassifier().predict_proba4([f.source() for f in functions])
    seam = seam_classes(functions, predicted4)
    rows = []
    for function, predicted, as_seen in zip(functions, predicted4.argmax(1), seam, strict=True):
        entry = merged.get(function.id)
        label, shares, seconds = label_of(entry.own, entry.own_events) if entry else (None, {}, 0.0)
        inclusive = label_of(entry.seconds, entry.events)[0] if entry else None
        rows.append({"id": function.id, "hand": function.label, "measured": label, "inclusive": inclusive,
                     "seconds": round(seconds, 4), "shares": {k: round(v, 3) for k, v in shares.items()},
                     "classifier": CLASSES[predicted], "seam": CLASSES[as_seen]})
    both = [r for r in rows if r["inclusive"]]
    if both:
        print(f"inclusive labels: {len(both)} functions, hand label = inclusive label: "
              f"{np.mean([r['hand'] == r['inclusive'] for r in both]):.3f}")
    measured = [r for r in rows if r["measured"]]
    on_stack = sum(1 for f in functions if f.id in merged)
    print(f"{len(functions)} {args.framework} functions in the set; {on_stack} on this job's recorded stacks; "
          f"{len(measured)} with a measured label")
    if not measured:
        return
    agree = np.mean([r["hand"] == r["measured"] for r in measured])
    print(f"own-work labels: hand label = own-work label: {agree:.3f} "
          f"({sum(r['hand'] == r['measured'] for r in measured)} of {len(measured)})")
    print("| hand \\ measured | " + " | ".join(CLASSES) + " |")
    print("|---|" + "---:|" * len(CLASSES))
    for hand in CLASSES:
        print(f"| {hand} | " + " | ".join(str(sum(1 for r in measured if r["hand"] == hand and r["measured"] == m))
                                        for m in CLASSES) + " |")
    for key in ("classifier", "seam"):
        print(f"shipped classifier ({key}) on these {len(measured)}: against the hand label "
              f"{np.mean([r[key] == r['hand'] for r in measured]):.3f}, against the own-work label "
              f"{np.mean([r[key] == r['measured'] for r in measured]):.3f}")
    print("disagreements (hand → measured, measured shares):")
    for r in measured:
        if r["hand"] != r["measured"]:
            print(f"  {r['id']}: {r['hand']} → {r['measured']} {r['shares']} ({r['seconds']} s)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main()
