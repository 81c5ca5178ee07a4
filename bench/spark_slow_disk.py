"""A Spark scan of data on a slow disk: what crystalperf's report says, next to Spark's own measurements.

Writes a few hundred MB of text, evicts it from the page cache, and runs a local[2] Spark job that scans
it with crystalperf's listener on, inside a cgroup v1 blkio group that limits reads from the device holding
the data (``blkio.throttle.read_bps_device``). The same job runs once without the limit for comparison.
For each run it prints the job's wall time, the scan stage's measured task time (``executorRunTime``) and
CPU time (``executorCpuTime``), the report's bottleneck and the scan stage's vector, once as the job-end
analysis attributed it and once with the paper's attribution (``--attribution paper``: first located frame,
classifier only, no thread states, no measured bounds).

Needs root, cgroup v1 with the blkio controller at /sys/fs/cgroup/blkio, and pyspark:

    python bench/spark_slow_disk.py [--size-mb 300] [--limit-mbps 5] [--work DIR] [--drop-caches]

Only the data files' pages are evicted (``posix_fadvise(DONTNEED)``): dropping every cache
(``--drop-caches``) makes Spark's own jars load at the throttled rate too, and slows whatever else runs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

CGROUP = Path("/sys/fs/cgroup/blkio/crystalperf-slow-disk")

JOB = textwrap.dedent('''
    import sys, time
    from pyspark.sql import SparkSession
    from crystalperf.integrations.spark import configure
    data, out = sys.argv[1], sys.argv[2]
    builder = (SparkSession.builder.master("local[2]").appName("slow-disk-scan")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.files.maxPartitionBytes", str(32 * 1024 * 1024))
               # the report is read right after stop(): wait for the job-end analysis, which runs detached
               .config("spark.crystalperf.waitForAnalysisS", "900"))
    spark = configure(builder, output_dir=out).getOrCreate()
    start = time.perf_counter()
    lines = spark.read.text(data)
    print("MATCHES", lines.filter(lines.value.contains("ffff")).count())
    print("ELAPSED", time.perf_counter() - start)
    spark.stop()
''')


def write_data(directory: Path, size_mb: int) -> int:
    """Text files of random hex lines (incompressible for the disk, cheap for the CPU to scan)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = 0
    for part in range(max(1, size_mb // 32)):
        with (directory / f"part-{part:03d}.txt").open("wb") as f:
            for _ in range(32):
                block = os.urandom(512 * 1024).hex().encode()
                f.write(b"\n".join(block[i:i + 128] for i in range(0, len(block), 128)) + b"\n")
            f.flush()
            os.fsync(f.fileno())
            written += f.tell()
    return written


def evict(directory: Path, drop_all: bool) -> None:
    subprocess.run(["sync"], check=True)
    if drop_all:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def device_of(path: Path) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def whole_disk(device: str) -> str:
    """The disk a partition belongs to (blkio throttles whole devices), via sysfs."""
    link = Path(f"/sys/dev/block/{device}")
    if (link / "partition").exists():
        return (link.resolve().parent / "dev").read_text().strip()
    return device


def set_limit(device: str, bytes_per_s: int | None) -> None:
    CGROUP.mkdir(exist_ok=True)
    (CGROUP / "blkio.throttle.read_bps_device").write_text(f"{device} {bytes_per_s or 0}\n")


def run_job(data: Path, out: Path, limited: bool) -> float:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    command = [sys.executable, "-c", JOB, str(data), str(out)]
    if limited:  # the job, its JVM and its Python workers all start inside the throttled group
        command = ["sh", "-c", f'echo $$ > {CGROUP}/cgroup.procs && exec "$@"', "sh", *command]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"the job failed:\n{done.stderr[-3000:]}")
    return float(next(x for x in done.stdout.splitlines() if x.startswith("ELAPSED")).split()[1])


def measured(trace_path: Path) -> dict[str, dict[str, float]]:
    """Per stage that read input: Spark's own task metrics, summed over its tasks."""
    doc = json.loads(gzip.decompress(trace_path.read_bytes()))
    stages: dict[str, dict[str, float]] = {}
    for job in doc["operations"]:
        for stage in job.get("children", []):
            tasks = stage.get("tasks", [])
            total = {k: sum(t["metrics"].get(k, 0.0) for t in tasks)
                     for k in ("run_time_s", "cpu_time_s", "input_bytes", "executorRunTime", "executorCpuTime")}
            if total["input_bytes"] > 0:
                stages[stage["id"]] = total
    return stages


def analyse(trace_path: Path, attribution: str | None) -> dict[str, Any]:
    out = trace_path.parent / f"analysis-{attribution or 'job-end'}"
    command = [sys.executable, "-m", "crystalperf.core.cli", "analyze", str(trace_path), "--out", str(out), "-q"]
    if attribution:
        command += ["--attribution", attribution]
    subprocess.run(command, check=True, capture_output=True, text=True)
    report: dict[str, Any] = json.loads((out / "crystalperf-report.json").read_text())
    return report


def describe(report: dict[str, Any], stage_ids: list[str]) -> list[str]:
    bottleneck = report["bottleneck"]
    lines = [f"    bottleneck: {bottleneck['resource']} ({bottleneck.get('sentence', '')})"]
    for op in report["operations"]:
        if op["id"] in stage_ids:
            vector = " ".join(f"{k} {v:.2f}" for k, v in op["vector"].items())
            top = ", ".join(f["name"] for f in op.get("top_functions", [])[:3])
            lines.append(f"    {op['id']} vector: {vector}; measured: {op.get('measured', {})}")
            lines.append(f"    {op['id']} top functions: {top}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=300)
    parser.add_argument("--limit-mbps", type=float, default=5.0)
    parser.add_argument("--work", type=Path, help="where the data and reports go (default: a temporary dir)")
    parser.add_argument("--drop-caches", action="store_true", help="drop every cache, not only the data's")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if not (Path("/sys/fs/cgroup/blkio").is_dir() and os.geteuid() == 0):
        sys.exit("needs root and cgroup v1's blkio controller at /sys/fs/cgroup/blkio")
    work = args.work or Path(tempfile.mkdtemp(prefix="crystalperf-slow-disk-", dir="/var/tmp"))
    data = work / "data"
    size = write_data(data, args.size_mb)
    device = whole_disk(device_of(data))
    limit = int(args.limit_mbps * 1024 * 1024)
    print(f"data: {size / 2**20:.0f} MB in {data} on device {device}; read limit {args.limit_mbps} MB/s")  # noqa: T201
    try:
        for limited in (False, True):
            set_limit(device, limit if limited else None)
            out = work / ("limited" if limited else "unlimited")
            evict(data, args.drop_caches)
            elapsed = run_job(data, out, limited)
            trace = out / "crystalperf-trace.json.gz"
            stages = measured(trace)
            label = f"{args.limit_mbps} MB/s read limit" if limited else "no limit"
            print(f"\n== {label}: job {elapsed:.1f} s")  # noqa: T201
            for sid, m in stages.items():
                print(f"    {sid} measured by Spark: run {m['run_time_s']:.1f} s, CPU {m['cpu_time_s']:.1f} s "  # noqa: T201
                      f"({m['cpu_time_s'] / max(m['run_time_s'], 1e-9):.0%} of run), "
                      f"input {m['input_bytes'] / 2**20:.0f} MB")
            for attribution in (None, "paper"):
                print(f"  report ({attribution or 'job-end analysis'}):")  # noqa: T201
                for line in describe(analyse(trace, attribution), list(stages)):
                    print(line)  # noqa: T201
            time.sleep(1)
    finally:
        set_limit(device, None)
        CGROUP.rmdir()
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
