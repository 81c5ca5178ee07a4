"""How far two measurements of the same workloads agree on the labels, and what that means for a classifier
scored against one of them (docs/models.md, "How reliable the measured labels are").

A measured label is the dominant share of a function's time (>= 0.6, with a floor of time and events), so a
function near a threshold can flip between two runs of the same drivers or suites. Two measurements A and B
of the same workloads, matched by function, give:

- the agreement of their labels where both have one, Cohen's kappa, and per-class and macro F1 of B's labels
  scored against A's (per-class F1 is symmetric in A and B);
- for each class of A, what B made of those functions (the same class, another, or too little evidence);
- the shipped classifier (or ``--weights``) on the functions the kept corpus holds out for testing: scored
  against A, against B, and on the functions both label alike.

Usage: python bench/label_retest.py A.jsonl[.gz] B.jsonl[.gz] [--corpus data/measured] [--weights DIR]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from crystalperf.models.evaluate import measured_scores, to_function
from crystalperf.models.measured import json_lines, measured_splits
from crystalperf.models.sparse import LABELS4, SparseClassifier

UNLABELLED = "none"


def methods(path: Path) -> dict[str, dict[str, Any]]:
    """One row per measured method (a JVM method's bytecode twin is the same measurement), labelled or not."""
    rows: dict[str, dict[str, Any]] = {}
    for _number, _line, row in json_lines(path):
        if isinstance(row, dict) and "#" not in row.get("id", "#"):
            rows.setdefault(row["id"], row)
    return rows


def kappa(confusion: np.ndarray) -> float:
    total = confusion.sum()
    observed = np.trace(confusion) / total
    expected = float((confusion.sum(0) * confusion.sum(1)).sum()) / total**2
    return (observed - expected) / (1 - expected) if expected < 1 else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path, help="the first measurement (e.g. the kept corpus's file)")
    parser.add_argument("b", type=Path, help="a second measurement of the same workloads")
    parser.add_argument("--corpus", type=Path, default=Path("data/measured"),
                        help="the kept corpus whose held-out test split the classifier is scored on")
    parser.add_argument("--weights", type=Path, default=None, help="sparse weights (default: the shipped ones)")
    args = parser.parse_args()
    a, b = methods(args.a), methods(args.b)
    both = sorted(set(a) & set(b))
    print(f"methods: A {len(a)}, B {len(b)}, in both {len(both)}")

    kinds = [*LABELS4, UNLABELLED]
    table: Counter[tuple[str, str]] = Counter((a[i]["label"] or UNLABELLED, b[i]["label"] or UNLABELLED) for i in both)
    print("\nA's label (rows) against B's (columns), methods measured by both:")
    print("| A \\ B | " + " | ".join(kinds) + " |")
    print("|---|" + "---:|" * len(kinds))
    for x in kinds:
        print(f"| {x} | " + " | ".join(str(table[x, y]) for y in kinds) + " |")

    confusion = np.array([[table[x, y] for y in LABELS4] for x in LABELS4], dtype=float)
    labelled = int(confusion.sum())
    f1 = [2 * confusion[k, k] / (confusion[k].sum() + confusion[:, k].sum())
          if confusion[k].sum() + confusion[:, k].sum() else 0.0 for k in range(len(LABELS4))]
    print(f"\nlabelled by both: {labelled}; agreement {np.trace(confusion) / labelled:.3f}, "
          f"Cohen's kappa {kappa(confusion):.3f}, macro-F1 of one against the other {np.mean(f1):.3f} "
          f"(F1 {' / '.join(f'{c} {v:.3f}' for c, v in zip(LABELS4, f1, strict=True))})")
    for x in LABELS4:
        row = {y: table[x, y] for y in kinds}
        total = sum(row.values())
        if total:
            print(f"  A {x:8s} ({total:5d}): B the same {row[x] / total:.0%}, another class "
                  f"{sum(v for y, v in row.items() if y not in (x, UNLABELLED)) / total:.0%}, "
                  f"unlabelled {row[UNLABELLED] / total:.0%}")

    _train, _val, test = measured_splits(args.corpus)
    held_out = {r["id"] for r in test}
    rows = [i for i in both if i in held_out and a[i]["label"] and b[i]["label"]]
    if not rows:
        print("\nno held-out test function is labelled by both measurements")
        return
    classifier = SparseClassifier(args.weights)
    probs = classifier.predict_proba4([to_function(a[i]) for i in rows])
    print(f"\n{classifier.version} on the {len(rows)} held-out test methods labelled by both "
          "(4-class accuracy / macro-F1):")
    same = np.array([a[i]["label"] == b[i]["label"] for i in rows])
    for name, records, mask in (
        ("against A", [a[i] for i in rows], np.ones(len(rows), dtype=bool)),
        ("against B", [b[i] for i in rows], np.ones(len(rows), dtype=bool)),
        (f"where A and B agree ({int(same.sum())})", [a[i] for i, s in zip(rows, same, strict=True) if s], same),
    ):
        s = measured_scores(probs[mask], records)["4-class"]
        counts = Counter(r["label"] for r in records)
        print(f"  {name}: {s['accuracy']:.3f} / {s['macro_f1']:.3f}  "
              f"({', '.join(f'{c} {counts[c]}' for c in LABELS4)})")


if __name__ == "__main__":
    main()
