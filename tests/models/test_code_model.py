"""The recursive autoencoder: binarised trees, level-by-level batching, a tiny training run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from crystalperf.models.classifier import (
    NeuralClassifier,
    WeightsMissingError,
    calibrate,
    combine,
    combine_weighted,
    fit_combination,
)
from crystalperf.models.code import (
    UNK,
    CodeClassifier,
    CodeConfig,
    RecursiveAutoencoder,
    binarise,
    make_batch,
    train_code_classifier,
)

JAVA = "int add(int left, int right) { return Math.addExact(left, right); }"
PYTHON = "def read_all(path):\n    with open(path) as fh:\n        return fh.read()\n"


def test_binarised_tree_is_binary_with_identifier_leaves() -> None:
    vocab = {"<pad>": 0, "<unk>": 1, "add": 2, "left": 3, "right": 4, "math": 5}
    tree = binarise(JAVA, "java", vocab)
    internal = tree.token < 0
    assert (tree.left[internal] >= 0).all() and (tree.right[internal] >= 0).all()
    # post-order: children precede parents, the root is last and has the greatest height
    assert (tree.left[internal] < np.nonzero(internal)[0]).all()
    assert tree.height[-1] == tree.height.max()
    leaves = tree.token[~internal]
    # identifiers split into sub-tokens (addExact -> add, exact); "exact" is not in the vocabulary
    assert sorted(leaves.tolist()) == sorted([2, 3, 4, 5, 2, UNK, 3, 4])


def _recursive_root(model: RecursiveAutoencoder, tree, node: int) -> torch.Tensor:  # type: ignore[no-untyped-def]
    if tree.token[node] >= 0:
        return torch.tanh(model.embedding(torch.tensor([tree.token[node]])))[0]
    children = torch.cat(
        [_recursive_root(model, tree, tree.left[node]), _recursive_root(model, tree, tree.right[node])]
    )
    return torch.tanh(model.compose(children))


def test_level_batching_matches_node_by_node_recursion() -> None:
    torch.manual_seed(0)
    model = RecursiveAutoencoder(CodeConfig(dim=8, vocab_size=10)).eval()
    vocab = {"<pad>": 0, "<unk>": 1, "read": 2, "all": 3, "path": 4, "open": 5, "fh": 6}
    trees = [binarise(PYTHON, "python", vocab), binarise(JAVA, "java", vocab)]
    with torch.no_grad():
        summary, _ = model.encode(make_batch(trees))
        for i, tree in enumerate(trees):
            assert torch.allclose(summary[i, :8], _recursive_root(model, tree, tree.size - 1), atol=1e-6)


def _records() -> list[dict[str, str]]:
    rows = []
    for i in range(4):
        rows.append(
            {
                "language": "python",
                "label": "network",
                "code": f"def send_{i}(sock, data):\n    sock.sendall(data)\n    return sock.recv(1024)\n",
            }
        )
        rows.append(
            {
                "language": "python",
                "label": "disk",
                "code": f"def save_{i}(path, data):\n    with open(path, 'wb') as fh:\n        fh.write(data)\n",
            }
        )
        rows.append(
            {
                "language": "java",
                "label": "cpu",
                "code": f"int sum{i}(int[] values) {{ int s = 0; for (int v : values) s += v * v; return s; }}",
            }
        )
    return rows


def test_tiny_training_run_saves_loadable_weights(tmp_path: Path) -> None:
    rows = _records()
    trained = train_code_classifier(rows, rows[:3], tmp_path / "code", epochs=2, dim=8, progress=False)
    loaded = CodeClassifier.load(tmp_path / "code")
    codes = [r["code"] for r in rows]
    langs = [r["language"] for r in rows]
    a = trained.predict_proba(codes, langs)
    b = loaded.predict_proba(codes, langs)
    assert a.shape == (len(rows), 3)
    np.testing.assert_allclose(a.sum(1), 1.0, atol=1e-5)
    np.testing.assert_allclose(a, b, atol=5e-3)  # weights are shipped as float16


def test_missing_weights_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WeightsMissingError, match="code classifier weights missing"):
        NeuralClassifier(tmp_path)


def test_combination_averages_only_where_a_doc_exists() -> None:
    code = np.array([[0.8, 0.1, 0.1], [0.2, 0.2, 0.6]])
    doc = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    out = combine(code, doc, np.array([True, False]))
    np.testing.assert_allclose(out, [[0.4, 0.55, 0.05], [0.2, 0.2, 0.6]])


def test_calibration_keeps_the_ranking_and_sharpens_or_softens() -> None:
    probs = np.array([[0.6, 0.3, 0.1]])
    sharper = calibrate(probs, 0.5)
    softer = calibrate(probs, 2.0)
    assert sharper.argmax() == softer.argmax() == 0
    assert sharper[0, 0] > 0.6 > softer[0, 0]
    np.testing.assert_allclose(calibrate(probs, 1.0), probs)


def test_weighted_combination_trusts_the_more_confident_classifier() -> None:
    code = np.array([[0.4, 0.35, 0.25], [0.1, 0.1, 0.8]])
    doc = np.array([[0.0, 0.95, 0.05], [0.9, 0.05, 0.05]])
    params = {"code_temperature": 1.0, "doc_temperature": 1.0, "doc_weight": 0.5}
    out = combine_weighted(code, doc, np.array([True, False]), params)
    assert out[0].argmax() == 1  # the confident doc outvotes an unsure code vector
    np.testing.assert_allclose(out[1], code[1])  # no doc: code alone
    np.testing.assert_allclose(out.sum(axis=1), 1.0)
    only_code = combine_weighted(code, doc, np.array([True, True]), {**params, "doc_weight": 0.0})
    np.testing.assert_allclose(only_code, code)


def test_fitting_the_combination_ignores_a_doc_classifier_that_only_misleads() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    code = np.full((200, 3), 0.2)
    code[np.arange(200), y] = 0.6
    doc = np.full((200, 3), 0.05)
    doc[np.arange(200), (y + 1) % 3] = 0.9
    params = fit_combination(code, doc, np.ones(200, dtype=bool), y)
    assert params["doc_weight"] == 0.0
    assert params["validation_accuracy"] == 1.0
