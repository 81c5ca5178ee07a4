"""Evaluation of the classifiers on held-out libraries (paper Table 1, Fig. 9, Table 2).

Scores the code, doc and combined classifiers and the keyword-count baseline on the same records:
accuracy, per-class precision/recall/F1 and macro-F1; also on the "hard" subset whose names carry no
resource word; label-noise robustness by retraining the code classifier on flipped labels; LIME top
words per class.
"""

from __future__ import annotations

import keyword
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crystalperf.core.attribution.classify import (
    DISK_WORDS,
    NETWORK_WORDS,
    FunctionSource,
    KeywordClassifier,
    subtokens,
)
from crystalperf.models import LABELS


def to_function(record: dict[str, Any]) -> FunctionSource:
    return FunctionSource(
        qualified_name=record.get("qualified_name") or record.get("id", "?"),
        language=record["language"],
        code=record.get("code", ""),
        doc=record.get("doc", "") or "",
        origin=record.get("origin") or "source",
    )


def scores(y_true: Sequence[int], y_pred: Sequence[int], labels: Sequence[str] = LABELS) -> dict[str, Any]:
    """Accuracy, macro-F1 (over the classes present in ``y_true``) and per-class precision/recall/F1/support."""
    t = np.asarray(y_true)
    p = np.asarray(y_pred)
    per_class = {}
    f1s = []
    for i, label in enumerate(labels):
        tp = int(((p == i) & (t == i)).sum())
        fp = int(((p == i) & (t != i)).sum())
        fn = int(((p != i) & (t == i)).sum())
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[label] = {
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "support": int((t == i).sum()),
        }
        if (t == i).any():
            f1s.append(f1)
    return {
        "n": int(t.size),
        "accuracy": float((t == p).mean()) if t.size else 0.0,
        "macro_f1": float(np.mean(f1s)) if f1s else 0.0,
        "per_class": per_class,
    }


def keyword_proba(functions: Sequence[FunctionSource]) -> np.ndarray:
    return np.asarray([list(v) for v in KeywordClassifier().classify(functions)])


def name_gives_answer_away(record: dict[str, Any]) -> bool:
    """True when the function's own name (class + method) holds a network or disk word."""
    parts = record["qualified_name"].split(".")[-2:]
    words = set(subtokens(" ".join(parts)))
    return bool(words & (NETWORK_WORDS | DISK_WORDS))


def component_probs(
    records: Sequence[dict[str, Any]], neural: Any
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """Code and doc probability rows (doc rows zero where there is no doc), has-doc mask, labels."""
    functions = [to_function(r) for r in records]
    y = np.asarray([LABELS.index(r["label"]) for r in records])
    code = neural.code.predict_proba([f.code for f in functions], [f.language for f in functions])
    has_doc = np.asarray([bool(f.doc.strip()) for f in functions])
    doc = None
    if neural.doc is not None and has_doc.any():
        doc = np.zeros_like(code)
        idx = np.nonzero(has_doc)[0]
        doc[idx] = neural.doc.predict_proba([functions[i].doc for i in idx])
    return code, doc, has_doc, y


def evaluate_records(
    records: Sequence[dict[str, Any]],
    weights_dir: Path | None = None,
    *,
    combine_params: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Scores of code, doc (when shipped), combined (the paper's average), weighted (calibrated and
    confidence-weighted, when fitted) and keyword classifiers on ``records``."""
    from crystalperf.models.classifier import NeuralClassifier, combine, combine_weighted

    neural = NeuralClassifier(weights_dir)
    functions = [to_function(r) for r in records]
    code, doc, has_doc, y = component_probs(records, neural)
    combined = combine(code, doc, has_doc)
    params = combine_params or neural.combine_params
    keyword = keyword_proba(functions)
    hard = np.asarray([not name_gives_answer_away(r) for r in records])
    result: dict[str, Any] = {
        "version": neural.version,
        "n": len(records),
        "with_doc": int(has_doc.sum()),
        "shipped_combination": neural.combine_method,
    }
    variants: dict[str, tuple[np.ndarray, np.ndarray]] = {
        "code": (code, np.ones(len(records), dtype=bool)),
        "combined": (combined, np.ones(len(records), dtype=bool)),
        "keyword": (keyword, np.ones(len(records), dtype=bool)),
    }
    if doc is not None:
        variants["doc"] = (doc, has_doc)
        if params is not None:
            variants["weighted"] = (
                combine_weighted(code, doc, has_doc, params),
                np.ones(len(records), dtype=bool),
            )
            result["weighted_params"] = params
    for name, (probs, mask) in variants.items():
        result[name] = scores(y[mask], probs[mask].argmax(1))
        result[name]["hard"] = scores(y[mask & hard], probs[mask & hard].argmax(1))
    by_language: dict[str, dict[str, float]] = defaultdict(dict)
    for lang in sorted({r["language"] for r in records}):
        m = np.asarray([r["language"] == lang for r in records])
        for name in ("combined", "keyword"):
            by_language[lang][name] = float((variants[name][0][m].argmax(1) == y[m]).mean())
    result["by_language"] = dict(by_language)
    return result


def flip_labels(records: Sequence[dict[str, Any]], rate: float, seed: int = 0) -> list[dict[str, Any]]:
    """Copies of ``records`` with ``rate`` of the labels replaced by a different random label."""
    rng = np.random.default_rng(seed)
    out = []
    for r in records:
        r = dict(r)
        if rng.random() < rate:
            r["label"] = rng.choice([x for x in LABELS if x != r["label"]])
        out.append(r)
    return out


def noise_robustness(
    train: Sequence[dict[str, Any]],
    val: Sequence[dict[str, Any]],
    test: Sequence[dict[str, Any]],
    work_dir: Path,
    *,
    rates: Sequence[float] = (0.1, 0.2),
    seed: int = 0,
    epochs: int = 8,
    progress: bool = True,
) -> dict[str, dict[str, float]]:
    """Code-classifier test scores when trained on ``rate`` flipped labels (paper Fig. 9)."""
    from crystalperf.models.code import train_code_classifier

    y = np.asarray([LABELS.index(r["label"]) for r in test])
    out = {}
    for rate in rates:
        clf = train_code_classifier(
            flip_labels(train, rate, seed),
            val,
            work_dir / f"noise-{int(rate * 100)}",
            seed=seed,
            epochs=epochs,
            progress=progress,
        )
        pred = clf.predict_proba([r["code"] for r in test], [r["language"] for r in test]).argmax(1)
        s = scores(y, pred)
        out[f"{int(rate * 100)}%"] = {"accuracy": s["accuracy"], "macro_f1": s["macro_f1"]}
    return out


_WORD_SPLIT = r"\W+"
# Removing a keyword breaks the parse rather than a meaning; such words are not reported as top words.
_KEYWORDS = frozenset(
    [*keyword.kwlist]
    + "abstract boolean byte case catch char class const default do double extends final finally float "
    "implements import instanceof int interface long native new package private protected public return "
    "short static super switch synchronized this throw throws transient void volatile val var def object "
    "trait override lazy match sealed implicit yield auto unsigned struct template typename const_cast "
    "self cls".split()
)


def lime_explain(
    function: FunctionSource,
    predict: Callable[[list[FunctionSource]], np.ndarray],
    *,
    num_features: int = 8,
    num_samples: int = 300,
    seed: int = 0,
) -> dict[str, list[tuple[str, float]]]:
    """LIME over the code's and doc's words: per class, the words that push the prediction up."""
    from lime.lime_text import LimeTextExplainer

    separator = "\n\u241e\n"  # a marker no code or doc contains; splits the perturbed text back
    text = function.code + separator + (function.doc or "")

    def classifier_fn(texts: list[str]) -> np.ndarray:
        fns = []
        for t in texts:
            code, _, doc = t.partition(separator.strip("\n"))
            fns.append(
                FunctionSource(function.qualified_name, function.language, code.strip("\n"), doc.strip())
            )
        return predict(fns)

    explainer = LimeTextExplainer(
        class_names=list(LABELS), split_expression=_WORD_SPLIT, bow=True, random_state=seed
    )
    explanation = explainer.explain_instance(
        text, classifier_fn, labels=range(len(LABELS)), num_features=num_features, num_samples=num_samples
    )
    return {
        LABELS[i]: [(w, float(s)) for w, s in explanation.as_list(label=i) if s > 0]
        for i in range(len(LABELS))
    }


def top_words(
    records: Sequence[dict[str, Any]],
    predict: Callable[[list[FunctionSource]], np.ndarray],
    *,
    per_class: int = 10,
    samples_per_class: int = 15,
    num_samples: int = 200,
    seed: int = 0,
) -> dict[str, list[tuple[str, float]]]:
    """Paper Table 2: LIME weights summed over sample functions of each class, top words per class."""
    rng = np.random.default_rng(seed)
    totals: dict[str, dict[str, float]] = {label: defaultdict(float) for label in LABELS}
    for label in LABELS:
        rows = [r for r in records if r["label"] == label]
        if not rows:
            continue
        for i in rng.choice(len(rows), size=min(samples_per_class, len(rows)), replace=False):
            weights = lime_explain(to_function(rows[i]), predict, num_samples=num_samples, seed=seed)
            for word, w in weights[label]:
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word) and word not in _KEYWORDS:
                    totals[label][word] += w
    return {
        label: sorted(((w, round(s, 4)) for w, s in totals[label].items()), key=lambda x: -x[1])[:per_class]
        for label in LABELS
    }


def _padded4(probs3: np.ndarray) -> np.ndarray:
    """A 3-class <cpu, disk, network> classifier's rows as 4-class rows that never say waiting."""
    return np.hstack([probs3, np.zeros((len(probs3), 1))])


def measured_scores(probs4: np.ndarray, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """4-class scores (cpu/disk/network/waiting), 3-class scores on the rows labelled cpu/disk/network (the
    arg-max of the first three), and both per language."""
    from crystalperf.models.sparse import LABELS4

    y = np.asarray([LABELS4.index(r["label"]) for r in records], dtype=int)
    three = y < 3

    def both(mask: np.ndarray) -> dict[str, Any]:
        out = {"4-class": scores(y[mask], probs4[mask].argmax(1), LABELS4)}
        m3 = mask & three
        out["3-class"] = scores(y[m3], probs4[m3, :3].argmax(1), LABELS)
        return out

    result = both(np.ones(len(records), dtype=bool))
    result["by_language"] = {
        lang: both(np.asarray([r["language"] == lang for r in records]))
        for lang in sorted({r["language"] for r in records})
    }
    return result


def evaluate_measured(
    records: Sequence[dict[str, Any]],
    *,
    sparse_dir: Path | None = None,
    neural_dir: Path | None = None,
) -> dict[str, Any]:
    """The sparse classifier, the paper's neural pair (when torch and its weights are installed) and the
    keyword baseline on the same measured records, side by side. The neural pair and the keyword baseline
    have no waiting class: on waiting rows they are always wrong in the 4-class scores."""
    from crystalperf.models.sparse import SparseClassifier

    functions = [to_function(r) for r in records]
    result: dict[str, Any] = {"n": len(records)}
    sparse = SparseClassifier(sparse_dir)
    result["sparse"] = {"version": sparse.version, **measured_scores(sparse.predict_proba4(functions), records)}
    try:
        from crystalperf.models.classifier import NeuralClassifier

        neural = NeuralClassifier(neural_dir)
    except Exception as exc:  # no torch / no weights: the table says so instead of failing
        result["neural"] = {"skipped": str(exc)}
    else:
        probs = _padded4(neural.predict_proba(functions))
        result["neural"] = {"version": neural.version, **measured_scores(probs, records)}
    result["keyword"] = {"version": "keyword-1", **measured_scores(_padded4(keyword_proba(functions)), records)}
    return result
