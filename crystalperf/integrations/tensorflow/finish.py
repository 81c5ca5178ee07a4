"""Run by the Keras callback when training ends, in its own process: analyse the trace the callback
wrote, with the same analysis as ``crystalperf analyze``.

``python -m crystalperf.integrations.tensorflow.finish TRACE --out DIR [--no-analysis]``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from crystalperf.core import trace as tr
from crystalperf.integrations.base import finish_main, write_trace_and_report
from crystalperf.integrations.tensorflow.config import INTEGRATION


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", type=Path, help="the trace the callback wrote")
    parser.add_argument("--out", type=Path, required=True, help="where the trace and the report go")
    parser.add_argument("--no-analysis", action="store_true", help="write the trace only")


def run(args: argparse.Namespace) -> int:
    """0 when the trace (and, unless ``--no-analysis``, the report) is in ``--out``; 1 otherwise."""
    return write_trace_and_report(tr.load_trace(args.trace), args.out, analyze=not args.no_analysis)


def main(argv: Sequence[str] | None = None) -> int:
    return finish_main(INTEGRATION, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
