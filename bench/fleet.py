"""Fleets of real Spark event logs through ``crystalperf fleet``: throughput, peak memory, local vs a 2-worker
cluster; and one application of 1,000,000 tasks imported and analysed. Prints figures as JSON; asserts nothing.

    python bench/fleet.py record DIR [--runs 5]       # real local[2] Spark runs of six shapes -> DIR/logs
    python bench/fleet.py scale DIR --apps 100 1000 5000   # DIR/fleet-<n>: the logs copied under new app ids
    python bench/fleet.py traces DIR --apps 1000      # DIR/traces-<n>: the demo's trace under new app ids
    python bench/fleet.py run DIR/fleet-1000 [--jobs 2] [--engine local|cluster] [--repeat 1]
    python bench/fleet.py big DIR [--tasks 1000000]   # DIR/big: a real many-task log grown to --tasks tasks

``record`` runs ``--runs`` applications of each shape, one Python process and JVM per group (sessions one
after the other), Spark's default event log (rolling, zstd), no crystalperf listener: ``cpu`` (a Python
function per row), ``sql`` (a shuffle join and aggregation), ``disk`` (a scan of text files evicted from the
page cache, read through a cgroup v1 blkio limit of 20 MB/s; needs root), ``skewed`` (one key holds most rows),
``many-tasks`` (thousands of tiny tasks), ``failed`` (a job whose tasks raise). ``scale`` copies the recorded
logs round-robin under new application ids (the id in the file names and in every event), as other runs of the
same jobs; ``traces`` does the same with the trace ``crystalperf demo`` writes (``tests/data/spark-demo-trace.json.gz``:
TPC-H Q6 and Q9 on local Spark with the listener, 53 tasks and their stack samples), one directory per copy as
``crystalperf import --all`` lays traces out. ``run`` runs ``crystalperf fleet`` on a fleet from an empty cache, in a fresh process tree, and
samples the memory of the whole tree every 0.2 s (the sum of every process's PSS: shared pages counted once);
``--engine cluster`` submits it with ``--engine spark`` to a standalone cluster of 2 workers of 1 core each, each
in a network namespace of its own (bench.cluster), and measures the driver's tree. ``big`` takes the
``many-tasks`` log with the most tasks and repeats its task events until the log holds ``--tasks`` tasks (new
task ids and indices; each copy keeps its original's launch and finish times, so the application's timeline is
the recorded one, and its measured figures and accumulator values varied by up to +-50 %), written zstd as Spark
writes it, then reads and analyses it in a fresh process (wall and CPU time, peak RSS).

``host_speed_s`` and ``load_average`` say how busy the shared machine was (``bench/analysis_scale.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.analysis_scale import host_speed  # noqa: E402

SHAPES = ("cpu", "sql", "skewed", "many-tasks", "failed", "disk")
DISK_LIMIT_BPS = 20 * 1000 * 1000

APPS = textwrap.dedent('''
    import os, sys, time
    from pyspark.sql import SparkSession
    logs, runs, shapes, data = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]

    def session(name, **conf):
        builder = (SparkSession.builder.master("local[2]").appName(name)
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", "8")
                   .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", logs))
        for key, value in conf.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()

    def burn(x):
        total = 0
        for i in range(2000):
            total = (total + i * x) % 1000003
        return total

    for run in range(runs):
        size = 1 + run  # each run of a shape a little larger than the last
        for shape in shapes:
            spark = session(f"{shape}-{run}")
            sc = spark.sparkContext
            if shape == "cpu":
                sc.parallelize(range(1500 * size), 4).map(burn).sum()
            elif shape == "sql":
                a = spark.range(200000 * size).selectExpr("id % 5000 AS k", "id AS v")
                b = spark.range(5000).selectExpr("id AS k", "id * 2 AS w")
                a.join(b, "k").groupBy("w").sum("v").collect()
            elif shape == "skewed":
                pairs = sc.parallelize(range(3000 * size), 4).map(lambda x: (0 if x % 10 else x % 8, x))
                pairs.groupByKey(8).mapValues(lambda values: sum(burn(v) for v in values)).count()
            elif shape == "many-tasks":
                sc.parallelize(range(2000 * size), 1000 * size).map(lambda x: x + 1).count()
            elif shape == "failed":
                try:
                    sc.parallelize(range(100), 4).map(lambda x: 1 // (x - 50 * size % 97)).count()
                except Exception:
                    pass
            elif shape == "disk":
                lines = spark.read.text(os.path.join(data, f"part-{run}"))
                lines.filter(lines.value.contains("ffff")).count()
            spark.stop()
            print("ran", shape, run, flush=True)
''')


# -- record -----------------------------------------------------------------------------------------------

def _write_text(directory: Path, megabytes: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for part in range(max(1, megabytes // 8)):
        with (directory / f"f{part}.txt").open("wb") as out:
            block = os.urandom(4 << 20).hex().encode()
            out.write(b"\n".join(block[i:i + 128] for i in range(0, len(block), 128)) + b"\n")


def record(args: argparse.Namespace) -> None:
    root = Path(args.dir)
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    started = time.perf_counter()
    shapes = [s for s in SHAPES if s != "disk"]
    subprocess.run([sys.executable, "-c", APPS, str(logs), str(args.runs), ",".join(shapes), str(root / "data")],
                   env=env, check=True)
    from bench.fidelity.machine import block_device, cgroups, evict, throttle_unavailable

    reason = throttle_unavailable()
    if reason:
        print(f"disk shape left out: {reason}", file=sys.stderr)
    else:
        data = root / "data"
        for run in range(args.runs):
            _write_text(data / f"part-{run}", 24 + 8 * run)
        evict([data])
        with cgroups(block_device(data), DISK_LIMIT_BPS) as groups:
            subprocess.run(groups.command([sys.executable, "-c", APPS, str(logs), str(args.runs), "disk",
                                           str(data)]), env=env, check=True)
        shutil.rmtree(data)
    found = sorted(p.name for p in logs.iterdir() if not p.name.startswith("."))
    print(json.dumps({"recorded": len(found), "seconds": round(time.perf_counter() - started, 1),
                      "bytes": sum(f.stat().st_size for f in logs.rglob("*") if f.is_file())}))


# -- scale ------------------------------------------------------------------------------------------------

def _app_id(log: Path) -> str:
    return log.name.removeprefix("eventlog_v2_").split(".")[0]


def _copy_as(log: Path, old: str, new: str, target: Path) -> None:
    """A copy of a rolling log under another application id: in its names and in every event."""
    import zstandard

    out = target / log.name.replace(old, new)
    out.mkdir()
    for file in log.iterdir():
        name = file.name.replace(old, new)
        if file.name.endswith(".zstd"):
            text = zstandard.ZstdDecompressor().stream_reader(file.open("rb")).read()
            (out / name).write_bytes(zstandard.ZstdCompressor(level=1).compress(text.replace(old.encode(), new.encode())))
        else:
            shutil.copy(file, out / name)


def scale(args: argparse.Namespace) -> None:
    root = Path(args.dir)
    logs = sorted(p for p in (root / "logs").iterdir() if p.name.startswith("eventlog_v2_"))
    for count in args.apps:
        target = root / f"fleet-{count}"
        if target.exists():
            shutil.rmtree(target)
        target.mkdir()
        started = time.perf_counter()
        for i in range(count):
            log = logs[i % len(logs)]
            old = _app_id(log)
            _copy_as(log, old, f"local-{2_000_000_000_000 + i}", target)
        print(json.dumps({"fleet": str(target), "apps": count, "from_logs": len(logs),
                          "seconds": round(time.perf_counter() - started, 1),
                          "bytes": sum(f.stat().st_size for f in target.rglob("*") if f.is_file())}))


def traces(args: argparse.Namespace) -> None:
    import gzip

    root = Path(args.dir)
    text = gzip.decompress(Path(args.trace).read_bytes())
    old = json.loads(text)["application"]["id"].encode()
    for count in args.apps:
        target = root / f"traces-{count}"
        if target.exists():
            shutil.rmtree(target)
        started = time.perf_counter()
        for i in range(count):
            (target / f"app-{i:05d}").mkdir(parents=True)
            new = f"local-{2_000_000_000_000 + i}".encode()
            (target / f"app-{i:05d}" / "crystalperf-trace.json.gz").write_bytes(
                gzip.compress(text.replace(old, new), compresslevel=6, mtime=0))
        print(json.dumps({"fleet": str(target), "apps": count, "seconds": round(time.perf_counter() - started, 1)}))


# -- run --------------------------------------------------------------------------------------------------

def _tree(pid: int) -> list[int]:
    """The process and all its descendants (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        p = stack.pop()
        found.append(p)
        stack += children.get(p, [])
    return found


def _memory(pids: list[int]) -> tuple[int, int, int]:
    """(sum of PSS, sum of RSS, largest RSS) of the processes, bytes."""
    pss = rss = largest = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    value = int(line.split()[1]) * 1024
                    rss += value
                    largest = max(largest, value)
    return pss, rss, largest


class Sampler:
    """The process tree's memory every ``every_s`` seconds while it runs; the peaks."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        self.pid, self.every_s = pid, every_s
        self.peak = (0, 0, 0)
        self.processes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            pids = _tree(self.pid)
            self.processes = max(self.processes, len(pids))
            now = _memory(pids)
            self.peak = tuple(max(a, b) for a, b in zip(self.peak, now, strict=True))  # type: ignore[assignment]
            self.stop.wait(self.every_s)

    def finish(self) -> dict[str, int]:
        self.stop.set()
        self.thread.join()
        pss, rss, largest = self.peak
        return {"peak_pss_mb": round(pss / 2**20), "peak_rss_sum_mb": round(rss / 2**20),
                "peak_rss_largest_mb": round(largest / 2**20), "processes_at_most": self.processes}


def _cpu_seconds(before: os.times_result) -> float:
    after = os.times()
    return round(after.children_user + after.children_system - before.children_user - before.children_system, 1)


def _one_run(fleet: Path, out: Path, extra: list[str], env: dict[str, str]) -> dict[str, object]:
    if out.exists():
        shutil.rmtree(out)
    before = os.times()
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "crystalperf", "fleet", str(fleet), "--out", str(out), "-q",
                             *extra], env=env, stderr=subprocess.PIPE, text=True)
    sampler = Sampler(proc.pid)
    _, err = proc.communicate()
    wall = time.perf_counter() - started
    figures: dict[str, object] = {"wall_s": round(wall, 1), "cpu_s": _cpu_seconds(before), **sampler.finish()}
    if proc.returncode != 0:
        sys.exit(f"crystalperf fleet failed ({proc.returncode}): {err[-3000:]}")
    import pyarrow.parquet as pq

    table = pq.read_table(out / "crystalperf-fleet.parquet", columns=["error", "bottleneck"])
    apps = table.num_rows
    figures.update(apps=apps, errors=apps - table.column("error").null_count,
                   apps_per_min=round(apps / wall * 60, 1))
    results = [json.loads(json.loads(p.read_text())["result"]) for p in (out / "cache").rglob("*.json")]
    if results:
        seconds = sorted(r["seconds"] for r in results)
        figures.update(analysis_s_median=round(seconds[len(seconds) // 2], 3), analysis_s_max=round(seconds[-1], 2),
                       analysis_peak_rss_mb_max=round(max(r["peak_rss"] for r in results) / 2**20))
    return figures


def run(args: argparse.Namespace) -> None:
    fleet = Path(args.fleet)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    figures: dict[str, object] = {"fleet": str(fleet), "engine": args.engine}
    extra = ["--jobs", str(args.jobs)] if args.jobs else []
    with tempfile.TemporaryDirectory(prefix="crystalperf-bench-fleet-") as tmp:
        out = Path(tmp) / "out"
        runs = []
        with contextlib.ExitStack() as stack:
            if args.engine == "cluster":
                from bench.cluster import Network, SparkCluster

                net = stack.enter_context(Network(["w0", "w1"]))
                cluster = stack.enter_context(SparkCluster(net, Path(tmp) / "cluster", cores=1, memory="1g"))
                conf = {**cluster.driver_conf(), "spark.ui.enabled": "false", "spark.executor.memory": "512m"}
                master = conf.pop("spark.master")
                extra = ["--engine", "spark", "--master", master,
                         *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}"))]
                env = cluster.driver_env()
            for _ in range(max(1, args.repeat)):
                runs.append(_one_run(fleet, out, extra, env))
        figures.update(min(runs, key=lambda r: float(r["wall_s"])))  # type: ignore[arg-type]
        if len(runs) > 1:
            figures["wall_s_runs"] = [r["wall_s"] for r in runs]
    figures.update(host_speed_s=host_speed(), load_average=[round(x, 2) for x in os.getloadavg()],
                   cpus=os.cpu_count())
    print(json.dumps(figures, indent=2))


# -- big --------------------------------------------------------------------------------------------------

_TASK_ID = re.compile(rb'"Task ID":(\d+)')
_INDEX = re.compile(rb'"Index":(\d+)')
# The task's measured figures, varied in each copy (as a stage's tasks differ; identical copies would also
# compress a thousandfold, which no real log does).
_FIGURES = re.compile(rb'("(?:Update|Value|Executor Run Time|Executor CPU Time|Executor Deserialize Time|'
                      rb'Executor Deserialize CPU Time|Result Size|JVM GC Time|Peak Execution Memory|'
                      rb'Result Serialization Time)":)(\d+)')


def _varied(line: bytes, rng: random.Random) -> bytes:
    return _FIGURES.sub(lambda m: m.group(1) + str(int(int(m.group(2)) * rng.uniform(0.5, 1.5))).encode(), line)


def grow(log: Path, tasks: int, out: Path) -> dict[str, int]:
    """``log`` (a rolling zstd log) with its stages' task events repeated until it holds ``tasks`` tasks."""
    import zstandard

    (events,) = [f for f in log.iterdir() if f.name.startswith("events_")]
    lines = zstandard.ZstdDecompressor().stream_reader(events.open("rb")).read().splitlines()
    ends = [i for i, line in enumerate(lines) if b'"Event":"SparkListenerTaskEnd"' in line]
    starts = {i for i, line in enumerate(lines) if b'"Event":"SparkListenerTaskStart"' in line}
    copies = max(1, -(-tasks // len(ends)))
    app = _app_id(log)
    target = out / f"eventlog_v2_{app}"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    (target / f"appstatus_{app}").write_bytes(b"")
    next_id = 10**9
    written = 0
    rng = random.Random(7)
    by_task = {m.group(1): i for i in starts if (m := _TASK_ID.search(lines[i]))}
    with (target / events.name).open("wb") as raw, zstandard.ZstdCompressor(level=1).stream_writer(raw) as sink:
        for i, line in enumerate(lines):
            if i in starts:
                continue
            if i not in ends:
                sink.write(line + b"\n")
                continue
            found = _TASK_ID.search(line)
            start = lines[by_task[found.group(1)]] if found and found.group(1) in by_task else None
            for k in range(copies):
                if written >= tasks:
                    break
                new_id = str(next_id).encode()
                index = str(k).encode()
                next_id += 1
                written += 1
                if start is not None:
                    sink.write(_INDEX.sub(b'"Index":' + index, _TASK_ID.sub(b'"Task ID":' + new_id, start, 1), 1) + b"\n")
                end = _INDEX.sub(b'"Index":' + index, _TASK_ID.sub(b'"Task ID":' + new_id, line, 1), 1)
                sink.write(_varied(end, rng) + b"\n")
    return {"tasks": written, "from_tasks": len(ends), "log_bytes": (target / events.name).stat().st_size}


BIG_CHILD = textwrap.dedent('''
    import json, sys, time
    from bench.analysis_scale import peak_rss_bytes
    t0, c0 = time.perf_counter(), time.process_time()
    from crystalperf.core.analysis import analyze
    from crystalperf.core.attribution.classify import load_classifier
    from crystalperf.integrations.spark import read_event_log
    trace = read_event_log(sys.argv[1])
    t1, c1 = time.perf_counter(), time.process_time()
    result = analyze(trace, classifier=load_classifier())
    t2, c2 = time.perf_counter(), time.process_time()
    ops = list(trace.iter_operations())
    print(json.dumps({"import_s": round(t1 - t0, 1), "import_cpu_s": round(c1 - c0, 1),
                      "analysis_s": round(t2 - t1, 1), "analysis_cpu_s": round(c2 - c1, 1),
                      "total_s": round(t2 - t0, 1), "total_cpu_s": round(c2 - c0, 1),
                      "peak_rss_mb": round(peak_rss_bytes() / 2**20),
                      "tasks": sum(max(o.task_count or 0, len(o.tasks)) for o in ops if not o.children),
                      "tasks_kept": sum(len(o.tasks) for o in ops), "bottleneck": result.report["bottleneck"]["resource"]}))
''')


def big(args: argparse.Namespace) -> None:
    root = Path(args.dir)
    logs = [p for p in (root / "logs").iterdir() if p.name.startswith("eventlog_v2_")]

    def task_ends(log: Path) -> int:
        import zstandard

        (events,) = [f for f in log.iterdir() if f.name.startswith("events_")]
        return zstandard.ZstdDecompressor().stream_reader(events.open("rb")).read().count(b"SparkListenerTaskEnd")

    source = max(logs, key=task_ends)
    started = time.perf_counter()
    made = grow(source, args.tasks, root / "big")
    made["grow_s"] = round(time.perf_counter() - started, 1)
    (log,) = (root / "big").iterdir()
    runs = []
    for _ in range(max(1, args.repeat)):
        child = subprocess.run([sys.executable, "-c", BIG_CHILD, str(log)], capture_output=True, text=True,
                               cwd=Path(__file__).resolve().parents[1], check=False,
                               env=dict(os.environ, CRYSTALPERF_PARALLEL="0"))
        if child.returncode != 0:
            sys.exit(child.stderr[-3000:])
        runs.append(json.loads(child.stdout.strip().splitlines()[-1]))
    figures = {"log": str(log), **made, **min(runs, key=lambda r: r["total_s"])}
    if len(runs) > 1:
        figures["total_s_runs"] = [r["total_s"] for r in runs]
    figures.update(host_speed_s=host_speed(), load_average=[round(x, 2) for x in os.getloadavg()])
    print(json.dumps(figures, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("record")
    p.add_argument("dir")
    p.add_argument("--runs", type=int, default=5, help="applications of each shape")
    p.set_defaults(func=record)
    p = sub.add_parser("scale")
    p.add_argument("dir")
    p.add_argument("--apps", type=int, nargs="+", default=[100, 1000, 5000])
    p.set_defaults(func=scale)
    p = sub.add_parser("traces")
    p.add_argument("dir")
    p.add_argument("--apps", type=int, nargs="+", default=[1000])
    p.add_argument("--trace", default=str(Path(__file__).resolve().parents[1] / "tests" / "data" /
                                          "spark-demo-trace.json.gz"))
    p.set_defaults(func=traces)
    p = sub.add_parser("run")
    p.add_argument("fleet")
    p.add_argument("--jobs", type=int)
    p.add_argument("--engine", choices=("local", "cluster"), default="local")
    p.add_argument("--repeat", type=int, default=1)
    p.set_defaults(func=run)
    p = sub.add_parser("big")
    p.add_argument("dir")
    p.add_argument("--tasks", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=1)
    p.set_defaults(func=big)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
