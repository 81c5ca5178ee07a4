"""``crystalperf flink-conf``: the configuration lines that load the Flink reporter."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


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
        help="do not start the analysis when a job ends (by default this Python runs crystalperf flink-finish)",
    )
    parser.set_defaults(func=_flink_conf)


def _flink_conf(args: argparse.Namespace) -> int:
    from crystalperf.integrations.flink import configuration

    entries = configuration(args.output_dir, analyze=not args.no_analyze)
    sys.stdout.write("".join(f"{key}: {value}\n" for key, value in entries.items()))
    return 0


def register_flink_finish(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "flink-finish",
        help="trace and report of a Flink job from the reporter's parts (what the reporter runs at job end)",
    )
    parser.add_argument("part", type=Path, help="a crystalperf-flink-<job_id>.<pid>.json file")
    parser.add_argument("--out", type=Path, default=None, help="report directory (default: the part's directory)")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the other processes' parts"
    )
    parser.set_defaults(func=_flink_finish)


def _flink_finish(args: argparse.Namespace) -> int:
    from crystalperf.integrations.flink import finish_when_complete

    trace = finish_when_complete(args.part, args.out, timeout_s=args.timeout)
    sys.stdout.write(f"crystalperf: {'wrote ' + str(trace) if trace else 'report already current'}\n")
    return 0
