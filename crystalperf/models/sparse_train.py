"""Training of the sparse classifier (torch, extra ``models``); inference is numpy (``sparse``).

Seeded and single-threaded with deterministic algorithms, so two runs on the same records write
byte-identical weights. The epoch with the best validation macro-F1 is kept; nothing is fitted on test.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from crystalperf.models.evaluate import to_function
from crystalperf.models.features import HASH_BITS, batch_features, hashed_features
from crystalperf.models.framework_eval import EvalFunction, set_sha256
from crystalperf.models.frameworks import framework_of
from crystalperf.models.sparse import (
    CONFIG_FILE,
    KEYWORD_BLEND_WEIGHTS,
    LABELS4,
    MODEL_FILE,
    SparseClassifier,
    blend_keyword,
    fit_confidence,
    fit_share_temperature,
    keyword_log_vectors,
)

FEATURE_VERSION = 1  # bump when features.py changes what a function's features are


class SparseModule(nn.Module):
    """Embedding bag over known buckets, then a ReLU hidden layer (``hidden > 0``) or nothing (linear)."""

    def __init__(self, buckets: int, hidden: int, classes: int = len(LABELS4)) -> None:
        super().__init__()
        self.hidden = hidden
        self.bag = nn.EmbeddingBag(buckets, hidden or classes, mode="sum")
        if hidden:
            self.hidden_bias = nn.Parameter(torch.zeros(hidden))
            self.out = nn.Linear(hidden, classes)
            self.dropout = nn.Dropout(0.2)
        else:
            self.out_bias = nn.Parameter(torch.zeros(classes))
        nn.init.normal_(self.bag.weight, std=0.01)

    def forward(self, rows: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        bag = self.bag(rows, offsets, per_sample_weights=weights)
        if not self.hidden:
            return bag + self.out_bias
        return self.out(self.dropout(torch.relu(bag + self.hidden_bias)))

    def export(self, keys: np.ndarray, path: Path) -> None:
        """``model.npz``: float16 rows of the buckets seen in training, float32 for the small rest."""
        arrays: dict[str, np.ndarray] = {
            "keys": keys.astype(np.int32),
            "table": self.bag.weight.detach().numpy().astype(np.float16),
        }
        if self.hidden:
            arrays["hidden_bias"] = self.hidden_bias.detach().numpy().astype(np.float32)
            arrays["out_weight"] = self.out.weight.detach().numpy().T.astype(np.float32).copy()
            arrays["out_bias"] = self.out.bias.detach().numpy().astype(np.float32)
        else:
            arrays["out_bias"] = self.out_bias.detach().numpy().astype(np.float32)
        with path.open("wb") as fh:  # np.savez_compressed is deterministic given the same arrays
            np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]

    @classmethod
    def from_export(cls, weights_dir: Path) -> tuple[SparseModule, np.ndarray]:
        """The torch module with the exported (float16-rounded) weights: what numpy must reproduce."""
        with np.load(weights_dir / MODEL_FILE) as data:
            arrays = {name: data[name] for name in data.files}
        hidden = int(arrays["hidden_bias"].shape[0]) if "hidden_bias" in arrays else 0
        module = cls(int(arrays["table"].shape[0]), hidden)
        with torch.no_grad():
            module.bag.weight.copy_(torch.from_numpy(arrays["table"].astype(np.float32)))
            if hidden:
                module.hidden_bias.copy_(torch.from_numpy(arrays["hidden_bias"]))
                module.out.weight.copy_(torch.from_numpy(arrays["out_weight"].T.copy()))
                module.out.bias.copy_(torch.from_numpy(arrays["out_bias"]))
            else:
                module.out_bias.copy_(torch.from_numpy(arrays["out_bias"]))
        module.eval()
        return module, arrays["keys"].astype(np.int64)


def _featurise(records: Sequence[dict[str, Any]]) -> list[tuple[list[int], list[float]]]:
    return [hashed_features(to_function(r)) for r in records]


def _batch(
    feats: Sequence[tuple[list[int], list[float]]], key_row: dict[int, int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows: list[int] = []
    weights: list[float] = []
    offsets: list[int] = []
    for idx, val in feats:
        offsets.append(len(rows))
        for i, v in zip(idx, val, strict=True):
            row = key_row.get(i)
            if row is not None:
                rows.append(row)
                weights.append(v)
    return (
        torch.tensor(rows, dtype=torch.long),
        torch.tensor(offsets, dtype=torch.long),
        torch.tensor(weights, dtype=torch.float32),
    )


# The most macro-F1 a keyword blend fitted on hand labels may cost the language's measured validation rows.
BLEND_VALIDATION_TOLERANCE = 0.02


def macro_f1(y: np.ndarray, pred: np.ndarray) -> float:
    f1s = []
    for c in np.unique(y):
        tp = float(((pred == c) & (y == c)).sum())
        fp = float(((pred == c) & (y != c)).sum())
        fn = float(((pred != c) & (y == c)).sum())
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(f1s)) if f1s else 0.0


def blend_scores(
    logits: np.ndarray, keyword_logs: np.ndarray, labels: np.ndarray, languages: Sequence[str]
) -> dict[str, dict[float, float]]:
    """Per language, the macro-F1 of its rows at each :data:`KEYWORD_BLEND_WEIGHTS` value of the keyword blend."""
    langs = np.asarray(languages)
    scores: dict[str, dict[float, float]] = {}
    for language in sorted(set(languages)):
        rows = langs == language
        scores[language] = {
            weight: macro_f1(labels[rows], blend_keyword(logits[rows], keyword_logs[rows],
                                                         np.full(int(rows.sum()), weight, np.float32)).argmax(1))
            for weight in KEYWORD_BLEND_WEIGHTS
        }
    return scores


def best_weight(scores: dict[float, float], allowed: Sequence[float] = KEYWORD_BLEND_WEIGHTS) -> float:
    """The allowed weight of the best score (ties: the smaller weight)."""
    best = (-1.0, 0.0)
    for weight in sorted(allowed):
        if scores[weight] > best[0] + 1e-12:
            best = (scores[weight], weight)
    return best[1]


def within_tolerance(scores: dict[float, float], tolerance: float = BLEND_VALIDATION_TOLERANCE) -> list[float]:
    """The weights that cost these rows at most ``tolerance`` of macro-F1 against no blend."""
    return [w for w, score in scores.items() if score >= scores[0.0] - tolerance]


def fit_framework_blend(model: SparseClassifier, dev: Sequence[EvalFunction]) -> dict[str, dict[str, float]]:
    """Per framework and language of the hand-labelled functions, the keyword weight of that framework's functions:
    the best on them, unbounded by the measured validation rows, which never hold a framework's function
    (``frameworks.FORBIDDEN``) and so cannot say what a weight costs there."""
    by_framework: dict[str, list[EvalFunction]] = {}
    for function in dev:
        framework = framework_of(function.qualified_name)
        if framework is not None:
            by_framework.setdefault(framework, []).append(function)
    fitted: dict[str, dict[str, float]] = {}
    for framework, functions in sorted(by_framework.items()):
        sources = [f.source() for f in functions]
        scores = blend_scores(model.logits_from_features(*batch_features(sources)), keyword_log_vectors(sources),
                              np.asarray([LABELS4.index(f.label) for f in functions]), [f.language for f in functions])
        fitted[framework] = {language: best_weight(by_weight) for language, by_weight in scores.items()}
    return fitted


def _write_config(out_dir: Path, config: dict[str, Any]) -> None:
    (out_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def train_sparse_classifier(
    train: Sequence[dict[str, Any]],
    val: Sequence[dict[str, Any]],
    out_dir: Path,
    *,
    hidden: int = 0,
    epochs: int = 12,
    lr: float = 0.02,
    weight_decay: float = 1e-6,
    token_dropout: float = 0.2,
    min_count: int = 1,
    batch_size: int = 64,
    seed: int = 0,
    class_weight_power: float = 1.0,
    progress: bool = False,
    extra_config: dict[str, Any] | None = None,
    share_rows: Sequence[dict[str, Any]] | None = None,
    keyword_blend: bool = False,
    blend_dev: Sequence[EvalFunction] = (),
) -> SparseClassifier:
    """Train on ``train`` (records with ``label`` in cpu/disk/network/waiting), keep the epoch with the best
    validation macro-F1, write ``model.npz`` + ``config.json`` into ``out_dir``, return the numpy classifier.
    ``share_rows`` (measured functions of the validation libraries with ``busy_shares``,
    ``measured.share_rows``) fit the share temperature ``classify`` sharpens its vectors with. The validation rows
    also fit what the exported model's confidence means (``confidence``) and, with ``keyword_blend``, per
    language, how much of the keyword counter's vector to add to the model's logits. ``blend_dev`` (hand-labelled
    functions and their labels) fits that weight instead for the languages it has: measured labels are a function's
    time with all it calls, hand labels its own work, which is what a report names next to a function. Its functions
    of a framework also fit that framework's own weight (:func:`fit_framework_blend`)."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # summation order must not depend on the machine's cores
    try:
        train_feats = _featurise(train)
        val_feats = _featurise(val)
        seen: Counter[int] = Counter(i for idx, _ in train_feats for i in idx)
        keys = np.asarray(sorted(k for k, c in seen.items() if c >= min_count), dtype=np.int64)
        key_row = {int(k): r for r, k in enumerate(keys)}
        y = torch.tensor([LABELS4.index(r["label"]) for r in train], dtype=torch.long)
        # Rows may carry a "weight" (module-rule rows mixed into measured ones weigh less).
        sample_weight = torch.tensor([float(r.get("weight", 1.0)) for r in train], dtype=torch.float32)
        y_val = np.asarray([LABELS4.index(r["label"]) for r in val])
        counts = torch.bincount(y, weights=sample_weight, minlength=len(LABELS4)).float()
        # Class weights over the classes present, balanced to the power ``class_weight_power``: at 1 a rare
        # class (waiting) is not drowned out, but a function with no evidence either way lands on a near-uniform
        # prior instead of the common class (cpu, 80 % of measured functions); 0.5 keeps part of both.
        balanced = counts.sum() / (counts.clamp(min=1) * (counts > 0).sum())
        class_weight = torch.where(counts > 0, balanced ** class_weight_power, 0.0)
        module = SparseModule(len(keys), hidden)
        optimiser = torch.optim.Adam(module.parameters(), lr=lr, weight_decay=weight_decay)
        loss_fn = nn.CrossEntropyLoss(weight=class_weight, reduction="none")
        generator = torch.Generator().manual_seed(seed)
        val_batch = _batch(val_feats, key_row)
        best: tuple[float, int, dict[str, torch.Tensor]] = (-1.0, -1, {})
        for epoch in range(epochs):
            module.train()
            order = torch.randperm(len(train_feats), generator=generator).tolist()
            total = 0.0
            for start in range(0, len(order), batch_size):
                chosen = order[start : start + batch_size]
                rows, offsets, weights = _batch([train_feats[i] for i in chosen], key_row)
                if token_dropout:
                    keep = torch.rand(weights.shape, generator=generator) >= token_dropout
                    weights = weights * keep / (1.0 - token_dropout)
                optimiser.zero_grad()
                per_row = loss_fn(module(rows, offsets, weights), y[chosen]) * sample_weight[chosen]
                loss = per_row.sum() / (class_weight[y[chosen]] * sample_weight[chosen]).sum()
                loss.backward()
                optimiser.step()
                total += float(loss.detach()) * len(chosen)
            module.eval()
            with torch.no_grad():
                pred = module(*val_batch).argmax(1).numpy() if len(val) else np.zeros(0, dtype=int)
            score = macro_f1(y_val, pred) if len(val) else float(epoch)
            if progress:
                sys.stdout.write(
                    f"sparse epoch {epoch + 1}/{epochs}: train loss {total / len(order):.4f}, "
                    f"val macro-F1 {score:.4f}\n"
                )
            if score > best[0] + 1e-12:
                best = (score, epoch + 1, {k: v.clone() for k, v in module.state_dict().items()})
        module.load_state_dict(best[2])
        module.eval()
        out_dir.mkdir(parents=True, exist_ok=True)
        module.export(keys, out_dir / MODEL_FILE)
        config: dict[str, Any] = {
            "labels": list(LABELS4),
            "hash_bits": HASH_BITS,
            "feature_version": FEATURE_VERSION,
            "hidden": hidden,
            "buckets": len(keys),
            "training": {
                "functions": len(train),
                "validation_functions": len(val),
                "class_counts": {LABELS4[i]: round(c, 3) for i, c in enumerate(counts.tolist())},
                "epochs": epochs,
                "best_epoch": best[1],
                "validation_macro_f1": round(best[0], 6),
                "lr": lr,
                "weight_decay": weight_decay,
                "token_dropout": token_dropout,
                "min_count": min_count,
                "batch_size": batch_size,
                "seed": seed,
                "class_weight_power": class_weight_power,
                **(extra_config or {}),
            },
        }
        _write_config(out_dir, config)
        val_functions = [to_function(r) for r in val]
        blend: dict[str, float] = {}
        if (keyword_blend or blend_dev) and len(val):
            # on the exported model's numpy inference, which is what users run
            raw = SparseClassifier(out_dir)
            val_scores = blend_scores(raw.logits_from_features(*batch_features(val_functions)),
                                      keyword_log_vectors(val_functions), y_val, [f.language for f in val_functions])
        else:
            val_scores = {}
        if keyword_blend:
            blend = {language: best_weight(scores) for language, scores in val_scores.items()}
        if blend_dev:
            # The hand-labelled functions choose the weight; the measured validation rows of the language bound it:
            # a weight that costs them more than the tolerance is not taken, whatever the hand labels gain.
            dev = [f.source() for f in blend_dev]
            dev_scores = blend_scores(SparseClassifier(out_dir).logits_from_features(*batch_features(dev)),
                                      keyword_log_vectors(dev), np.asarray([LABELS4.index(f.label) for f in blend_dev]),
                                      [f.language for f in dev])
            for language, scores in dev_scores.items():
                allowed = within_tolerance(val_scores[language]) if language in val_scores else KEYWORD_BLEND_WEIGHTS
                blend[language] = best_weight(scores, allowed)
            framework_blend = fit_framework_blend(SparseClassifier(out_dir), blend_dev)
            if framework_blend:
                config["framework_keyword_blend"] = framework_blend
            config["training"]["keyword_blend_fit"] = {
                "functions": len(dev),
                "validation_tolerance": BLEND_VALIDATION_TOLERANCE,
                "sha256": set_sha256(blend_dev),
            }
        if blend or "framework_keyword_blend" in config:
            if blend:
                config["keyword_blend"] = blend
            _write_config(out_dir, config)
        # the fits below read the exported model's numpy inference (with its keyword blend), which is what users run;
        # neither changes the probabilities the other reads
        exported = SparseClassifier(out_dir)
        if share_rows:
            probs = exported.predict_proba([to_function(r) for r in share_rows])
            shares = np.asarray([r["busy_shares"] for r in share_rows], dtype=np.float64)
            temperature, before, after = fit_share_temperature(probs.astype(np.float64), shares)
            config["share_temperature"] = temperature
            config["training"]["share_fit"] = {"functions": len(share_rows), "error_unsharpened": round(before, 6),
                                               "error": round(after, 6)}
        if len(val):
            slope, intercept = fit_confidence(exported.predict_proba4(val_functions), y_val)
            config["confidence"] = {"slope": round(slope, 6), "intercept": round(intercept, 6),
                                    "functions": len(val)}
        _write_config(out_dir, config)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(False)
    return SparseClassifier(out_dir)
