"""The shipped resource classifier: hashed sparse features -> (embedding bag -> ReLU ->) softmax, in numpy.

Trained in torch (``crystalperf.models.sparse_train``, extra ``models``), exported to ``model.npz`` and
inferred here with numpy alone, so the base install (``pip install crystalperf[spark]``) classifies with
it: no torch, no flair, no tree-sitter. Four classes, ``cpu, disk, network, waiting``; the core's
``ResourceClassifier`` seam is <cpu, disk, network>, so :meth:`SparseClassifier.classify` renormalises the
first three and :meth:`SparseClassifier.waiting_probability` gives the fourth to whoever can use it.

The seam's vector is read as the share of a function's time on each resource, and a probability is not a share:
a function 70 % likely to be CPU-bound spends, on measured corpora, nearer 90 % of its busy time on the CPU. So
``classify`` sharpens the probabilities with a temperature (``share_temperature`` in ``config.json``) fitted at
training on the measured shares of the validation libraries' functions (:func:`fit_share_temperature`); the
arg-max, hence every accuracy, is unchanged.

How sure the model is shows in :meth:`SparseClassifier.confidence`: the chance that its arg-max is the function's
measured label, a logistic curve over the log-odds of the top probability fitted at training on the validation
libraries (``confidence`` in ``config.json``; :func:`fit_confidence`). Below :data:`LOW_CONFIDENCE` the class is
a guess a reader should not take as a verdict.

The weights file holds only the hash buckets seen in training (``keys``, sorted) and their rows
(``table``); a bucket never seen in training contributes nothing, exactly as its untrained zero row would.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The report applies the core's LOW_CONFIDENCE to every classifier's confidence; re-exported for this model's users.
from crystalperf.core.attribution.classify import LOW_CONFIDENCE as LOW_CONFIDENCE
from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.core.errors import BadInputError
from crystalperf.core.resources import ResourceVector

if TYPE_CHECKING:
    import numpy as np

LABELS4 = ("cpu", "disk", "network", "waiting")
# Candidates for the share temperature, from none (1) to near arg-max: a grid, so the fit is exact to reproduce.
SHARE_TEMPERATURES = (1.0, 0.85, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1, 0.05)
# Candidates for the weight of the keyword counter's log-vector added to the logits (``keyword_blend``).
KEYWORD_BLEND_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0)
KEYWORD_FLOOR = 1e-3  # keeps log(0) out of the blend: a class the keyword counter gives nothing to
WEIGHTS_SUBDIR = "sparse"
MODEL_FILE = "model.npz"
CONFIG_FILE = "config.json"


def sharpen(probs: np.ndarray, temperature: float) -> np.ndarray:
    """Rows of probabilities raised to ``1 / temperature`` and renormalised (1: unchanged)."""
    import numpy as np

    if temperature == 1.0 or not len(probs):
        return probs
    # in log space: a 0.01 probability to the 20th power underflows float32
    logs = np.log(np.clip(probs, 1e-30, None)) / temperature
    logs -= logs.max(axis=1, keepdims=True)
    sharp = np.exp(logs)
    return sharp / sharp.sum(axis=1, keepdims=True)


def share_error(vectors: np.ndarray, shares: np.ndarray) -> float:
    """Mean total-variation distance between predicted and measured share rows (0: equal, 1: disjoint)."""
    import numpy as np

    return float(np.abs(vectors - shares).sum(axis=1).mean() / 2) if len(vectors) else 0.0


def fit_share_temperature(probs: np.ndarray, shares: np.ndarray) -> tuple[float, float, float]:
    """(temperature, error at 1, error at it): the :data:`SHARE_TEMPERATURES` value whose sharpened ``probs``
    are nearest the measured ``shares`` (both [n, 3] <cpu, disk, network>, rows summing to 1); 1 when there
    are no rows or nothing beats it."""
    unchanged = share_error(probs, shares)
    best = (unchanged, 1.0)
    for temperature in SHARE_TEMPERATURES[1:]:
        error = share_error(sharpen(probs, temperature), shares)
        if error < best[0] - 1e-9:
            best = (error, temperature)
    return best[1], unchanged, best[0]


def _top_log_odds(probs: np.ndarray) -> np.ndarray:
    import numpy as np

    top = np.clip(np.asarray(probs, dtype=np.float64).max(axis=1), 1e-6, 1 - 1e-6)
    return np.log(top / (1 - top))


def confidence_of(probs: np.ndarray, slope: float, intercept: float) -> np.ndarray:
    """The chance each row's arg-max is right: ``sigmoid(slope * logit(max p) + intercept)``."""
    import numpy as np

    return 1.0 / (1.0 + np.exp(-(slope * _top_log_odds(probs) + intercept)))


def fit_confidence(probs: np.ndarray, labels: np.ndarray, *, iterations: int = 50) -> tuple[float, float]:
    """(slope, intercept) of :func:`confidence_of` by maximum likelihood (Newton's method, deterministic) on rows
    of class probabilities and the index of each row's true class; (1, 0) when there are no rows or the arg-max
    is always right or always wrong (nothing to fit)."""
    import numpy as np

    right = (np.asarray(probs).argmax(axis=1) == np.asarray(labels)).astype(np.float64)
    if not len(right) or right.min() == right.max():
        return 1.0, 0.0
    x = np.stack([_top_log_odds(probs), np.ones(len(right))], axis=1)
    w = np.zeros(2)
    for _ in range(iterations):
        q = 1.0 / (1.0 + np.exp(-(x @ w)))
        hessian = (x * (q * (1 - q))[:, None]).T @ x + 1e-9 * np.eye(2)
        step = np.linalg.solve(hessian, x.T @ (q - right))
        w -= step
        if np.abs(step).max() < 1e-12:
            break
    return float(w[0]), float(w[1])


def keyword_log_vectors(functions: Sequence[FunctionSource]) -> np.ndarray:
    """[n, 4] logs of the keyword counter's vectors in the order cpu, disk, network, waiting, waiting given the
    cpu part: the counter never says waiting, and "no resource word" speaks for neither over the other."""
    import numpy as np

    from crystalperf.core.attribution.classify import KeywordClassifier

    rows = np.asarray([[v.cpu, v.disk, v.network, v.cpu] for v in KeywordClassifier().classify(functions)],
                      dtype=np.float32).reshape(-1, 4)
    return np.log(rows + KEYWORD_FLOOR)


def _softmax(logits: np.ndarray) -> np.ndarray:
    import numpy as np

    logits = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


def blend_keyword(logits: np.ndarray, keyword_logs: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Logits plus each row's keyword weight times its keyword log-vector (a weight of 0 leaves a row as it was)."""
    return logits + weights[:, None] * keyword_logs


class SparseWeightsMissingError(FileNotFoundError):
    """No trained sparse classifier where the package expects it."""


class SparseWeightsError(BadInputError, ValueError):
    """Weights that are there but cannot be used (another hashing, a config or model file that does not parse):
    the CLI prints one line naming the file and exits with status 2; ``load_classifier`` falls back."""


def default_weights_dir() -> Path:
    from crystalperf.models import WEIGHTS_DIR

    return WEIGHTS_DIR / WEIGHTS_SUBDIR


def weights_version(weights_dir: Path) -> str:
    digest = hashlib.sha256()
    for name in (MODEL_FILE, CONFIG_FILE):
        digest.update((weights_dir / name).read_bytes())
    return "sparse-" + digest.hexdigest()[:12]


class SparseClassifier:
    """Numpy inference of the exported sparse model; the first classifier ``load_classifier`` tries."""

    def __init__(self, weights_dir: Path | None = None, *, batch_size: int = 512) -> None:
        import numpy as np  # lazily: ``import crystalperf.core`` stays light

        self.weights_dir = Path(weights_dir) if weights_dir is not None else default_weights_dir()
        model = self.weights_dir / MODEL_FILE
        if not model.is_file() or not (self.weights_dir / CONFIG_FILE).is_file():
            raise SparseWeightsMissingError(
                f"sparse classifier weights missing in {self.weights_dir}: reinstall crystalperf "
                "or run 'crystalperf train'"
            )
        config_path = self.weights_dir / CONFIG_FILE
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SparseWeightsError(f"is not a readable JSON config ({exc})", config_path) from None
        if not isinstance(config, dict):
            raise SparseWeightsError("is not a JSON object", config_path)
        self.config: dict[str, Any] = config
        from crystalperf.models.features import HASH_BITS

        if self.config.get("hash_bits") != HASH_BITS:
            raise SparseWeightsError(
                f"was trained with {self.config.get('hash_bits')}-bit feature hashing, "
                f"this crystalperf hashes {HASH_BITS} bits: retrain ('crystalperf train')", self.weights_dir
            )
        temperature = self.config.get("share_temperature", 1.0)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 < temperature <= 1:
            raise SparseWeightsError(f"share_temperature {temperature!r} is not in (0, 1]", config_path)
        self.share_temperature = float(temperature)
        self.keyword_blend = self._keyword_blend(config_path)
        self.framework_keyword_blend = self._framework_keyword_blend(config_path)
        self.confidence_fit = self._confidence_fit(config_path)
        try:
            with np.load(model) as data:
                arrays = {name: data[name] for name in data.files}
            self.keys = arrays["keys"].astype(np.int64)
            # Computing in float32 keeps numpy's results within float rounding of the torch module's.
            self.table = arrays["table"].astype(np.float32)
            self.hidden_bias = arrays["hidden_bias"].astype(np.float32) if "hidden_bias" in arrays else None
            self.out_weight = arrays["out_weight"].astype(np.float32) if "out_weight" in arrays else None
            self.out_bias = arrays["out_bias"].astype(np.float32)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            raise SparseWeightsError(f"is not a readable sparse model ({type(exc).__name__}: {exc})", model) from None
        if self.table.ndim != 2 or len(self.keys) != len(self.table):
            raise SparseWeightsError("keys and table disagree in length", model)
        self.labels = tuple(self.config.get("labels", LABELS4))
        self.batch_size = batch_size
        self._version = weights_version(self.weights_dir)

    def _keyword_blend(self, config_path: Path) -> dict[str, float]:
        """Per language, the weight of the keyword counter's log-vector in the logits (none: the model alone)."""
        blend = self.config.get("keyword_blend", {})
        if not isinstance(blend, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for k, v in blend.items()
        ):
            raise SparseWeightsError(f"keyword_blend {blend!r} is not a map of languages to weights >= 0", config_path)
        return {k: float(v) for k, v in blend.items() if v}

    def _framework_keyword_blend(self, config_path: Path) -> dict[str, dict[str, float]]:
        """Per framework and language, the keyword weight of that framework's functions (instead of the language's)."""
        blend = self.config.get("framework_keyword_blend", {})
        if not isinstance(blend, dict) or not all(
            isinstance(framework, str) and isinstance(weights, dict) and all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
                for k, v in weights.items())
            for framework, weights in blend.items()
        ):
            raise SparseWeightsError(f"framework_keyword_blend {blend!r} is not a map of frameworks to maps of "
                                     "languages to weights >= 0", config_path)
        return {framework: {k: float(v) for k, v in weights.items()} for framework, weights in blend.items()}

    def blend_weights(self, functions: Sequence[FunctionSource]) -> np.ndarray:
        """Each function's weight of the keyword counter's log-vector: its framework's for its language where the
        config names one (``framework_keyword_blend``), else its language's (``keyword_blend``), else 0."""
        import numpy as np

        from crystalperf.models.frameworks import framework_of

        weights = []
        for f in functions:
            weight = self.keyword_blend.get(f.language, 0.0)
            if self.framework_keyword_blend:
                framework = framework_of(f.qualified_name)
                by_language = self.framework_keyword_blend.get(framework) if framework else None
                if by_language is not None and f.language in by_language:
                    weight = by_language[f.language]
            weights.append(weight)
        return np.asarray(weights, dtype=np.float32)

    def _confidence_fit(self, config_path: Path) -> tuple[float, float] | None:
        fit = self.config.get("confidence")
        if fit is None:
            return None
        parts = (fit.get("slope"), fit.get("intercept")) if isinstance(fit, dict) else (None, None)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in parts):
            raise SparseWeightsError(f"confidence {fit!r} needs numbers slope and intercept", config_path)
        return float(parts[0]), float(parts[1])  # type: ignore[arg-type]

    @property
    def version(self) -> str:
        """Hash of the weight files: new weights invalidate cached classifications."""
        return self._version

    def logits_from_features(
        self, indices: Sequence[int], values: Sequence[float], offsets: Sequence[int]
    ) -> np.ndarray:
        """[n, classes] logits of a flattened batch (see ``features.batch_features``)."""
        import numpy as np

        n = len(offsets) - 1
        idx = np.asarray(indices, dtype=np.int64)
        val = np.asarray(values, dtype=np.float32)
        segment = np.repeat(np.arange(n), np.diff(np.asarray(offsets, dtype=np.int64)))
        rows = np.searchsorted(self.keys, idx)
        rows_clipped = np.minimum(rows, max(len(self.keys) - 1, 0))
        known = (rows < len(self.keys)) & (self.keys[rows_clipped] == idx) if len(self.keys) else rows < 0
        width = self.table.shape[1]
        bag = np.zeros((n, width), dtype=np.float32)
        if known.any():
            np.add.at(bag, segment[known], self.table[rows_clipped[known]] * val[known, None])
        if self.out_weight is None:
            return bag + self.out_bias
        assert self.hidden_bias is not None
        hidden = np.maximum(bag + self.hidden_bias, 0.0)
        return hidden @ self.out_weight + self.out_bias

    def predict_proba4(self, functions: Sequence[FunctionSource]) -> np.ndarray:
        """[n, 4] probabilities in the order cpu, disk, network, waiting."""
        import numpy as np

        from crystalperf.models.features import batch_features

        parts = []
        for start in range(0, len(functions), self.batch_size):
            batch = functions[start : start + self.batch_size]
            logits = self.logits_from_features(*batch_features(batch))
            if self.keyword_blend or self.framework_keyword_blend:
                weights = self.blend_weights(batch)
                if weights.any():
                    logits = blend_keyword(logits, keyword_log_vectors(batch), weights)
            parts.append(_softmax(logits))
        if not parts:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        return np.concatenate(parts)

    def predict_proba(self, functions: Sequence[FunctionSource]) -> np.ndarray:
        """[n, 3] <cpu, disk, network> probabilities (waiting's share renormalised away)."""
        probs = self.predict_proba4(functions)[:, :3]
        return probs / probs.sum(axis=1, keepdims=True).clip(min=1e-12)

    def waiting_probability(self, functions: Sequence[FunctionSource]) -> list[float]:
        """How likely each function's time is waiting (sleep, park, lock, condition wait) rather than work."""
        if not functions:
            return []
        return [float(p) for p in self.predict_proba4(functions)[:, self.labels.index("waiting")]]

    def confidence(self, functions: Sequence[FunctionSource]) -> np.ndarray:
        """How likely each function's 4-class arg-max is right: the fit in ``config.json`` (the validation
        libraries' measured labels), else the top probability itself. Under :data:`LOW_CONFIDENCE` the class is
        a guess."""
        return self.confidence_from_proba(self.predict_proba4(functions))

    def confidences(self, functions: Sequence[FunctionSource]) -> list[float | None]:
        """:meth:`confidence` as Python floats: the core's ``ConfidentClassifier`` seam, which the report reads."""
        return [float(c) for c in self.confidence(functions)]

    def confidence_from_proba(self, probs4: np.ndarray) -> np.ndarray:
        import numpy as np

        if not len(probs4):
            return np.zeros(0)
        if self.confidence_fit is None:
            return np.asarray(probs4, dtype=np.float64).max(axis=1)
        return confidence_of(probs4, *self.confidence_fit)

    def share_vectors(self, functions: Sequence[FunctionSource]) -> np.ndarray:
        """[n, 3] <cpu, disk, network> shares of each function's busy time: the probabilities, sharpened by the
        share temperature fitted on measured shares."""
        return sharpen(self.predict_proba(functions), self.share_temperature)

    def classify(self, functions: Sequence[FunctionSource]) -> list[ResourceVector]:
        """One <cpu, disk, network> vector per function (the core's seam): its shares, not its probabilities."""
        return [ResourceVector.of(float(p[0]), float(p[1]), float(p[2])) for p in self.share_vectors(functions)]


class FourClassView:
    """The sparse classifier with its waiting probability kept in the vector (``ResourceVector.waiting``), for
    evaluations that score waiting as a class of its own; analysis uses :class:`SparseClassifier`."""

    def __init__(self, inner: SparseClassifier) -> None:
        self.inner = inner
        self.version = inner.version + "-4class"

    def classify(self, functions: Sequence[FunctionSource]) -> list[ResourceVector]:
        return [ResourceVector.of(*(float(x) for x in p)) for p in self.inner.predict_proba4(functions)]
