"""The combined neural classifier behind the core's ``ResourceClassifier`` seam (paper §3.2).

The code classifier always votes; the doc classifier votes too when the function has documentation
and its weights are shipped, and the two probability vectors are averaged.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from crystalperf.core.classify import FunctionSource
from crystalperf.core.resources import ResourceVector
from crystalperf.models import LABELS, WEIGHTS_DIR
from crystalperf.models.sources import GRAMMARS

log = logging.getLogger(__name__)


class WeightsMissingError(FileNotFoundError):
    """The trained weights are not where the package expects them."""


_SUFFIX_LANGUAGE = {".java": "java", ".scala": "scala", ".py": "python", ".cc": "cpp", ".cpp": "cpp", ".h": "cpp"}


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


class NeuralClassifier:
    """Code (recursive autoencoder) + doc (Flair) classifiers, loaded offline from shipped weights."""

    def __init__(
        self, weights_dir: Path | None = None, *, use_doc: bool = True, batch_size: int = 128
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
            [f.code or f.qualified_name for f in functions], [parseable_language(f) for f in functions],
            self.batch_size,
        )
        has_doc = np.asarray([bool(f.doc and f.doc.strip()) for f in functions])
        doc = None
        if self.doc is not None and has_doc.any():
            doc = np.zeros_like(code)
            idx = np.nonzero(has_doc)[0]
            doc[idx] = self.doc.predict_proba([functions[i].doc for i in idx])
        return combine(code, doc, has_doc)

    def classify(self, functions: Sequence[FunctionSource]) -> list[ResourceVector]:
        """One <cpu, disk, network> vector per function, computed in batches."""
        probs = self.predict_proba(functions)
        return [ResourceVector.of(float(p[0]), float(p[1]), float(p[2])) for p in probs]
