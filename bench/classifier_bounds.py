"""What the held-out macro-F1 is made of: the shipped weights' confusions on the measured test split, and the
score they would reach if one kind of error were gone (docs/models.md, "What the gap is made of").

A gain can only come from errors a better classifier would stop making. Each row below corrects one group of
test functions to their measured label, leaves every other prediction as it is, and rescores the whole split:

- every function of one language (what a perfect JVM classifier alone would give, e.g. from a call graph with
  receiver types, which only the JVM has);
- every cpu function (no false I/O or waiting on cpu-bound code) / every other function (full recall of the
  minority classes);
- only the minority functions predicted cpu / only the confusions among disk, network and waiting.

If no single row reaches a target, no improvement confined to that part of the problem can reach it.

Usage: python bench/classifier_bounds.py [--measured data/measured] [--weights DIR]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

from crystalperf.models.evaluate import scores, to_function
from crystalperf.models.measured import measured_splits
from crystalperf.models.sparse import LABELS4, SparseClassifier
from crystalperf.models.sparse_train import macro_f1

CPU = LABELS4.index("cpu")


def corrected(truth: np.ndarray, predicted: np.ndarray, group: np.ndarray) -> tuple[float, float]:
    """Accuracy and macro-F1 with the predictions of ``group`` (a boolean mask) replaced by the truth."""
    fixed = np.where(group, truth, predicted)
    return float(np.mean(fixed == truth)), macro_f1(truth, fixed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measured", type=Path, default=Path("data/measured"))
    parser.add_argument("--weights", type=Path, default=None, help="sparse weights (default: the shipped ones)")
    parser.add_argument("--libraries", type=int, default=10, help="how many libraries to list by their errors")
    args = parser.parse_args()
    _train, _val, test = measured_splits(args.measured)
    truth = np.asarray([LABELS4.index(r["label"]) for r in test])
    predicted = SparseClassifier(args.weights).predict_proba4([to_function(r) for r in test]).argmax(1)
    language = np.asarray([r["language"] for r in test])
    per_class = scores(truth, predicted, LABELS4)["per_class"]
    print(f"{len(test)} held-out test functions; rows: measured label, columns: predicted")
    print("| | " + " | ".join(LABELS4) + " | recall |")
    print("|---|" + "---:|" * (len(LABELS4) + 1))
    for i, name in enumerate(LABELS4):
        counts = [int(np.sum((truth == i) & (predicted == j))) for j in range(len(LABELS4))]
        print(f"| {name} | " + " | ".join(map(str, counts)) + f" | {per_class[name]['recall']:.3f} |")
    print("| precision | " + " | ".join(f"{per_class[name]['precision']:.3f}" for name in LABELS4) + " | |")
    print()
    minority = truth != CPU
    groups: list[tuple[str, np.ndarray]] = [("nothing (the shipped weights)", np.zeros(len(test), bool))]
    groups += [(f"every {lang} function", language == lang) for lang in sorted(set(language))]
    groups += [("every cpu function (no false disk, network or waiting)", ~minority),
               ("every disk, network and waiting function (full recall)", minority),
               ("only disk, network and waiting functions predicted cpu", minority & (predicted == CPU)),
               ("only confusions among disk, network and waiting", minority & (predicted != CPU))]
    print("| corrected to the measured label | functions | accuracy | macro-F1 |")
    print("|---|---:|---:|---:|")
    for name, group in groups:
        accuracy, f1 = corrected(truth, predicted, group)
        print(f"| {name} | {int(np.sum(group & (predicted != truth)))} errors of {int(group.sum())} | "
              f"{accuracy:.3f} | {f1:.3f} |")
    print()
    errors = Counter(r["library"] for r, t, p in zip(test, truth, predicted, strict=True) if t != p)
    sizes = Counter(r["library"] for r in test)
    print(f"the {args.libraries} test libraries with the most errors (of {len(sizes)}; "
          f"{int(np.sum(truth != predicted))} errors in all):")
    for library, count in errors.most_common(args.libraries):
        print(f"  {library}: {count} of {sizes[library]}")


if __name__ == "__main__":
    main()
