"""``crystalperf flink-conf`` (the configuration lines that load the Flink reporter) and ``crystalperf
flink-finish`` (the job-end analysis of :mod:`crystalperf.integrations.flink.finish`, by hand)."""

from __future__ import annotations

import argparse
import sys

from crystalperf.integrations.base import add_cpu_budget_option, register_finish_command
from crystalperf.integrations.flink.config import INTEGRATION


def register_flink_conf(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "flink-conf",
        help="print the Flink configuration (key: value) lines that load the crystalperf reporter",
    )
    parser.add_argument(
        "--output-dir", help="where the reporter writes its files (default: the working directory)"
    )
    parser.add_argument(
        "--no-analyze",
        action="store_true",
        help="do not start the analysis when a job ends "
        "(by default this Python runs crystalperf.integrations.flink.finish)",
    )
    parser.add_argument("--sample-interval-ms", type=int, help="stack sampling interval (default 100)")
    parser.add_argument(
        "--job-status",
        action="store_true",
        help="also record how each job ended (finished, failed, cancelled) with the jar's job status listener; "
        "the jar must then be in Flink's lib/, not plugins/, or every job fails to start",
    )
    add_cpu_budget_option(parser)
    parser.set_defaults(func=_flink_conf)


def _flink_conf(args: argparse.Namespace) -> int:
    from crystalperf.integrations.flink.config import INTEGRATION, configuration

    entries = configuration(args.output_dir, analyze=not args.no_analyze,
                            sample_interval_ms=args.sample_interval_ms, cpu_budget=args.cpu_budget,
                            job_status=args.job_status)
    if INTEGRATION.version() is None:
        # stderr: stdout stays the key: value lines a config.yaml takes
        sys.stderr.write(
            f"crystalperf: {INTEGRATION.module} is not installed here, so its version is not checked: "
            f"the cluster that loads these settings must run {INTEGRATION.supported}\n"
        )
    sys.stdout.write("".join(f"{key}: {value}\n" for key, value in entries.items()))
    return 0


def register_flink_finish(subparsers: argparse._SubParsersAction) -> None:
    register_finish_command(
        subparsers, INTEGRATION,
        "trace and report of a Flink job from the reporter's parts (what the reporter runs at job end)",
    )
