"""Seed ensembles and validation-fitted class biases for the sparse classifier, scored next to one seed, the
shipped weights and the keyword baseline on the measured corpus's held-out libraries and on the hand-labelled
framework set (docs/models.md, "What we tried and why it lost").

A linear model's logits are linear in its weights, so the mean of K seeds' logits is the logits of the model
whose table and bias are the K seeds' means: an ensemble of linear models costs nothing at inference and has
the size of one. Class biases (added to the logits, one per class) are fitted on the validation split only,
by coordinate ascent of its macro-F1; nothing is fitted on test or on the framework set. Needs torch.

Usage: python bench/classifier_ensemble.py --measured data/measured --out OUT [--seeds 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.models import framework_eval as fe
from crystalperf.models.evaluate import _padded4, keyword_proba, measured_scores, to_function
from crystalperf.models.measured import measured_splits
from crystalperf.models.sparse import (
    CONFIG_FILE,
    MODEL_FILE,
    FourClassView,
    SparseClassifier,
    default_weights_dir,
)
from crystalperf.models.sparse_train import macro_f1, train_sparse_classifier


def average_weights(dirs: list[Path], out: Path, bias: np.ndarray | None = None) -> Path:
    """The linear model whose table and bias are the means of ``dirs``' (same training rows, same keys)."""
    arrays = [dict(np.load(d / MODEL_FILE)) for d in dirs]
    keys = arrays[0]["keys"]
    if any(not np.array_equal(a["keys"], keys) or "hidden_bias" in a for a in arrays):
        raise ValueError("only linear models trained on the same rows can be averaged")
    table = np.mean([a["table"].astype(np.float32) for a in arrays], axis=0).astype(np.float16)
    out_bias = np.mean([a["out_bias"] for a in arrays], axis=0).astype(np.float32)
    if bias is not None:
        out_bias = out_bias + bias.astype(np.float32)
    out.mkdir(parents=True, exist_ok=True)
    with (out / MODEL_FILE).open("wb") as fh:
        np.savez_compressed(fh, keys=keys, table=table, out_bias=out_bias)
    shutil.copy(dirs[0] / CONFIG_FILE, out / CONFIG_FILE)
    return out


BIAS_GRID = np.linspace(-2, 2, 41)


def fit_biases(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-class logit offsets maximising macro-F1 on (logits, y), by coordinate ascent; cpu's stays 0."""
    grid = BIAS_GRID
    bias = np.zeros(logits.shape[1])
    best = macro_f1(y, (logits + bias).argmax(1))
    for _round in range(3):
        for c in range(1, logits.shape[1]):
            for b in grid:
                trial = bias.copy()
                trial[c] = b
                score = macro_f1(y, (logits + trial).argmax(1))
                if score > best + 1e-9:
                    best, bias = score, trial
    return bias


def logits_of(weights: Path, records: list[dict[str, Any]]) -> np.ndarray:
    probs = SparseClassifier(weights).predict_proba4([to_function(r) for r in records])
    return np.log(np.clip(probs, 1e-9, 1.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measured", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    args = parser.parse_args()
    train, val, test = measured_splits(args.measured, seed=0)
    print("train", dict(Counter(r["label"] for r in train)), "val", dict(Counter(r["label"] for r in val)),
          "test", dict(Counter(r["label"] for r in test)))
    labels = ["cpu", "disk", "network", "waiting"]
    y_val = np.asarray([labels.index(r["label"]) for r in val])
    seeds = []
    for seed in range(args.seeds):
        d = args.out / f"seed{seed}"
        if not (d / MODEL_FILE).exists():
            train_sparse_classifier(train, val, d, weight_decay=args.weight_decay, seed=seed)
        seeds.append(d)
    variants: dict[str, Path] = {"shipped": default_weights_dir(), "seed0": seeds[0]}
    variants[f"mean of {len(seeds)} seeds"] = average_weights(seeds, args.out / "ensemble")
    for name in ("seed0", f"mean of {len(seeds)} seeds"):
        bias = fit_biases(logits_of(variants[name], val), y_val)
        print(f"{name}: biases fitted on validation {np.round(bias, 2).tolist()}")
        variants[f"{name} + val biases"] = average_weights([variants[name]], args.out / f"{name.split()[0]}-bias", bias)
    functions = fe.load_set()
    report: dict[str, Any] = {}
    rows = []
    for name, weights in [*variants.items(), ("keyword", None)]:
        per: dict[str, Any] = {}
        for part, recs in (("val", val), ("test", test)):
            if weights is None:
                probs = _padded4(keyword_proba([to_function(r) for r in recs]))
            else:
                probs = SparseClassifier(weights).predict_proba4([to_function(r) for r in recs])
            s = measured_scores(probs, recs)["4-class"]
            per[part] = {"accuracy": s["accuracy"], "macro_f1": s["macro_f1"],
                         "f1": {c: round(v["f1"], 3) for c, v in s["per_class"].items()}}
        classifier = KeywordClassifier() if weights is None else FourClassView(SparseClassifier(weights))
        ev = fe.evaluate(classifier, functions, name)
        per["frameworks"] = {g: (round(sc.accuracy, 3), round(sc.macro_f1, 3)) for g, sc in ev.four.items()}
        report[name] = per
        fw = per["frameworks"]
        rows.append(f"| {name} | {per['val']['macro_f1']:.3f} | {per['test']['accuracy']:.3f} / "
                    f"{per['test']['macro_f1']:.3f} | {' / '.join(f'{v:.3f}' for v in per['test']['f1'].values())} | "
                    f"{fw['all'][0]:.3f} / {fw['all'][1]:.3f} ({fw['spark'][0]:.3f} / {fw['flink'][0]:.3f} / "
                    f"{fw['tensorflow'][0]:.3f}) |")
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    print("| weights | val macro-F1 | test acc / macro-F1 | test F1 cpu / disk / network / waiting | "
          "frameworks acc / macro-F1 (Spark / Flink / TF acc) |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
