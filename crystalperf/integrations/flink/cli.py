"""``crystalperf flink-conf``: the configuration lines that load the Flink reporter."""

from __future__ import annotations

import argparse
import sys


def register_flink_conf(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "flink-conf",
        help="print the Flink configuration (key: value) lines that load the crystalperf reporter",
    )
    parser.add_argument(
        "--output-dir", help="where the reporter writes its files (default: the working directory)"
    )
    parser.set_defaults(func=_flink_conf)


def _flink_conf(args: argparse.Namespace) -> int:
    from crystalperf.integrations.flink import configuration

    entries = configuration(args.output_dir)
    sys.stdout.write("".join(f"{key}: {value}\n" for key, value in entries.items()))
    return 0
