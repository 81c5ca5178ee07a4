"""``python -m bench.whatif [--framework spark,tensorflow,flink] [--quick]``: predictions from one traced
baseline run against real re-runs, per workload, resource kind and framework (see docs/accuracy.md).

``--direction up|down`` and ``--workload NAME[,NAME]`` run a part of it (one case while developing it).

``--scale`` runs the scale cases instead (``bench/whatif/scale/``: task slots up and down, CPU-bound and
ceiling-bound, local and on the namespace cluster), every run traced, each predicted with ``crystalperf validate``;
results in ``bench/whatif/results/scale/`` (merged case by case: a framework's cases run with its own interpreter).

Run it from the repository root. Each framework's jobs run in that framework's environment (see
``bench/whatif/spark.py``, ``tensorflow.py``); the predictions are made with this interpreter's
crystalperf, as a user would with ``crystalperf predict``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from bench.whatif import flink, spark, tensorflow
from bench.whatif.runner import CaseResult, repredict, run_workload, write_outputs

FRAMEWORKS = ("spark", "tensorflow", "flink")


def machine_description() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.node()}: {os.cpu_count()} CPUs, {memory:.0f} GiB, Linux {platform.release()}"


def _workloads(framework: str, data_dir: Path, quick: bool, direction: str = "both") -> list[Any]:
    """The framework's workloads: ``workloads()`` (traced at the roomier configuration, predicted on less,
    "down") and, where the module has them, ``up_workloads()`` (traced throttled, predicted on more)."""
    module = {"spark": spark, "tensorflow": tensorflow, "flink": flink}[framework]
    found: list[Any] = []
    if direction in ("down", "both"):
        found += module.workloads(data_dir, quick)
    if direction in ("up", "both") and hasattr(module, "up_workloads"):
        found += module.up_workloads(data_dir, quick)
    return found


def repredict_results(path: Path, data_dir: Path) -> None:
    data = json.loads(path.read_text())
    cases = [CaseResult(**{**c, "band_s": tuple(c["band_s"]) if c.get("band_s") else None}) for c in data["cases"]]
    changes: dict[tuple[str, str, str], list[str]] = {}
    for framework in {c.framework for c in cases}:
        for workload in _workloads(framework, data_dir, quick=False):
            for target in workload.targets(False):
                changes[(framework, workload.name, target.name)] = target.changes
    repredict(cases, lambda c: changes[(c.framework, c.workload, c.target)])
    for written in write_outputs(cases, path.parent, machine=data["machine"]):
        print(f"wrote {written}")


def run_scale(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    from bench.whatif.scale import FRAMEWORKS as SCALE_FRAMEWORKS
    from bench.whatif.scale import cases, export_traces
    from bench.whatif.scale.runner import RESULTS_JSON, commit, load_results, repredict, run_case, team_lock
    from bench.whatif.scale.runner import write_outputs as write_scale

    only = {w.strip() for w in (args.workload or "").split(",") if w.strip()}
    if args.repredict is not None:
        for path in repredict(args.repredict, only=only or None):
            print(f"wrote {path}")
        return
    out = args.out or Path("bench/whatif/results/scale")
    wanted = [f.strip() for f in args.framework.split(",") if f.strip()]
    unknown = sorted(set(wanted) - set(SCALE_FRAMEWORKS))
    if unknown:
        parser.error(f"unknown framework(s): {', '.join(unknown)}")
    selected = [c for framework in wanted for c in cases(args.data_dir, framework)]
    if only:
        missing = sorted(only - {c.name for c in selected} - {f"{c.framework}/{c.name}" for c in selected})
        if missing:
            parser.error(f"no such scale case(s): {', '.join(missing)} "
                         f"(known: {', '.join(f'{c.framework}/{c.name}' for c in selected)})")
        selected = [c for c in selected if c.name in only or f"{c.framework}/{c.name}" in only]
    header = {"machine": machine_description(), "command": "python -m bench.whatif --scale",
              "runs_commit": commit(), "date": time.strftime("%Y-%m-%d")}
    results = {}
    if (out / RESULTS_JSON).exists():
        previous_header, previous = load_results(out / RESULTS_JSON)
        results = {(r.framework, r.case): r for r in previous}
        header["runs_commit"] = ", ".join(sorted({previous_header.get("runs_commit", ""), header["runs_commit"]} - {""}))
    for case in selected:
        with team_lock(args.lock):
            try:
                result = run_case(case, args.data_dir / "runs" / "scale" / case.framework / case.name,
                                  repetitions=args.repetitions or 3)
            finally:
                if hasattr(case, "close"):
                    case.close()
        result.commit, result.date = commit(), time.strftime("%Y-%m-%d %H:%M")
        results[(case.framework, case.name)] = result
        runs = sorted({r.commit for r in results.values() if r.commit})
        header["runs_commit"] = ", ".join(runs)
        for path in write_scale(list(results.values()), out, header):
            print(f"wrote {path}")
        if args.export_traces and result.trace:
            python = sys.executable if not sys.executable.startswith(os.getcwd()) else \
                os.path.relpath(sys.executable)
            command = (f"{python} -m bench.whatif --scale --framework {case.framework} --workload {case.name} "
                       f"--repetitions {args.repetitions or 3} --data-dir {args.data_dir}")
            print(f"traces copied to {export_traces(result, args.export_traces, command)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default=",".join(FRAMEWORKS),
                        help="comma-separated: spark, tensorflow, flink (default: all)")
    parser.add_argument("--quick", action="store_true", help="one workload per framework, two variations")
    parser.add_argument("--repetitions", type=int, default=None, help="real runs per configuration (default 3; 2 quick)")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("CRYSTALPERF_BENCH_DATA", ".whatif-data")),
                        help="generated input data, kept between runs")
    parser.add_argument("--out", type=Path, default=None, help="results directory (default bench/whatif/results/<date>)")
    parser.add_argument("--workload", default=None,
                        help="comma-separated workload names to run (e.g. scan-up,tpch-q6); default: all")
    parser.add_argument("--direction", choices=("up", "down", "both"), default="both",
                        help="up: cases traced on a throttled resource and predicted on a faster one; "
                             "down: the others (default both)")
    parser.add_argument("--repredict", type=Path, default=None, metavar="RESULTS_JSON",
                        help="predict the cases of an earlier run again from their traces (after a model "
                             "change) and rewrite its outputs; nothing is re-run")
    parser.add_argument("--scale", action="store_true",
                        help="run the scale cases (bench/whatif/scale/), every run traced, predicted with "
                             "crystalperf validate; with --repredict: a scale results file")
    parser.add_argument("--lock", type=Path, default=None, metavar="FILE",
                        help="--scale: hold an exclusive flock on FILE while each case runs (a shared machine)")
    parser.add_argument("--export-traces", type=Path, default=None, metavar="DIR",
                        help="--scale: copy each case's traces to DIR/<framework>-<case>/ with a README line")
    args = parser.parse_args()
    if args.scale:
        run_scale(args, parser)
        return
    if args.repredict is not None:
        repredict_results(args.repredict, args.data_dir)
        return
    repetitions = args.repetitions or (2 if args.quick else 3)
    out = args.out or Path("bench/whatif/results") / time.strftime("%Y-%m-%d")
    wanted = [f.strip() for f in args.framework.split(",") if f.strip()]
    unknown = sorted(set(wanted) - set(FRAMEWORKS))
    if unknown:
        parser.error(f"unknown framework(s): {', '.join(unknown)}")
    selected = [(framework, workload) for framework in wanted
                for workload in _workloads(framework, args.data_dir, args.quick, args.direction)]
    if args.workload:
        only = {w.strip() for w in args.workload.split(",") if w.strip()}
        unknown = sorted(only - {w.name for _, w in selected})
        if unknown:
            parser.error(f"no such workload(s) here: {', '.join(unknown)} "
                         f"(known: {', '.join(sorted({w.name for _, w in selected}))})")
        selected = [(f, w) for f, w in selected if w.name in only]
    results: list[CaseResult] = []
    for framework, workload in selected:
        if workload.python is None:
            reason = f"{framework} is not installed in any environment the benchmark knows"
            results += [CaseResult(framework, workload.name, t.name, t.kind, skipped=reason)
                        for t in workload.targets(args.quick)]
            print(f"[{framework}/{workload.name}] skipped: {reason}")
            continue
        # Traces and per-run files go next to the data; only the summaries go to the results.
        results += run_workload(workload, args.data_dir / "runs" / framework / workload.name,
                                repetitions=repetitions, quick=args.quick)
    out.mkdir(parents=True, exist_ok=True)
    for path in write_outputs(results, out, machine=machine_description()):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
