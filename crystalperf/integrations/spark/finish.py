"""Run by the listener when the application ends, in its own process: merge the PySpark workers'
samples into the trace the JVM wrote, then run the same analysis as ``crystalperf analyze``.

``python -m crystalperf.integrations.spark.finish TRACE --out DIR [--spool DIR] [--no-analysis]``
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

from crystalperf.core import trace as tr
from crystalperf.core.hooks import guard
from crystalperf.core.sampling import merge_samples

log = logging.getLogger("crystalperf")


def merge_spool(trace: tr.Trace, spool: Path) -> int:
    """Add every worker's samples found in ``spool`` to the trace; returns how many files were merged."""
    parts: list[tr.StackSamples] = []
    for path in sorted(spool.glob("pyworker-*.json")):
        with guard(f"reading Python worker samples {path}"):
            parts.append(tr.StackSamples.model_validate_json(path.read_text()))
    if not parts:
        return 0
    base = [trace.samples] if trace.samples is not None else []
    bucket_s = trace.samples.bucket_s if trace.samples is not None else None
    origin = trace.samples.origin if trace.samples is not None else None
    merged = merge_samples([*base, *parts], origin=origin, bucket_s=bucket_s)
    if merged is not None and origin is None:
        merged = merge_samples([merged], origin=min(merged.origin, trace.application.start))
    trace.samples = merged
    return len(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crystalperf.integrations.spark.finish")
    parser.add_argument("trace", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--spool", type=Path)
    parser.add_argument("--no-analysis", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from crystalperf.core.hooks import finish_job

    trace = tr.load_trace(args.trace)
    if args.spool is not None and args.spool.is_dir():
        with guard("merging the Python workers' samples"):
            merged = merge_spool(trace, args.spool)
            log.info("crystalperf: merged the samples of %d Python worker(s)", merged)
            shutil.rmtree(args.spool, ignore_errors=True)
    written = finish_job(trace, args.out, analyze=not args.no_analysis)
    if written is None:
        return 1
    if not args.no_analysis and not (args.out / "crystalperf-report.json").is_file():
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
