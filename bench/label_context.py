"""How much of a measured label belongs to the workload rather than to the code (docs/models.md, "A label is
partly the workload's").

A function's measured label is the dominant share of its inclusive time in the workloads that ran it. A
generic function (a buffered reader, a ``copy``, an executor's ``run``) spends that time in whatever its
caller gave it: disk in one workload, network in another, waiting in a third. A classifier that reads only
the function's code and documentation cannot tell which. This bench labels every function once per workload,
with the same floors as the kept corpus, and asks of the functions labelled by two or more workloads:

- how often their workloads agree;
- the **oracle ceiling**: score, against each workload's own label, a predictor that knows each function's
  majority label over all its workloads (the best any one-label-per-function classifier can do, and better
  than a code-only one can, since it has seen the labels). Accuracy and macro-F1 over (function, workload)
  pairs, per class;
- for each class of the kept corpus, how many of its labelled functions are such shared functions.

Inputs: the Python measurement's raw directory (one sub-directory per suite, ``raw-*.json`` files, as
``python -m crystalperf.models.measure.python`` keeps them) and, for the JVM, one measurement per driver
(``python -m crystalperf.models.measure.jvm --drivers NAME --out DIR/NAME`` for each driver). A per-driver
measurement is a second run of that driver, so the JVM figures include the run-to-run noise that
``bench/label_retest.py`` measured (1.4 % disagreement).

Usage: python bench/label_context.py [--python-raw data/python-raw] [--jvm-drivers DIR] [--corpus data/measured]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

from crystalperf.models.evaluate import scores
from crystalperf.models.measure.python import Measurement, library_of, merge_workload
from crystalperf.models.measured import json_lines, read_measured, split_by_library
from crystalperf.models.sparse import LABELS4


def python_labels(raw_root: Path) -> dict[str, dict[str, str]]:
    """qualified id -> {suite: label}, each suite's raw files merged and labelled alone."""
    per_function: dict[str, dict[str, str]] = defaultdict(dict)
    for workload_dir in sorted(p for p in raw_root.iterdir() if p.is_dir()):
        merged: dict[tuple[str, int, str], Measurement] = {}
        distributions: dict[str, dict[str, str]] = {}
        stdlib = merge_workload(workload_dir, merged, distributions)
        # As the corpus does: where two code objects share a qualified name, the busiest one stands for it.
        for m in sorted(merged.values(), key=lambda x: -x.total):
            name = f"python:{m.qualified_name}"
            if workload_dir.name in per_function.get(name, {}) or library_of(m, stdlib, distributions) is None:
                continue
            label = m.label()
            if label is not None:
                per_function[name][workload_dir.name] = label
    return per_function


def jvm_labels(drivers_root: Path) -> dict[str, dict[str, str]]:
    """method id -> {driver: label}, from one ``jvm.jsonl`` per driver directory."""
    per_function: dict[str, dict[str, str]] = defaultdict(dict)
    for path in sorted(drivers_root.glob("*/jvm.jsonl")):
        for _number, _line, row in json_lines(path):
            if isinstance(row, dict) and "#" not in row.get("id", "#") and row.get("label") in LABELS4:
                per_function[row["id"]][path.parent.name] = row["label"]
    return per_function


def majority(labels: Iterable[str], tie_break: str | None) -> str:
    counts = Counter(labels)
    top = max(counts.values())
    tied = sorted(label for label, n in counts.items() if n == top)
    return tie_break if tie_break in tied else tied[0]


def report(name: str, per_function: dict[str, dict[str, str]], corpus: dict[str, dict]) -> dict:
    shared = {f: w for f, w in per_function.items() if len(w) >= 2}
    print(f"\n== {name}: {len(per_function)} functions labelled by at least one workload, "
          f"{len(shared)} by two or more")
    result: dict = {"labelled": len(per_function), "shared": len(shared)}
    for scope in ("all", "test"):
        chosen = {f: w for f, w in shared.items() if scope == "all" or corpus.get(f, {}).get("split") == "test"}
        pairs: list[tuple[str, str]] = []
        agree = 0
        for f, workloads in chosen.items():
            oracle = majority(workloads.values(), corpus.get(f, {}).get("label"))
            pairs.extend((label, oracle) for label in workloads.values())
            agree += len(set(workloads.values())) == 1
        scored = scores([LABELS4.index(t) for t, _p in pairs], [LABELS4.index(p) for _t, p in pairs], LABELS4)
        accuracy, macro = scored["accuracy"], scored["macro_f1"]
        present = {c: v for c, v in scored["per_class"].items() if v["support"]}
        f1 = {c: v["f1"] for c, v in present.items()}
        counts = {c: v["support"] for c, v in present.items()}
        per_class = ", ".join(f"{c} {f1[c]:.3f} (n {counts[c]})" for c in present)
        print(f"  {scope:>4}: {len(chosen)} functions, all workloads agree on {agree} "
              f"({agree / max(len(chosen), 1):.1%}); oracle ceiling over {len(pairs)} (function, workload) pairs: "
              f"accuracy {accuracy:.3f}, macro-F1 {macro:.3f}; F1 {per_class}")
        result[scope] = {"functions": len(chosen), "agree": agree, "pairs": len(pairs), "accuracy": accuracy,
                         "macro_f1": macro, "f1": f1, "counts": counts}
    # Which of the corpus's labelled functions are shared, per class: where the ceiling above applies.
    by_class: dict[str, Counter] = defaultdict(Counter)
    for f, row in corpus.items():
        if row.get("label") in LABELS4 and f in per_function:
            by_class[row["label"]]["labelled"] += 1
            workloads = per_function[f]
            if len(workloads) >= 2:
                by_class[row["label"]]["shared"] += 1
                by_class[row["label"]]["mixed"] += len(set(workloads.values())) > 1
    print("  kept corpus's labelled functions, per class: shared by 2+ workloads / of those, workloads disagree")
    for c in LABELS4:
        n = by_class[c]
        if n["labelled"]:
            print(f"    {c:>8}: {n['labelled']:>6} labelled, {n['shared']:>5} shared ({n['shared'] / n['labelled']:.1%}), "
                  f"{n['mixed']:>4} mixed ({n['mixed'] / max(n['shared'], 1):.1%} of shared)")
    result["corpus_classes"] = {c: dict(by_class[c]) for c in LABELS4}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python-raw", type=Path, help="the Python measurement's raw directory (one per suite)")
    parser.add_argument("--jvm-drivers", type=Path, help="a directory of per-driver JVM measurements")
    parser.add_argument("--corpus", type=Path, default=Path("data/measured"), help="the kept corpus")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rows = read_measured(args.corpus)
    split_by_library(rows, seed=0)
    corpus = {row["id"]: row for row in rows}
    results = {}
    if args.python_raw:
        results["python"] = report("Python (per suite)", python_labels(args.python_raw), corpus)
    if args.jvm_drivers:
        results["jvm"] = report("JVM (per driver)", jvm_labels(args.jvm_drivers), corpus)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
