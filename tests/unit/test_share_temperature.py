"""The sparse classifier's vectors are shares of a function's time, not class probabilities: sharpened by a
temperature fitted on measured shares (hand-computed cases), and the measured rows that fit it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.core.errors import BadInputError
from crystalperf.models.measured import share_rows
from crystalperf.models.sparse import (
    SHARE_TEMPERATURES,
    SparseClassifier,
    default_weights_dir,
    fit_share_temperature,
    share_error,
    sharpen,
)


def test_sharpen_keeps_rows_distributions_and_one_changes_nothing():
    probs = np.array([[0.7, 0.2, 0.1], [0.001, 0.998, 0.001], [1 / 3, 1 / 3, 1 / 3]])
    assert sharpen(probs, 1.0) is probs
    half = sharpen(probs, 0.5)  # squares, renormalised
    assert np.allclose(half[0], np.array([0.49, 0.04, 0.01]) / 0.54)
    assert np.allclose(half[2], [1 / 3] * 3)  # no evidence stays no evidence
    near_argmax = sharpen(probs, 0.05)  # 0.001 ** 20 underflows: computed in logs
    assert np.all(np.isfinite(near_argmax)) and np.allclose(near_argmax.sum(axis=1), 1.0)
    assert near_argmax[0, 0] > 0.99 and near_argmax[1, 1] > 0.999


def test_share_error_is_total_variation():
    assert share_error(np.array([[1.0, 0, 0]]), np.array([[0.5, 0.5, 0]])) == pytest.approx(0.5)
    assert share_error(np.array([[0.2, 0.3, 0.5]]), np.array([[0.2, 0.3, 0.5]])) == 0.0
    assert share_error(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0


def test_the_fit_sharpens_as_far_as_the_measured_shares_are_sharp():
    probs = np.array([[0.7, 0.2, 0.1]] * 4 + [[0.2, 0.7, 0.1]])
    one_hot = np.array([[1.0, 0, 0]] * 4 + [[0, 1.0, 0]])
    temperature, before, after = fit_share_temperature(probs, one_hot)
    assert temperature == min(SHARE_TEMPERATURES) and before == pytest.approx(0.3) and after < 0.01
    # the measured shares are the probabilities: nothing to sharpen
    assert fit_share_temperature(probs, probs)[0] == 1.0
    # shares flatter than the probabilities: a temperature below 1 only makes it worse
    assert fit_share_temperature(probs, np.full((5, 3), 1 / 3))[0] == 1.0
    assert fit_share_temperature(np.zeros((0, 3)), np.zeros((0, 3))) == (1.0, 0.0, 0.0)


def _weights_with(tmp_path: Path, temperature: object) -> Path:
    target = tmp_path / "sparse"
    shutil.copytree(default_weights_dir(), target)
    config = json.loads((target / "config.json").read_text())
    config["share_temperature"] = temperature
    (target / "config.json").write_text(json.dumps(config))
    return target


FUNCTIONS = [
    FunctionSource("a.Store.save", "python", "def save(self, path):\n    with open(path, 'wb') as f:\n        f.write(self.data)\n"),
    FunctionSource("a.Net.fetch", "python", "def fetch(url):\n    return urllib.request.urlopen(url).read()\n"),
    FunctionSource("a.Math.norm", "python", "def norm(xs):\n    return sum(x * x for x in xs) ** 0.5\n"),
    FunctionSource("a.Gen$$Lambda$1.apply", "unknown", ""),
]


def test_classify_gives_the_sharpened_shares_with_the_same_arg_max(tmp_path):
    classifier = SparseClassifier(_weights_with(tmp_path, 0.5))
    probs = classifier.predict_proba(FUNCTIONS)
    vectors = np.array([list(v)[:3] for v in classifier.classify(FUNCTIONS)])
    assert np.allclose(vectors, sharpen(probs, 0.5), atol=1e-6)
    assert (vectors.argmax(axis=1) == probs.argmax(axis=1)).all()
    assert all(v.waiting == 0.0 for v in classifier.classify(FUNCTIONS))
    plain = SparseClassifier(_weights_with(tmp_path / "plain", 1.0))
    assert np.allclose([list(v)[:3] for v in plain.classify(FUNCTIONS)], plain.predict_proba(FUNCTIONS), atol=1e-6)


@pytest.mark.parametrize("temperature", [0, 1.5, -1, "0.5", None, True])
def test_a_bad_share_temperature_is_a_clear_error(tmp_path, temperature):
    with pytest.raises(ValueError, match="share_temperature"):
        SparseClassifier(_weights_with(tmp_path, temperature))


def _row(i: str, library: str, shares: dict[str, float], seconds: float = 0.5, events: int = 20,
         label: str | None = "cpu") -> dict[str, object]:
    return {"id": f"python:{library}.f{i}", "language": "python", "qualified_name": f"{library}.f{i}",
            "library": library, "code": "def f(): pass\n", "label": label, "shares": shares, "seconds": seconds,
            "events": events}


def test_share_rows_take_every_evidenced_busy_function_of_the_libraries(tmp_path):
    rows = [
        _row("1", "lib", {"cpu": 0.9, "disk": 0.1, "network": 0.0, "waiting": 0.0}),
        _row("2", "lib", {"cpu": 0.25, "disk": 0.25, "network": 0.0, "waiting": 0.5}, label=None),  # a split
        _row("3", "lib", {"cpu": 1.0}, seconds=0.001),  # below the time floor
        _row("4", "lib", {"cpu": 1.0}, events=2),  # below the events floor
        _row("5", "lib", {"cpu": 0.05, "waiting": 0.95}, label="waiting"),  # hardly busy
        _row("6", "other", {"cpu": 1.0}),  # not a wanted library
    ]
    rows.append(dict(rows[0]))  # the same function twice: once
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "python.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = share_rows(tmp_path / "m", {"lib"})
    assert [r["id"] for r in found] == ["python:lib.f1", "python:lib.f2"]
    assert found[0]["busy_shares"] == pytest.approx([0.9, 0.1, 0.0])
    assert found[1]["busy_shares"] == pytest.approx([0.5, 0.5, 0.0])


def test_share_rows_name_a_bad_shares_field(tmp_path):
    (tmp_path / "m").mkdir()
    bad = _row("1", "lib", {"cpu": "lots"})
    (tmp_path / "m" / "jvm.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(BadInputError, match="shares"):
        share_rows(tmp_path / "m", {"lib"})


def _corrupt_config(target: Path) -> None:
    (target / "config.json").write_text("{")


def _other_hashing(target: Path) -> None:
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "hash_bits": 3}))


def _truncated_model(target: Path) -> None:
    (target / "model.npz").write_bytes((target / "model.npz").read_bytes()[:1000])


@pytest.mark.parametrize(("spoil", "named"), [(_corrupt_config, "config.json"), (_other_hashing, "feature hashing"),
                                              (_truncated_model, "model.npz")])
def test_unusable_weights_are_one_line_and_exit_2(tmp_path, capsys, spoil, named):
    from crystalperf.core.cli import main

    weights = _weights_with(tmp_path, 0.5)
    spoil(weights)
    functions = tmp_path / "in.jsonl"
    functions.write_text(json.dumps({"id": "a", "language": "python", "code": "def f(): pass", "doc": ""}) + "\n")
    assert main(["classify", "--input", str(functions), "--weights", str(weights), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "Traceback" not in err
