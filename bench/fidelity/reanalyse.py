"""``python -m bench.fidelity.reanalyse TRACE OUT_JSON [--attribution paper|default] [--reclassify]``: analyse a
job's trace again, as ``crystalperf analyze TRACE --attribution ... [--reclassify]`` would, and write the report
JSON. ``--reclassify`` classifies every stack with this tree's classifier instead of using the vectors the trace
embeds from its job-end analysis (to compare classifiers on the same traces).

Run with the job's framework environment, so that the classifier (the neural one where torch is installed)
is the one the job-end report used. Without the ``attribution`` argument (a crystalperf from before it),
the default analysis is the paper's method and the report says so in ``fidelity_note``.
"""

from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--attribution", default="paper")
    parser.add_argument("--reclassify", action="store_true")
    args = parser.parse_args()
    from crystalperf.core import trace as tr
    from crystalperf.core.analysis import analyze

    options: dict[str, Any] = {"scenarios": []}  # what-ifs are not scored; they only cost time
    note = None
    if args.attribution == "default":
        pass  # the analysis a job-end report makes, whatever this crystalperf calls it
    elif "attribution" in inspect.signature(analyze).parameters:
        options["attribution"] = args.attribution
    elif args.attribution != "default":
        note = "this crystalperf has no attribution option: its default analysis is the paper's method"
    if args.reclassify:
        options["reclassify"] = True
    report = analyze(tr.load_trace(args.trace), **options).report
    if note:
        report["fidelity_note"] = note
    args.out.write_text(json.dumps(report, default=str))


if __name__ == "__main__":
    main()
