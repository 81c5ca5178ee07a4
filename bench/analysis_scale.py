"""How long the analysis takes, and how much memory, on a big synthetic trace.

Default: 10,000 tasks and about 1,000,000 stack samples (the target is <= 10 s and <= 2 GB on a
2-core machine). Prints the figures; asserts nothing.

    python bench/analysis_scale.py [--tasks 10000] [--samples 1000000]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from crystalperf.core.analysis import analyze_path
from crystalperf.core.classify import KeywordClassifier
from crystalperf.core.synthetic import spark_like_trace
from crystalperf.core.trace import save_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=1_000_000)
    args = parser.parse_args()
    stages = 100
    per_stage = max(1, args.tasks // stages)
    # Tasks last ~0.85 s on average, so this rate gives the requested number of samples.
    rate = args.samples / (stages * per_stage * 0.85)
    t0 = time.perf_counter()
    trace = spark_like_trace(jobs=10, stages_per_job=stages // 10, tasks_per_stage=per_stage, slots=8,
                             samples_per_second=rate, seed=7)
    generated = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        path = save_trace(trace, Path(tmp) / "crystalperf-trace.json.gz")
        size = path.stat().st_size
        n_samples, n_rows = trace.samples.total, len(trace.samples.count)
        del trace
        t1 = time.perf_counter()
        result = analyze_path(path, Path(tmp) / "out", classifier=KeywordClassifier())
        elapsed = time.perf_counter() - t1
        report_size = sum(p.stat().st_size for p in result.files)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    figures = {
        "tasks": sum(len(o.tasks) for o in result.trace.iter_operations()),
        "samples": n_samples,
        "sample_rows": n_rows,
        "trace_gz_bytes": size,
        "report_bytes": report_size,
        "generate_s": round(generated, 2),
        "analysis_s": round(elapsed, 2),
        "analysis_inner_s": round(result.seconds, 2),
        "peak_rss_mb": round(peak_mb),
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
