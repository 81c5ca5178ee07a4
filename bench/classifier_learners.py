"""Other learners on the sparse classifier's own features and split (docs/models.md, "What we tried and why
it lost"): logistic regression and linear SVMs at several strengths, cosine nearest neighbours, and logistic
regression with the training libraries' unlabelled functions added as soft labels (their measured shares), each
scored like the shipped weights — validation and held-out test 4-class accuracy / macro-F1, and the framework set
as the seam sees it (plumbing rules for waiting, else the arg-max of cpu/disk/network).

Needs scikit-learn (installed with the ``models`` extra's dependencies). About 10 minutes on 2 cores.

Usage: python bench/classifier_learners.py [--measured data/measured]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.svm import LinearSVC

from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.models import framework_eval as fe
from crystalperf.models.evaluate import to_function
from crystalperf.models.features import HASH_BITS, batch_features
from crystalperf.models.measured import json_lines, measured_files, measured_splits
from crystalperf.models.sparse import LABELS4, SparseClassifier
from crystalperf.models.sparse_train import macro_f1


def matrix(functions: Sequence[FunctionSource]) -> sp.csr_matrix:
    indices, values, offsets = batch_features(functions)
    return sp.csr_matrix((np.asarray(values, dtype=np.float32), np.asarray(indices), np.asarray(offsets)),
                         shape=(len(functions), 1 << HASH_BITS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measured", type=Path, default=Path("data/measured"))
    args = parser.parse_args()
    train, val, test = measured_splits(args.measured)
    framework = fe.load_set()
    sets: dict[str, tuple[sp.csr_matrix, np.ndarray, list[FunctionSource]]] = {}
    for name, functions, labels in (
        ("train", [to_function(r) for r in train], [r["label"] for r in train]),
        ("val", [to_function(r) for r in val], [r["label"] for r in val]),
        ("test", [to_function(r) for r in test], [r["label"] for r in test]),
        ("frameworks", [f.source() for f in framework], [f.label for f in framework]),
    ):
        sets[name] = (matrix(functions), np.asarray([LABELS4.index(x) for x in labels]), functions)

    def line(name: str, scores: Callable[[str], np.ndarray]) -> None:
        cells = []
        for part in ("val", "test"):
            y, predicted = sets[part][1], scores(part).argmax(1)
            cells.append(f"{np.mean(predicted == y):.3f} / {macro_f1(y, predicted):.3f}")
        y, s = sets["frameworks"][1], scores("frameworks")
        seam = fe.seam_classes(framework, s)
        cells.append(f"{np.mean(seam == y):.3f} / {macro_f1(y, seam):.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)

    print("| learner | validation | test | framework set (seam) |\n|---|---|---|---|")
    shipped = SparseClassifier()
    line(f"shipped ({shipped.version})", lambda part: shipped.predict_proba4(sets[part][2]))
    x, y = sets["train"][0], sets["train"][1]
    models: list[tuple[str, Any, str]] = [
        *((f"logistic regression, balanced, C = {c}", LogisticRegression(C=c, class_weight="balanced",
                                                                         max_iter=3000), "predict_proba")
          for c in (1, 4, 16)),
        *((f"linear SVM, balanced, C = {c}", LinearSVC(C=c, class_weight="balanced"), "decision_function")
          for c in (0.1, 0.5)),
        *((f"nearest neighbours (cosine), k = {k}", KNeighborsClassifier(k, metric="cosine", weights="distance"),
           "predict_proba") for k in (3, 7, 15)),
    ]
    for name, model, method in models:
        model.fit(x, y)
        line(name, lambda part, m=model, f=method: getattr(m, f)(sets[part][0]))

    # Soft labels: the training libraries' functions with no label (no share reached 0.6, or little evidence),
    # each repeated once per class with its measured share of that class as the weight.
    held = {r["library"] for r in val + test}
    known = {r["id"] for r in train + val + test}
    soft = [row for path in measured_files(args.measured) for _n, _l, row in json_lines(path)
            if row.get("label") is None and row["library"] not in held and row["id"] not in known
            and row.get("shares") and (row.get("seconds") or 0) >= 0.001 and (row.get("events") or 0) >= 2]
    xs = matrix([to_function(r) for r in soft])
    shares = np.asarray([[r["shares"].get(c, 0.0) for c in LABELS4] for r in soft])
    class_weight = len(y) / (len(LABELS4) * np.bincount(y, minlength=len(LABELS4)))
    for weight in (0.3, 1.0):
        rows = sp.vstack([x] + [xs] * len(LABELS4))
        targets = np.concatenate([y] + [np.full(len(soft), c) for c in range(len(LABELS4))])
        sample_weight = np.concatenate([class_weight[y]] + [weight * shares[:, c] * class_weight[c]
                                                            for c in range(len(LABELS4))])
        keep = sample_weight > 0
        model = LogisticRegression(C=1, max_iter=3000).fit(rows[keep], targets[keep], sample_weight=sample_weight[keep])
        line(f"logistic regression + {len(soft)} unlabelled functions as soft labels, weight {weight}",
             lambda part, m=model: m.predict_proba(sets[part][0]))


if __name__ == "__main__":
    main()
