"""How sure the sparse classifier is (a logistic curve over the top probability's log-odds, fitted on validation
labels), and the keyword blend: the keyword counter's log-vector added to the logits with a weight per language."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from crystalperf.core.attribution.classify import FunctionSource, KeywordClassifier
from crystalperf.core.errors import BadInputError
from crystalperf.models.features import batch_features
from crystalperf.models.sparse import (
    KEYWORD_FLOOR,
    LOW_CONFIDENCE,
    SparseClassifier,
    blend_keyword,
    confidence_of,
    default_weights_dir,
    fit_confidence,
    keyword_log_vectors,
)

FUNCTIONS = [
    FunctionSource("a.Store.save", "python", "def save(self, path):\n    with open(path, 'wb') as f:\n        f.write(self.data)\n"),
    FunctionSource("a.Net.fetch", "python", "def fetch(url):\n    return urllib.request.urlopen(url).read()\n"),
    FunctionSource("a.Math.norm", "python", "def norm(xs):\n    return sum(x * x for x in xs) ** 0.5\n"),
    FunctionSource("a.Gen$$Lambda$1.apply", "unknown", ""),
]


def _weights_with(tmp_path: Path, **changes: object) -> Path:
    target = tmp_path / "sparse"
    shutil.copytree(default_weights_dir(), target)
    config = json.loads((target / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (target / "config.json").write_text(json.dumps(config))
    return target


def test_confidence_is_a_logistic_curve_over_the_top_log_odds():
    probs = np.array([[0.5, 0.25, 0.25, 0.0], [0.8, 0.1, 0.05, 0.05]])
    # slope 1, intercept 0: the top probability itself
    assert np.allclose(confidence_of(probs, 1.0, 0.0), [0.5, 0.8])
    # slope 2: the odds squared (0.8 -> 16:1)
    assert np.allclose(confidence_of(probs, 2.0, 0.0), [0.5, 16 / 17])
    assert np.allclose(confidence_of(probs, 1.0, np.log(3)), [0.75, 12 / 13])


def test_the_fit_recovers_the_curve_the_labels_were_drawn_from():
    rng = np.random.default_rng(0)
    top = rng.uniform(0.3, 0.99, 20000)
    probs = np.stack([top, 1 - top, np.zeros_like(top), np.zeros_like(top)], axis=1)
    right = rng.uniform(size=len(top)) < confidence_of(probs, 1.7, 0.4)
    labels = np.where(right, 0, 2)  # the arg-max is class 0 (or 1 where top < 0.5)
    labels = np.where(right & (top < 0.5), 1, labels)
    slope, intercept = fit_confidence(probs, labels)
    assert slope == pytest.approx(1.7, abs=0.1) and intercept == pytest.approx(0.4, abs=0.1)
    assert fit_confidence(probs, labels) == (slope, intercept)  # deterministic


def test_nothing_to_fit_gives_the_top_probability():
    probs = np.array([[0.9, 0.1, 0, 0], [0.6, 0.4, 0, 0]])
    assert fit_confidence(probs, np.array([0, 0])) == (1.0, 0.0)  # always right
    assert fit_confidence(probs, np.array([3, 3])) == (1.0, 0.0)  # always wrong
    assert fit_confidence(np.zeros((0, 4)), np.zeros(0, dtype=int)) == (1.0, 0.0)


def test_the_shipped_classifier_says_how_sure_it_is():
    classifier = SparseClassifier()
    assert classifier.confidence_fit is not None
    probs = classifier.predict_proba4(FUNCTIONS)
    confidence = classifier.confidence(FUNCTIONS)
    assert confidence.shape == (len(FUNCTIONS),) and ((confidence > 0) & (confidence < 1)).all()
    assert np.allclose(confidence, confidence_of(probs, *classifier.confidence_fit))
    # more probable is more confident
    order = np.argsort(probs.max(axis=1))
    assert (np.diff(confidence[order]) >= 0).all()
    assert classifier.confidence([]).shape == (0,)


def test_weights_without_a_confidence_fit_report_the_top_probability(tmp_path):
    classifier = SparseClassifier(_weights_with(tmp_path, confidence=None))
    assert classifier.confidence_fit is None
    assert np.allclose(classifier.confidence(FUNCTIONS), classifier.predict_proba4(FUNCTIONS).max(axis=1))


@pytest.mark.parametrize("bad", [{"slope": "x", "intercept": 0}, {"slope": 1.0}, [1, 2], {"slope": True, "intercept": 0}])
def test_a_bad_confidence_fit_is_a_clear_error(tmp_path, bad):
    with pytest.raises(BadInputError, match="confidence"):
        SparseClassifier(_weights_with(tmp_path, confidence=bad))


def test_keyword_log_vectors_follow_the_keyword_counter_with_waiting_as_cpu():
    logs = keyword_log_vectors(FUNCTIONS)
    vectors = KeywordClassifier().classify(FUNCTIONS)
    for row, v in zip(logs, vectors, strict=True):
        assert np.allclose(np.exp(row) - KEYWORD_FLOOR, [v.cpu, v.disk, v.network, v.cpu], atol=1e-6)


def test_a_keyword_blend_moves_only_the_languages_it_names(tmp_path):
    plain = SparseClassifier()
    weight = 0.5
    blended = SparseClassifier(_weights_with(tmp_path, keyword_blend={"python": weight, "java": 0}))
    assert blended.keyword_blend == {"python": weight}
    logits = plain.logits_from_features(*batch_features(FUNCTIONS))
    weights = np.array([weight if f.language == "python" else 0.0 for f in FUNCTIONS], dtype=np.float32)
    expected = blend_keyword(logits, keyword_log_vectors(FUNCTIONS), weights)
    expected = np.exp(expected - expected.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    got = blended.predict_proba4(FUNCTIONS)
    assert np.allclose(got, expected, atol=1e-6)
    # the last function is not python: untouched
    assert np.allclose(got[-1], plain.predict_proba4(FUNCTIONS)[-1], atol=1e-7)
    assert not np.allclose(got[:3], plain.predict_proba4(FUNCTIONS)[:3])


def test_a_framework_s_functions_take_its_own_keyword_weight(tmp_path):
    """A TensorFlow function takes the weight framework_keyword_blend gives TensorFlow's Python; a function of no
    framework, or of a framework the config does not name, its language's."""
    functions = [
        FunctionSource("tensorflow.python.lib.io.file_io.FileIO.read", "python",
                       "def read(self, n=-1):\n    self._preread_check()\n    return self._read_buf.read(n)\n"),
        FunctionSource("keras.src.saving.saving_api.save_model", "python",
                       "def save_model(model, filepath):\n    with open(filepath, 'wb') as f:\n        f.write(b'')\n"),
        FUNCTIONS[0],
        FunctionSource("pyspark.serializers.read_int", "python", "def read_int(stream):\n    return stream.read(4)\n"),
        FunctionSource("org.tensorflow.Session.run", "java", "Tensor run() {\n    Session.runNative();\n}"),
    ]
    plain = SparseClassifier()
    blended = SparseClassifier(_weights_with(tmp_path, keyword_blend={"python": 0.25},
                                             framework_keyword_blend={"tensorflow": {"python": 1.5}}))
    assert blended.framework_keyword_blend == {"tensorflow": {"python": 1.5}}
    weights = np.array([1.5, 1.5, 0.25, 0.25, 0.0], dtype=np.float32)
    assert np.array_equal(blended.blend_weights(functions), weights)
    expected = blend_keyword(plain.logits_from_features(*batch_features(functions)), keyword_log_vectors(functions),
                             weights)
    expected = np.exp(expected - expected.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    assert np.allclose(blended.predict_proba4(functions), expected, atol=1e-6)
    assert np.allclose(blended.predict_proba4(functions)[-1], plain.predict_proba4(functions)[-1], atol=1e-7)


@pytest.mark.parametrize("bad", [{"tensorflow": 1.5}, {"tensorflow": {"python": -1}}, [1], {"spark": {"java": True}}])
def test_a_bad_framework_keyword_blend_is_a_clear_error(tmp_path, bad):
    with pytest.raises(BadInputError, match="framework_keyword_blend"):
        SparseClassifier(_weights_with(tmp_path, framework_keyword_blend=bad))


@pytest.mark.parametrize("bad", [{"python": -1}, {"python": "x"}, [0.5], {"python": True}])
def test_a_bad_keyword_blend_is_a_clear_error(tmp_path, bad):
    with pytest.raises(BadInputError, match="keyword_blend"):
        SparseClassifier(_weights_with(tmp_path, keyword_blend=bad))


def test_classify_writes_the_confidence_and_flags_a_low_one(tmp_path, capsys):
    from crystalperf.core.cli import main

    functions = FUNCTIONS[:3]  # the CLI reads java, scala, python and cpp
    lines = [json.dumps({"id": f.qualified_name, "language": f.language, "code": f.code, "doc": f.doc})
             for f in functions]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["classify", "--input", str(tmp_path / "in.jsonl"), "--no-cache"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = SparseClassifier().confidence(functions)
    assert [r["id"] for r in rows] == [f.qualified_name for f in functions]
    for row, c in zip(rows, expected, strict=True):
        assert row["confidence"] == pytest.approx(c, abs=1e-4)
        assert row["low_confidence"] is bool(c < LOW_CONFIDENCE)


def test_the_confidences_the_report_reads_are_the_confidence_as_python_floats():
    from crystalperf.core.attribution.classify import ConfidentClassifier

    classifier = SparseClassifier()
    assert isinstance(classifier, ConfidentClassifier)
    got = classifier.confidences(FUNCTIONS)
    assert all(type(c) is float for c in got)
    assert got == [float(c) for c in classifier.confidence(FUNCTIONS)]
    assert classifier.confidences([]) == []
