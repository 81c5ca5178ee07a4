"""Job end, run by the listener in its own process when the application ends: merge the PySpark workers'
samples into the trace the JVM wrote, write it, then run the same analysis as ``crystalperf analyze``.

The listener starts it detached (SparkContext.stop() does not wait for it): it leaves the driver's session
first, so that a signal to the driver's process group (Ctrl-C, a resource manager stopping the driver) does not
end it, and outlives the driver.

``python -m crystalperf.integrations.spark.finish TRACE --out DIR [--spool DIR] [--no-analysis]``
(the command ``INTEGRATION.finish_command`` gives; the Java listener builds the same one).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from crystalperf.core import atomic
from crystalperf.core import trace as tr
from crystalperf.core.record.budget import add_hook_part, add_hook_processes
from crystalperf.core.record.hooks import TRACE_NAME, guard
from crystalperf.integrations.base import REPORT_JSON, finish_main, write_trace_and_report
from crystalperf.integrations.spark.assemble import (
    add_shipped_file_roots,
    add_worker_cpu,
    add_worker_cpu_wait,
    merge_worker_samples,
    name_operations,
    name_python_call_sites,
)
from crystalperf.integrations.spark.config import INTEGRATION
from crystalperf.integrations.spark.pydriver import read_driver_calls
from crystalperf.integrations.spark.reader import read_worker_spool

log = logging.getLogger("crystalperf")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", type=Path, help="the trace the listener wrote")
    parser.add_argument("--out", type=Path, required=True, help="where the trace and the report go")
    parser.add_argument("--spool", type=Path, help="the PySpark workers' sample files to merge")
    parser.add_argument("--no-analysis", action="store_true", help="write the trace only")
    parser.add_argument("--trace-write-s", type=float, default=None, metavar="SECONDS",
                        help="CPU seconds the listener spent writing the trace (added to the driver's hook cost)")
    parser.add_argument("--link-latest", action="store_true",
                        help="OUT is this application's own directory inside a shared one: link the files' documented "
                        "names there to this application's files")


def _merge_spool(trace: tr.Trace, spool: Path) -> list[str]:
    """Merge what the PySpark workers and driver left in ``spool`` and remove it; returns the files the program
    added with ``addPyFile``."""
    added: list[str] = []
    with guard("merging the Python workers' samples"):
        workers = read_worker_spool(spool)
        merge_worker_samples(trace, workers.samples)
        add_worker_cpu(trace, workers.cpu)
        add_worker_cpu_wait(trace, workers.cpu_wait)
        add_hook_processes(trace, workers.hook)
        log.info("crystalperf: merged the samples of %d Python worker(s)", len(workers.samples))
    with guard("naming jobs after the lines of the PySpark program that started them"):
        calls, added = read_driver_calls(spool)
        renamed = name_python_call_sites(trace, calls)
        if renamed:
            log.info("crystalperf: %d job(s) named after the line of the PySpark program that started them", renamed)
    with guard("removing the spool directory"):
        # The spool is this application's alone (a fresh temporary directory unless the user chose one).
        shutil.rmtree(spool, ignore_errors=True)
    return added


def _detach() -> None:
    """Leave the driver's session and process group (a no-op where the listener's setsid already did)."""
    if hasattr(os, "setsid"):
        try:
            os.setsid()
        except OSError:  # already a session leader
            pass


def run(args: argparse.Namespace) -> int:
    trace = tr.load_trace(args.trace)
    # The listener's document is the trace as the JVM saw it; what only this package knows is added here.
    trace.environment.scaling = trace.environment.scaling or list(INTEGRATION.scaling)
    name_operations(trace)
    added = _merge_spool(trace, args.spool) if args.spool is not None and args.spool.is_dir() else []
    add_shipped_file_roots(trace, added)
    if args.trace_write_s is not None:
        add_hook_part(trace, "driver", "trace_write", args.trace_write_s)
    status = write_trace_and_report(trace, args.out, analyze=not args.no_analysis)
    if args.link_latest:
        _link_latest(args.out)
    return status


def _link_latest(own_dir: Path) -> None:
    """``<shared>/crystalperf-report.html`` -> ``crystalperf-<app id>/crystalperf-report.html`` (and the trace and
    the JSON report): where the files were before each application had its own directory, now the latest one's."""
    for name in (TRACE_NAME, REPORT_JSON, "crystalperf-report.html"):
        if not (own_dir / name).is_file():
            continue
        with guard(f"linking {name} in {own_dir.parent} to this application's"):
            try:
                atomic.symlink(own_dir.parent / name, Path(own_dir.name) / name)
            except FileExistsError:
                log.info("crystalperf: %s is a file of its own: not replaced by a link", own_dir.parent / name)


def main(argv: Sequence[str] | None = None) -> int:
    _detach()
    return finish_main(INTEGRATION, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
