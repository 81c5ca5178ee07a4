"""The Spark commands of the ``crystalperf`` CLI: ``spark-conf``, ``demo`` and ``spark-finish`` (the job end
the listener runs, by hand)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from crystalperf.integrations.base import add_cpu_budget_option, register_finish_command
from crystalperf.integrations.spark.config import INTEGRATION


def register_spark_finish(subparsers: argparse._SubParsersAction) -> None:
    register_finish_command(subparsers, INTEGRATION,
                            "merge the PySpark workers' samples into a listener's trace, write it and the report")


def register_spark_conf(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("spark-conf", help="print the spark-submit --conf lines that turn crystalperf on")
    parser.add_argument("--output-dir", help="where the trace and report go (default: next to the job's output)")
    parser.add_argument("--sample-interval-ms", type=int, help="stack sampling interval (default 100)")
    parser.add_argument("--no-python-sampling", action="store_true", help="do not sample PySpark's Python workers")
    add_cpu_budget_option(parser)
    parser.set_defaults(func=_spark_conf)


def _spark_conf(args: argparse.Namespace) -> int:
    from crystalperf.integrations.spark.config import spark_conf

    # A setup problem (pyspark missing or unsupported, a stale jar) is a CrystalPerfError: one line from the CLI.
    conf = spark_conf(output_dir=args.output_dir, sample_interval_ms=args.sample_interval_ms,
                      python_sampling=not args.no_python_sampling, pin_worker_python=True,
                      cpu_budget=args.cpu_budget)
    lines = [f"--conf {shlex.quote(f'{k}={v}')}" for k, v in conf.items()]
    sys.stdout.write(" \\\n".join(lines) + "\n")
    return 0


def register_demo(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run TPC-H Q6 and Q9 on local Spark and report where the time went")
    parser.add_argument("--out", default="crystalperf-demo", help="directory for data and report (default ./crystalperf-demo)")
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor of the generated data (default 1)")
    parser.add_argument("--sample-interval-ms", type=int, default=None,
                        help="stack sampling period (default: the hook's); shorter gives a finer split of small runs "
                             "as far as the CPU budget allows")
    add_cpu_budget_option(parser)
    parser.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    import logging

    from crystalperf.integrations.spark.config import spark_version
    from crystalperf.integrations.spark.demo import run_demo

    spark_version()  # FrameworkNotInstalledError names the extra to install
    logging.getLogger("crystalperf").setLevel(logging.INFO)
    out = Path(args.out)
    report = run_demo(out, scale=args.scale, sample_interval_ms=args.sample_interval_ms, cpu_budget=args.cpu_budget)
    if not report:
        sys.stderr.write(f"crystalperf: the demo ran but no report was written; see {out / 'crystalperf-analysis.log'}\n")
        return 1
    from rich.console import Console

    from crystalperf.core.report.terminal import TerminalRenderer

    TerminalRenderer().print(report, Console())
    sys.stdout.write(f"\nreport: {(out / 'crystalperf-report.html').resolve()}\n")
    return 0
