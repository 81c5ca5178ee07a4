"""The combined neural classifier behind the core's ``ResourceClassifier`` seam (paper §3.2).

The code classifier always votes; the doc classifier votes too when the function has documentation
and its weights are shipped. The two probability vectors are averaged as in the paper, unless the
weights directory ships a ``combine.json`` choosing the calibrated, confidence-weighted combination
(fitted on validation data by ``crystalperf train``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.core.resources import ResourceVector
from crystalperf.models import LABELS, WEIGHTS_DIR
from crystalperf.models.sources import GRAMMARS

log = logging.getLogger(__name__)


class WeightsMissingError(FileNotFoundError):
    """The trained weights are not where the package expects them."""


_SUFFIX_LANGUAGE = {
    ".java": "java",
    ".scala": "scala",
    ".py": "python",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".h": "cpp",
}


def parseable_language(function: FunctionSource) -> str:
    """The grammar to parse a function with. Frames of generated or unlabelled code (Spark's
    ``GeneratedClass``, lambdas) arrive as language ``unknown`` with only their qualified name as code;
    the file suffix decides when there is one, else the JVM's Java grammar reads a dotted name best."""
    if function.language in GRAMMARS:
        return function.language
    suffix = Path(str(function.location or "").split(":")[0]).suffix
    return _SUFFIX_LANGUAGE.get(suffix, "java")


def combine(code: np.ndarray, doc: np.ndarray | None, has_doc: np.ndarray) -> np.ndarray:
    """Average of code and doc vectors where a doc exists, code alone otherwise (rows sum to 1)."""
    if doc is None:
        out = code.copy()
    else:
        out = np.where(has_doc[:, None], (code + doc) / 2.0, code)
    return out / out.sum(axis=1, keepdims=True)


COMBINE_FILE = "combine.json"
COMBINE_METHODS = ("average", "weighted", "code")
_TEMPERATURES = np.round(np.arange(0.5, 3.01, 0.1), 2)
_DOC_WEIGHTS = np.round(np.arange(0.0, 1.001, 0.05), 2)


def calibrate(probs: np.ndarray, temperature: float) -> np.ndarray:
    """Temperature scaling of probability rows (p ** (1/T), renormalised)."""
    logp = np.log(np.clip(probs, 1e-9, 1.0)) / temperature
    logp -= logp.max(axis=1, keepdims=True)
    out = np.exp(logp)
    return out / out.sum(axis=1, keepdims=True)


def combine_weighted(
    code: np.ndarray, doc: np.ndarray | None, has_doc: np.ndarray, params: dict[str, float]
) -> np.ndarray:
    """Each classifier's calibrated vector weighted by its own confidence (its top probability after
    temperature scaling) and by a doc weight chosen on validation; code alone where no doc exists."""
    c = calibrate(code, params["code_temperature"])
    if doc is None:
        return c
    d = calibrate(doc, params["doc_temperature"])
    alpha = params["doc_weight"]
    wc = (1.0 - alpha) * c.max(axis=1, keepdims=True)
    wd = alpha * d.max(axis=1, keepdims=True)
    mixed = (wc * c + wd * d) / np.maximum(wc + wd, 1e-12)
    out = np.where(has_doc[:, None], mixed, c)
    return out / out.sum(axis=1, keepdims=True)


def _nll(probs: np.ndarray, y: np.ndarray) -> float:
    return float(-np.log(np.clip(probs[np.arange(len(y)), y], 1e-9, 1.0)).mean())


def fit_combination(
    code: np.ndarray, doc: np.ndarray, has_doc: np.ndarray, y: np.ndarray
) -> dict[str, float]:
    """Chooses the combination's parameters on validation data: each classifier's temperature by
    log-likelihood, then the doc weight by accuracy (ties go to the smaller doc weight, i.e. towards the
    stronger code classifier)."""
    code_t = min(_TEMPERATURES, key=lambda t: _nll(calibrate(code, t), y))
    doc_t = (
        min(_TEMPERATURES, key=lambda t: _nll(calibrate(doc[has_doc], t), y[has_doc]))
        if has_doc.any()
        else 1.0
    )
    best: tuple[float, float] = (-1.0, 0.0)
    for alpha in _DOC_WEIGHTS:
        params = {
            "code_temperature": float(code_t),
            "doc_temperature": float(doc_t),
            "doc_weight": float(alpha),
        }
        acc = float((combine_weighted(code, doc, has_doc, params).argmax(1) == y).mean())
        if acc > best[0] + 1e-12:
            best = (acc, float(alpha))
    return {
        "code_temperature": float(code_t),
        "doc_temperature": float(doc_t),
        "doc_weight": best[1],
        "validation_accuracy": best[0],
    }


def load_combination(weights_dir: Path) -> dict[str, Any] | None:
    """The shipped combination (``combine.json``: method and fitted parameters), if any."""
    path = weights_dir / COMBINE_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text())


class NeuralClassifier:
    """Code (recursive autoencoder) + doc (Flair) classifiers, loaded offline from shipped weights."""

    def __init__(
        self,
        weights_dir: Path | None = None,
        *,
        use_doc: bool = True,
        batch_size: int = 128,
        combine_method: str | None = None,
    ) -> None:
        from crystalperf.models.code import CodeClassifier, weights_hash

        self.weights_dir = Path(weights_dir) if weights_dir is not None else WEIGHTS_DIR
        code_dir = self.weights_dir / "code"
        if not (code_dir / "model.pt").is_file():
            raise WeightsMissingError(
                f"code classifier weights missing in {code_dir}: reinstall crystalperf[models] "
                "or run 'crystalperf train'"
            )
        self.batch_size = batch_size
        self.code = CodeClassifier.load(code_dir)
        hashes = [weights_hash(code_dir)]
        self.doc = None
        doc_dir = self.weights_dir / "doc"
        if use_doc and doc_dir.is_dir() and any(doc_dir.iterdir()):
            try:
                from crystalperf.models.doc import DocClassifier

                self.doc = DocClassifier.load(doc_dir)
                hashes.append(weights_hash(doc_dir))
            except Exception as exc:  # an unusable doc model leaves the code model working
                log.warning(
                    "doc classifier not loaded from %s (%s); using the code classifier alone", doc_dir, exc
                )
                self.doc = None
        # combine.json names the shipped method and its validation-fitted parameters; without it (or
        # when a weighted combination is asked for but not fitted) the paper's average applies.
        shipped = load_combination(self.weights_dir) or {}
        self.combine_params: dict[str, float] | None = shipped.get("params")
        method = combine_method or shipped.get("method", "average")
        if method not in COMBINE_METHODS:
            raise ValueError(f"unknown combination {method!r}: one of {', '.join(COMBINE_METHODS)}")
        if method == "weighted" and self.combine_params is None:
            log.warning("no fitted combination in %s; averaging code and doc", self.weights_dir)
            method = "average"
        self.combine_method = method
        if method != "average":  # the paper's average keeps the version of the weights alone
            hashes.append(method + json.dumps(self.combine_params, sort_keys=True))
        self._version = "neural-" + hashlib.sha256("/".join(hashes).encode()).hexdigest()[:12]

    @property
    def version(self) -> str:
        """Derived from the weights' content hashes: new weights invalidate cached classifications."""
        return self._version

    def predict_proba(self, functions: Sequence[FunctionSource]) -> np.ndarray:
        """[n, 3] probabilities in the order cpu, disk, network."""
        if not functions:
            return np.zeros((0, len(LABELS)))
        code = self.code.predict_proba(
            [f.code or f.qualified_name for f in functions],
            [parseable_language(f) for f in functions],
            self.batch_size,
        )
        has_doc = np.asarray([bool(f.doc and f.doc.strip()) for f in functions])
        doc = None
        if self.doc is not None and has_doc.any():
            doc = np.zeros_like(code)
            idx = np.nonzero(has_doc)[0]
            doc[idx] = self.doc.predict_proba([functions[i].doc for i in idx])
        return self.combine(code, doc, has_doc)

    def combine(self, code: np.ndarray, doc: np.ndarray | None, has_doc: np.ndarray) -> np.ndarray:
        """The configured combination of code and doc probability rows."""
        if self.combine_method == "code" or doc is None:
            return combine(code, None, has_doc)
        if self.combine_method == "weighted" and self.combine_params is not None:
            return combine_weighted(code, doc, has_doc, self.combine_params)
        return combine(code, doc, has_doc)

    def classify(self, functions: Sequence[FunctionSource]) -> list[ResourceVector]:
        """One <cpu, disk, network> vector per function, computed in batches."""
        probs = self.predict_proba(functions)
        return [ResourceVector.of(float(p[0]), float(p[1]), float(p[2])) for p in probs]
