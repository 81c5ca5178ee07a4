"""``python -m bench.fidelity [--only spark|flink|tensorflow] [--jobs a,b] [--json OUT]``: how faithfully
crystalperf names each job's and operation's resource, against jobs whose dominant resource is known by
construction and confirmed by OS counters, next to the paper's method on the same traces
(see docs/fidelity.md).

Run it from the repository root, as root (cgroups, network namespaces, tc). Each framework's jobs run in
that framework's environment (``$CRYSTALPERF_SPARK_PYTHON`` / ``_FLINK_`` / ``_TF_``, else the nox
session's); a framework with no environment is skipped with a line saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bench.fidelity import machine
from bench.fidelity.jobs import ALL
from bench.fidelity.scoring import JobResult, jobs_table, summarise, summary_table
from bench.whatif.flink import flink_python
from bench.whatif.spark import spark_python
from bench.whatif.tensorflow import tf_python

PYTHONS = {"spark": spark_python, "flink": flink_python, "tensorflow": tf_python}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(ALL), action="append",
                        help="one framework (repeatable; default: all)")
    parser.add_argument("--jobs", default="", help="comma-separated job names (cpu, disk, network, idle, "
                        "mixed, pyudf), or framework/job")
    parser.add_argument("--json", type=Path, default=None, help="write every job's result and the scores here")
    parser.add_argument("--data-dir", type=Path,
                        default=Path(os.environ.get("CRYSTALPERF_FIDELITY_DATA", "/var/tmp/crystalperf-fidelity")),
                        help="generated input data and each job's output directory (trace, reports, log)")
    args = parser.parse_args()
    wanted = {j.strip() for j in args.jobs.split(",") if j.strip()}
    for reason in (machine.throttle_unavailable(), machine.shaping_unavailable()):
        if reason:
            sys.exit(f"the fidelity benchmark cannot run here: {reason}")
    results: list[JobResult] = []
    started = time.monotonic()
    for framework in args.only or list(ALL):
        specs = [s for s in ALL[framework]() if not wanted or s.name in wanted or f"{framework}/{s.name}" in wanted]
        python = PYTHONS[framework]()
        if python is None:
            print(f"[{framework}] skipped: not installed in any environment the benchmark knows "
                  f"(set CRYSTALPERF_{'TF' if framework == 'tensorflow' else framework.upper()}_PYTHON)")
            results += [JobResult(framework, s.name, s.kind, s.intended, skipped="framework not installed")
                        for s in specs]
            continue
        from bench.fidelity.harness import run_job

        for spec in specs:
            t = time.monotonic()
            result = run_job(spec, python, args.data_dir / "data", args.data_dir / "runs")
            results.append(result)
            ours, paper = result.methods.get("crystalperf"), result.methods.get("paper")
            print(f"[{framework}/{spec.name}] {time.monotonic() - t:.0f} s: truth {result.truth}"
                  f" ({'confirmed' if result.confirmed else 'NOT confirmed'} by "
                  + "/".join(f"{result.shares.get(r, 0):.2f}" for r in ("cpu", "disk", "network", "waiting"))
                  + f"); crystalperf {ours.verdict if ours else '-'}, paper {paper.verdict if paper else '-'}",
                  flush=True)
    summary = summarise(results)
    print()
    print(jobs_table(results))
    print()
    print(summary_table(summary))
    print(f"\n{len(results)} jobs in {time.monotonic() - started:.0f} s")
    if args.json:
        data = {"date": time.strftime("%Y-%m-%d %H:%M"), "summary": summary,
                "jobs": [{**asdict(r), "truth": r.truth, "confirmed": r.confirmed} for r in results]}
        args.json.write_text(json.dumps(data, indent=1, default=str) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
