"""CPU seconds of a Flink what-if workload's JVM by thread name, at several CPU settings: which threads' work
shrinks or moves when the CPU is scarce (the Flink CPU-share misses in docs/accuracy.md).

    python -m bench.whatif.jvm_threads --job wordcount --cpu-share 1,0.5,0.75 --taskset

Thread names are grouped with their digits replaced by ``#`` (``GC Thread#0`` and ``GC Thread#1`` are ``GC
Thread##``... as ``comm`` truncates them to 15 characters). A poller reads ``/proc/<pid>/task/*/stat`` of every java
process twice a second and keeps each thread's last reading: a thread that ends between two polls loses at most
half a second.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import threading
from pathlib import Path
from typing import Any

from bench.whatif.flink import FlinkSqlWorkload

POLL_S = 0.5
TICKS = os.sysconf("SC_CLK_TCK")


def _java_threads() -> dict[tuple[str, str], tuple[str, float]]:
    found: dict[tuple[str, str], tuple[str, float]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"java" not in Path(f"/proc/{pid}/cmdline").read_bytes()[:256]:
                continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                comm = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
                found[(pid, tid)] = (comm, (int(fields[11]) + int(fields[12])) / TICKS)
        except OSError:
            continue  # the process or thread ended while it was read
    return found


def thread_cpu(workload: FlinkSqlWorkload, config: dict[str, Any], out: Path) -> tuple[float, collections.Counter[str]]:
    """Runs one untraced job; returns its runtime and CPU seconds by thread-name group."""
    seen: dict[tuple[str, str], tuple[str, float]] = {}
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            seen.update(_java_threads())
            stop.wait(POLL_S)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        run = workload.run(config, out)
    finally:
        stop.set()
        poller.join()
    groups: collections.Counter[str] = collections.Counter()
    for comm, seconds in seen.values():
        groups[re.sub(r"\d+", "#", comm)] += seconds
    return run.runtime_s, groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", default="wordcount", choices=("wordcount", "yahoo"))
    parser.add_argument("--cpu-share", default="1,0.5", help="comma-separated CPU shares (1: no quota)")
    parser.add_argument("--taskset", action="store_true", help="also a run pinned to one CPU")
    parser.add_argument("--out", type=Path, default=Path("/tmp/crystalperf-jvm-threads"))
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    rows = {"wordcount": 8_000_000, "yahoo": 25_000_000}[args.job]
    workload = FlinkSqlWorkload(args.job, rows=rows)
    configs = [(f"cpu share {s}", {**workload.baseline, **({"cpu_share": float(s)} if float(s) < 1 else {})})
               for s in args.cpu_share.split(",")]
    if args.taskset:
        configs.append(("1 CPU (taskset)", {**workload.baseline, "taskset": 1}))
    for name, config in configs:
        runtime, groups = thread_cpu(workload, config, args.out / re.sub(r"\W+", "-", name))
        print(f"{args.job}, {name}: {runtime:.2f} s, {sum(groups.values()):.1f} CPU-s in the JVM")
        for group, seconds in groups.most_common(args.top):
            print(f"  {group:20s} {seconds:7.2f}")


if __name__ == "__main__":
    main()
