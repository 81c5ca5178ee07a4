"""Gradient-boosted trees on the sparse classifier's features, alone and averaged with the shipped weights
(docs/models.md, "What we tried and why it lost").

A linear model cannot say "``read`` on a ``Socket`` is network, ``read`` on a ``File`` is disk": it adds the
evidence of each feature. Trees split on conjunctions, so they are the obvious test of whether the features
hold more than the linear model takes from them. The same hashed features (``features.hashed_features``;
buckets seen in at least three training functions), the same split, balanced class weights; the number of
rounds, and the mixing weight of the average, chosen on validation macro-F1 only. Needs ``lightgbm``
(``pip install lightgbm``; not a dependency of crystalperf).

Usage: python bench/classifier_trees.py [--measured data/measured] [--leaves 15 31 63]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.models import framework_eval as fe
from crystalperf.models.evaluate import measured_scores, to_function
from crystalperf.models.features import HASH_BITS, hashed_features
from crystalperf.models.measured import measured_splits
from crystalperf.models.sparse import LABELS4, SparseClassifier
from crystalperf.models.sparse_train import macro_f1

ROUNDS = tuple(range(50, 801, 50))
MIXES = (0.0, 0.3, 0.5, 0.7, 1.0)


def matrix(functions: Sequence[FunctionSource]) -> sp.csr_matrix:
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for i, function in enumerate(functions):
        idx, v = hashed_features(function)
        rows.extend([i] * len(idx))
        cols.extend(idx)
        values.extend(v)
    return sp.csr_matrix((values, (rows, cols)), shape=(len(functions), 1 << HASH_BITS), dtype=np.float32)


def main() -> None:
    import lightgbm as lgb

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measured", type=Path, default=Path("data/measured"))
    parser.add_argument("--leaves", type=int, nargs="+", default=[15, 31, 63])
    parser.add_argument("--min-functions", type=int, default=3, help="keep buckets seen in this many training functions")
    args = parser.parse_args()
    train, val, test = measured_splits(args.measured)
    framework = fe.load_set()
    sets = {"train": [to_function(r) for r in train], "val": [to_function(r) for r in val],
            "test": [to_function(r) for r in test], "framework": [f.source() for f in framework]}
    x = {name: matrix(functions) for name, functions in sets.items()}
    seen_in = np.asarray((x["train"] > 0).sum(0)).ravel()
    keep = np.flatnonzero(seen_in >= args.min_functions)
    x = {name: m[:, keep].tocsr() for name, m in x.items()}
    y_train = np.asarray([LABELS4.index(r["label"]) for r in train])
    y_val = np.asarray([LABELS4.index(r["label"]) for r in val])
    y_framework = np.asarray([fe.CLASSES.index(f.label) for f in framework])
    counts = np.bincount(y_train, minlength=len(LABELS4))
    weight = (len(y_train) / (len(LABELS4) * counts))[y_train]
    shipped = SparseClassifier()
    linear = {name: shipped.predict_proba4(functions) for name, functions in sets.items() if name != "train"}
    print(f"{len(keep)} feature buckets; train {len(train)}, val {len(val)}, test {len(test)}, "
          f"framework set {len(framework)}")
    print("| model | validation macro-F1 | test acc / macro-F1 | test F1 cpu / disk / network / waiting | "
          "framework set (seam): all, Spark / Flink / TF |")
    print("|---|---:|---|---|---|")

    def row(name: str, probs: dict[str, np.ndarray]) -> None:
        s = measured_scores(probs["test"], test)["4-class"]
        seam = fe.seam_classes(framework, probs["framework"])
        per = " / ".join(f"{np.mean((seam == y_framework)[[f.framework == k for f in framework]]):.3f}"
                         for k in fe.FRAMEWORKS)
        f1 = " / ".join(f"{v['f1']:.3f}" for v in s["per_class"].values())
        print(f"| {name} | {macro_f1(y_val, probs['val'].argmax(1)):.3f} | {s['accuracy']:.3f} / {s['macro_f1']:.3f} | "
              f"{f1} | {np.mean(seam == y_framework):.3f}, {per} |", flush=True)

    row("shipped (linear)", linear)
    for leaves in args.leaves:
        started = time.monotonic()
        params = {"objective": "multiclass", "num_class": len(LABELS4), "num_leaves": leaves, "learning_rate": 0.05,
                  "feature_fraction": 0.3 if leaves < 63 else 0.2, "min_data_in_leaf": 5, "lambda_l2": 1.0,
                  "bagging_fraction": 0.8, "bagging_freq": 1, "seed": 0, "num_threads": 2, "verbose": -1}
        booster = lgb.train(params, lgb.Dataset(x["train"], y_train, weight=weight), num_boost_round=max(ROUNDS))
        rounds = max(ROUNDS, key=lambda n: (macro_f1(y_val, booster.predict(x["val"], num_iteration=n).argmax(1)), -n))
        trees = {name: booster.predict(x[name], num_iteration=rounds) for name in linear}
        mix = max(MIXES, key=lambda a: macro_f1(y_val, (a * trees["val"] + (1 - a) * linear["val"]).argmax(1)))
        row(f"trees, {leaves} leaves, {rounds} rounds ({time.monotonic() - started:.0f} s)", trees)
        row(f"  averaged with the shipped weights, trees' weight {mix:g}",
            {name: mix * trees[name] + (1 - mix) * linear[name] for name in linear})


if __name__ == "__main__":
    main()
