"""``python -m bench.fidelity.rescore RESULTS.json [...] --before TREE [--after TREE] [--python PY] [--reclassify]
[--only FRAMEWORK]``: analyse the traces of earlier fidelity runs again with two crystalperf source trees and score
both on the same traces: the job verdict against the measured truth and the vector's mean absolute error. Two runs
of the benchmark differ by the machine's noise (a mixed job's truth may flip at 0.51 CPU); the same traces analysed
twice differ only by the code. ``--reclassify`` has each tree classify every stack itself (to compare classifiers
or their weights; run it with the framework's environment, ``--only`` that framework, so its frames are located).

``TREE`` is a checkout (``git worktree add /tmp/before COMMIT``); the default ``--after`` is this repository.
Only confirmed jobs are scored, as the benchmark's summary does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.fidelity.scoring import mean_absolute_error, report_vector

ROOT = Path(__file__).resolve().parents[2]
CATEGORIES = ("cpu", "disk", "network", "waiting")


def _analyse(python: str, tree: Path, trace: str, out: Path, reclassify: bool = False) -> dict[str, Any] | None:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [python, "-m", "bench.fidelity.reanalyse", trace, str(out), "--attribution", "evidence"]
    done = subprocess.run(command + ["--reclassify"] * reclassify,
                          cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        print(f"  {tree}: {trace} failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+", help="--json files of earlier bench.fidelity runs")
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--python", default=sys.executable, help="an interpreter with crystalperf's dependencies")
    parser.add_argument("--reclassify", action="store_true", help="classify every stack again in each tree")
    parser.add_argument("--only", default=None, help="score only this framework's jobs")
    args = parser.parse_args()
    trees = {"before": args.before, "after": args.after}
    scored: dict[str, list[tuple[bool, float]]] = {name: [] for name in trees}
    work = Path(tempfile.mkdtemp(prefix="fidelity-rescore-"))
    for results in args.results:
        for job in json.loads(results.read_text())["jobs"]:
            if not job.get("trace") or not job.get("shares") or not job.get("confirmed"):
                continue
            if args.only and job["framework"] != args.only:
                continue
            line = f"{results.name} {job['framework']}/{job['job']}: truth {job['truth']}"
            for name, tree in trees.items():
                report = _analyse(args.python, tree, job["trace"], work / f"{len(os.listdir(work))}.json",
                                  args.reclassify)
                if report is None:
                    continue
                vector = report_vector(report)
                verdict = (report.get("bottleneck") or {}).get("resource")
                error = mean_absolute_error(vector, job["shares"])
                scored[name].append((verdict == job["truth"], error))
                shown = "/".join(f"{vector.get(c, 0.0):.2f}" for c in CATEGORIES)
                line += f" | {name} {verdict} {shown} MAE {error:.3f}"
            print(line, flush=True)
    print()
    print("| analysed by | verdicts right | vector MAE |")
    print("|---|---|---|")
    for name, rows in scored.items():
        if rows:
            print(f"| {name} ({trees[name]}) | {sum(ok for ok, _ in rows)} / {len(rows)} | "
                  f"{statistics.mean(e for _, e in rows):.3f} |")


if __name__ == "__main__":
    main()
