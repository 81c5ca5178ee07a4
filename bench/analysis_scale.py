"""How long the analysis takes, and how much memory, on a big synthetic trace.

Everything ``crystalperf analyze`` does (load, profile, attribution, bottleneck, predictions, reports) is
timed in a fresh process, so that its peak RSS is the analysis's alone, not the generator's. Prints the
figures as JSON; asserts nothing. Targets (docs/architecture.md): 1,000,000 tasks with 10,000,000 samples
<= 60 s and <= 2 GB on 2 cores; 20,000 operations <= 5 s.

    python bench/analysis_scale.py [--tasks 10000] [--samples 1000000]        # every task recorded
    python bench/analysis_scale.py --tasks 1000000 --samples 10000000 --keep-tasks 1000
                                    # as a hook bounding its memory writes it: a sample of 1,000 tasks per stage
    python bench/analysis_scale.py --operations 20000 [--shape flat|deep]   # a DAG of many small operations
    python bench/analysis_scale.py --trace crystalperf-trace.json.gz        # a trace file already written
    python bench/analysis_scale.py --operations 20000 --repeat 5            # the fastest of 5 runs, and all 5 times

``host_speed_s`` is what a fixed pure-Python loop took on the host just after (best of 3): a rough guide to how
fast the host was at the time (the analysis, which walks far more memory, slows down more than it on a busy host).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def generate(args: argparse.Namespace, path: Path) -> dict[str, object]:
    from crystalperf.core.trace import save_trace
    from crystalperf.core.trace.synthetic import dag_trace, spark_like_trace

    t0 = time.perf_counter()
    if args.operations:
        trace = dag_trace(operations=args.operations, shape=args.shape, seed=7)
    else:
        stages = 100
        per_stage = max(1, args.tasks // stages)
        # Tasks last ~0.85 s on average, so this rate gives the requested number of samples.
        rate = args.samples / (stages * per_stage * 0.85)
        trace = spark_like_trace(jobs=10, stages_per_job=stages // 10, tasks_per_stage=per_stage, slots=8,
                                 samples_per_second=rate, seed=7, keep_tasks=args.keep_tasks)
    generated = time.perf_counter() - t0
    save_trace(trace, path)
    ops = list(trace.iter_operations())
    return {
        "operations": len(ops),
        "tasks": sum(max(o.task_count or 0, len(o.tasks)) for o in ops),
        "tasks_recorded": sum(len(o.tasks) for o in ops),
        "samples": trace.samples.total if trace.samples else 0,
        "sample_rows": len(trace.samples.count) if trace.samples else 0,
        "generate_s": round(generated, 2),
    }


def peak_rss_bytes() -> int:
    """This process's peak resident set size. Linux's ``VmHWM`` (``ru_maxrss`` keeps across ``exec`` the peak of
    the process that forked it: the generator's); ``ru_maxrss`` where there is no /proc."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def host_speed() -> float:
    """Seconds a fixed pure-Python workload takes here (best of 3): what the interpreter manages on this host at
    this moment. A shared machine's speed changes through the day: figures taken at different times are read next
    to it (a rough guide, not a factor to scale them by)."""
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        table: dict[int, float] = {}
        total = 0.0
        for i in range(300_000):
            table[i % 1024] = table.get(i % 1024, 0.0) + i * 0.5
            total += round(table[i % 1024] / (i + 1), 6)
        best = min(best, time.perf_counter() - t0)
    return round(best, 3)


def analyse(path: str, out: str) -> None:
    """The child: analyse the trace file as the CLI does and print the figures."""
    from crystalperf.core.analysis import analyze_path
    from crystalperf.core.attribution.classify import KeywordClassifier

    t0, c0 = time.perf_counter(), time.process_time()
    result = analyze_path(path, out, classifier=KeywordClassifier())
    figures: dict[str, object] = {
        "analysis_s": round(time.perf_counter() - t0, 2),
        "analysis_cpu_s": round(time.process_time() - c0, 2),
        "analysis_inner_s": round(result.seconds, 2),
        "peak_rss_mb": round(peak_rss_bytes() / 2**20),
        # the largest of the children it forked to work beside it (crystalperf.core.parallel), 0 if none; their
        # pages are shared with it until written, so the two are not simply added
        "peak_rss_child_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
                                   * (1 if sys.platform == "darwin" else 1024) / 2**20),
        "report_bytes": sum(p.stat().st_size for p in result.files),
        "predictions": len(result.predictions),
    }
    ops = list(result.trace.iter_operations())
    samples = result.trace.samples
    figures["loaded"] = {
        "operations": len(ops),
        "tasks": sum(max(o.task_count or 0, len(o.tasks)) for o in ops),
        "tasks_kept": sum(len(o.tasks) for o in ops),
        "samples": samples.total if samples else 0,
        "sample_rows": len(samples.count) if samples else 0,
    }
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--keep-tasks", type=int, default=None,
                        help="record a uniform sample of this many tasks per stage (task_count + stage totals)")
    parser.add_argument("--operations", type=int, default=0, help="a DAG of this many operations instead")
    parser.add_argument("--shape", choices=("flat", "deep"), default="flat")
    parser.add_argument("--trace", type=Path, help="analyse this trace file instead of generating one")
    parser.add_argument("--repeat", type=int, default=1,
                        help="analyse this many times, each in a fresh process: the figures of the fastest, and "
                             "every run's time (a shared machine's speed varies from run to run)")
    parser.add_argument("--analyse", nargs=2, metavar=("TRACE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.analyse:
        analyse(*args.analyse)
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.trace:
            path = args.trace
            figures: dict[str, object] = {"trace": str(path)}
        else:
            path = Path(tmp) / "crystalperf-trace.json.gz"
            figures = generate(args, path)
        with open(path, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
        if gzipped:
            figures["trace_gz_bytes"] = path.stat().st_size
            with gzip.open(path, "rb") as f:
                figures["trace_json_bytes"] = sum(len(chunk) for chunk in iter(lambda: f.read(1 << 20), b""))
        else:
            figures["trace_json_bytes"] = path.stat().st_size
        runs = []
        for _ in range(max(1, args.repeat)):
            child = subprocess.run([sys.executable, __file__, "--analyse", str(path), str(Path(tmp) / "out")],
                                   capture_output=True, text=True, check=False)
            if child.returncode != 0:
                sys.exit(f"analysis failed ({child.returncode}): {child.stderr.strip()[-2000:]}")
            runs.append(json.loads(child.stdout.strip().splitlines()[-1]))
        figures.update(min(runs, key=lambda run: run["analysis_s"]))
        if len(runs) > 1:
            figures["analysis_s_runs"] = [run["analysis_s"] for run in runs]
    figures["host_speed_s"] = host_speed()
    figures["load_average"] = [round(x, 2) for x in os.getloadavg()]
    figures["cpus"] = os.cpu_count()
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
