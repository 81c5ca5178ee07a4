"""How much CPU one Flink file job's rows cost at several parallelisms, CPU masks and collectors: the work a
what-if keeps constant, measured (docs/whatif.md, "What the CPU per row depends on").

    python -m bench.whatif.cpu_per_row --case stream-files --reps 3 \\
        --config p1 --config p1:taskset=1 --config p2 --config p1:gc=serial --config p1:taskset=1:gc=g1

A config is ``p<parallelism>`` with optional ``:taskset=N`` (the job pinned to N CPUs) and ``:gc=serial|g1`` (the
collector chosen with ``JAVA_TOOL_OPTIONS``, else the JVM's ergonomics choose). Every run is traced (the
reporter's per-thread CPU split: ``environment.executors[].thread_cpu``); the configs are interleaved, ``--reps``
rounds, and the table gives each one's medians. The case's data (``bench.whatif.scale.flink``) is written under
``--data-dir`` on the first run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path
from typing import Any

from bench.whatif.scale.flink import cases
from crystalperf.core.trace import load_trace

KINDS = ("task", "gc", "gc_concurrent", "jit", "network", "other", "hook")
COLLECTORS = {"serial": "-XX:+UseSerialGC", "g1": "-XX:+UseG1GC"}


def parse_config(text: str, baseline: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    head, *options = text.split(":")
    if not head.startswith("p") or not head[1:].isdigit():
        raise SystemExit(f"error: a config starts with p<parallelism>: {text!r}")
    config = {**baseline, "parallelism": int(head[1:])}
    collector = None
    for option in options:
        key, _, value = option.partition("=")
        if key == "taskset" and value.isdigit():
            config["taskset"] = int(value)
        elif key == "gc" and value in COLLECTORS:
            collector = COLLECTORS[value]
        else:
            raise SystemExit(f"error: unknown option {option!r} in {text!r} (taskset=N, gc=serial|g1)")
    return config, collector


def measure(case: Any, config: dict[str, Any], collector: str | None, out: Path) -> dict[str, Any]:
    previous = os.environ.get("JAVA_TOOL_OPTIONS")
    if collector:
        os.environ["JAVA_TOOL_OPTIONS"] = collector
    try:
        run = case.run(config, out)
    finally:
        if previous is None:
            os.environ.pop("JAVA_TOOL_OPTIONS", None)
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = previous
    if run.trace is None:
        raise SystemExit(f"error: the run in {out} wrote no trace")
    trace = load_trace(run.trace)
    kinds = dict.fromkeys(KINDS, 0.0)
    families = set()
    for executor in trace.environment.executors:
        if executor.thread_cpu is not None:
            for kind in KINDS:
                kinds[kind] += getattr(executor.thread_cpu, kind)
        if executor.garbage_collector is not None and executor.garbage_collector.family:
            families.add(executor.garbage_collector.family)
    return {"runtime_s": run.runtime_s, "collector": ",".join(sorted(families)) or "?", **kinds,
            "total": sum(kinds.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="stream-files", help="a Flink file case of bench.whatif.scale.flink")
    parser.add_argument("--config", action="append", required=True, help="p<N>[:taskset=N][:gc=serial|g1]")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/crystalperf-scale"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/crystalperf-cpu-per-row"))
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    found = {c.name: c for c in cases(args.data_dir) if hasattr(c, "total_bytes")}
    if args.case not in found:
        raise SystemExit(f"error: no Flink file case {args.case!r} (one of {', '.join(sorted(found))})")
    case = found[args.case]
    case.trace_every_run = True
    configs = {text: parse_config(text, case.baseline) for text in args.config}
    runs: dict[str, list[dict[str, Any]]] = {text: [] for text in configs}
    for rep in range(args.reps):
        for text, (config, collector) in configs.items():
            figures = measure(case, config, collector, args.out / text.replace(":", "_").replace("=", "") / f"rep{rep}")
            runs[text].append(figures)
            print(json.dumps({"config": text, "rep": rep, **{k: (round(v, 3) if isinstance(v, float) else v)
                                                             for k, v in figures.items()}}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    print(f"\n{args.case}: medians of {args.reps} interleaved runs (CPU-s by thread kind, from the traces)")
    print(f"| config | collector | runtime (s) | {' | '.join(KINDS)} | total |")
    print("|---|---|---:|" + "---:|" * (len(KINDS) + 1))
    for text, figures in runs.items():
        medians = [statistics.median(f[k] for f in figures) for k in ("runtime_s", *KINDS, "total")]
        print(f"| {text} | {figures[0]['collector']} | " + " | ".join(f"{m:.2f}" for m in medians) + " |")


if __name__ == "__main__":
    main()
