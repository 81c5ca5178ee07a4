"""Would more measured libraries close the gap? The shipped recipe trained on growing shares of the training
libraries, scored on the same held-out test libraries and the framework set (docs/models.md, "More of the
same data helps slowly").

Whole libraries are drawn (a seeded hash per draw), as new measured libraries would arrive; the validation
split and the recipe (weight decay 1e-4, balanced classes, best epoch by validation macro-F1) are the shipped
ones. Each fraction below 1 is drawn ``--draws`` times; the mean and the range are printed. Scores are 4-class
accuracy / macro-F1 on the test split and the framework set's accuracy as the core's seam sees it.

Usage: python bench/classifier_learning_curve.py [--measured data/measured] [--work DIR]
       [--fractions 0.25 0.5 0.75 1] [--draws 2]
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from crystalperf.models import framework_eval as fe
from crystalperf.models.evaluate import measured_scores, to_function
from crystalperf.models.measured import measured_splits
from crystalperf.models.sparse_train import train_sparse_classifier


def drawn(libraries: list[str], fraction: float, draw: int) -> set[str]:
    """``fraction`` of the libraries (at least one), the same ones for the same draw at any fraction below."""
    order = sorted(libraries, key=lambda lib: hashlib.sha256(f"{draw}\0{lib}".encode()).digest())
    return set(order[: max(1, round(fraction * len(order)))])


def framework_seam_accuracy(classifier: Any, framework: list[fe.EvalFunction]) -> float:
    probs = classifier.predict_proba4([f.source() for f in framework])
    truth = np.asarray([fe.CLASSES.index(f.label) for f in framework])
    return float(np.mean(fe.seam_classes(framework, probs) == truth))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measured", type=Path, default=Path("data/measured"))
    parser.add_argument("--work", type=Path, help="where the trained weights go (default: a temporary directory)")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5, 0.75, 1.0])
    parser.add_argument("--draws", type=int, default=2)
    args = parser.parse_args()
    train, val, test = measured_splits(args.measured)
    framework = fe.load_set()
    test_functions = [to_function(r) for r in test]
    libraries = sorted({r["library"] for r in train})
    work = args.work or Path(tempfile.mkdtemp(prefix="crystalperf-curve-"))
    print(f"{len(train)} training functions in {len(libraries)} libraries; test {len(test)}, "
          f"framework set {len(framework)}")
    print("| training libraries | functions (disk / network / waiting) | test acc | test macro-F1 | "
          "test F1 cpu / disk / network / waiting | framework set (seam) acc |")
    print("|---|---|---|---|---|---|")
    for fraction in args.fractions:
        results = []
        for draw in range(args.draws if fraction < 1 else 1):
            chosen = drawn(libraries, fraction, draw)
            subset = [r for r in train if r["library"] in chosen]
            classifier = train_sparse_classifier(subset, val, work / f"f{fraction}-d{draw}", weight_decay=1e-4)
            s = measured_scores(classifier.predict_proba4(test_functions), test)["4-class"]
            f1 = [v["f1"] for v in s["per_class"].values()]
            minority = [sum(1 for r in subset if r["label"] == c) for c in ("disk", "network", "waiting")]
            results.append((len(chosen), len(subset), minority, s["accuracy"], s["macro_f1"], f1,
                            framework_seam_accuracy(classifier, framework)))

        def span(i: int, results: list[tuple] = results) -> str:
            values = [r[i] for r in results]
            mean = sum(values) / len(values)
            return f"{mean:.3f}" if len(values) == 1 else f"{mean:.3f} ({min(values):.3f}–{max(values):.3f})"

        f1_mean = np.mean([r[5] for r in results], axis=0)
        minority_mean = np.mean([r[2] for r in results], axis=0)
        print(f"| {fraction:.0%} ({np.mean([r[0] for r in results]):.0f}) | "
              f"{np.mean([r[1] for r in results]):.0f} ({' / '.join(f'{m:.0f}' for m in minority_mean)}) | "
              f"{span(3)} | {span(4)} | {' / '.join(f'{v:.3f}' for v in f1_mean)} | {span(6)} |", flush=True)


if __name__ == "__main__":
    main()
