"""How far the held-out scores would move with other test libraries: a bootstrap over the test split's
libraries (docs/models.md, "How precise the held-out scores are").

The held-out test split is whole libraries, and a few libraries hold most of each minority class (one web
server's methods, one mail library's functions), so its macro-F1 depends on which libraries happened to be
held out. Resampling the test libraries with replacement (``--draws`` times, seeded) gives a 95 % interval
for the shipped weights' and the keyword baseline's 4-class accuracy and macro-F1, and for the difference
between them; ``--other`` adds the difference to another set of sparse weights (is a variant's gain more
than the choice of libraries?).

Usage: python bench/classifier_bootstrap.py [--measured data/measured] [--draws 1000] [--other WEIGHTS]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np

from crystalperf.models.evaluate import _padded4, keyword_proba, to_function
from crystalperf.models.measured import measured_splits
from crystalperf.models.sparse import LABELS4, SparseClassifier
from crystalperf.models.sparse_train import macro_f1


def interval(values: np.ndarray) -> str:
    low, high = np.percentile(values, [2.5, 97.5])
    return f"{low:.3f}–{high:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measured", type=Path, default=Path("data/measured"))
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--other", type=Path, help="another sparse weights directory to compare with the shipped one")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    _train, _val, test = measured_splits(args.measured)
    functions = [to_function(r) for r in test]
    truth = np.asarray([LABELS4.index(r["label"]) for r in test])
    predictions = {"shipped": SparseClassifier().predict_proba4(functions).argmax(1),
                   "keyword": _padded4(keyword_proba(functions)).argmax(1)}
    if args.other:
        predictions["other"] = SparseClassifier(args.other).predict_proba4(functions).argmax(1)
    rows_of: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(test):
        rows_of[r["library"]].append(i)
    libraries = sorted(rows_of)
    rng = np.random.default_rng(args.seed)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in predictions}
    for _ in range(args.draws):
        chosen = np.concatenate([rows_of[libraries[i]] for i in rng.integers(0, len(libraries), len(libraries))])
        for name, predicted in predictions.items():
            samples[name].append((float(np.mean(predicted[chosen] == truth[chosen])),
                                  macro_f1(truth[chosen], predicted[chosen])))
    print(f"{len(test)} test functions in {len(libraries)} libraries, {args.draws} resamples of the libraries")
    print("| classifier | accuracy (95 % interval) | macro-F1 (95 % interval) |")
    print("|---|---|---|")
    for name, predicted in predictions.items():
        s = np.asarray(samples[name])
        print(f"| {name} | {np.mean(predicted == truth):.3f} ({interval(s[:, 0])}) | "
              f"{macro_f1(truth, predicted):.3f} ({interval(s[:, 1])}) |")
    shipped = np.asarray(samples["shipped"])
    for name in predictions:
        if name != "shipped":
            gap = shipped - np.asarray(samples[name])
            print(f"shipped minus {name}: accuracy {interval(gap[:, 0])}, macro-F1 {interval(gap[:, 1])}")


if __name__ == "__main__":
    main()
