"""Evaluation helpers: metrics, label flipping, the hard subset, LIME on the shipped model."""

from __future__ import annotations

import pytest

from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.models.classifier import NeuralClassifier
from crystalperf.models.evaluate import (
    evaluate_records,
    flip_labels,
    lime_explain,
    name_gives_answer_away,
    scores,
)
from tests.models.test_unmistakable import CHECKSUM, FILE_WRITE, SOCKET_SEND


def test_scores_per_class_and_macro_f1() -> None:
    s = scores([0, 0, 1, 2], [0, 1, 1, 2])
    assert s["accuracy"] == 0.75
    assert s["per_class"]["cpu"] == {
        "precision": 1.0,
        "recall": 0.5,
        "f1": pytest.approx(2 / 3),
        "support": 2,
    }
    assert s["per_class"]["disk"]["precision"] == 0.5
    assert s["macro_f1"] == pytest.approx((2 / 3 + 2 / 3 + 1.0) / 3)


def test_flip_labels_flips_about_the_rate_and_never_to_the_same_label() -> None:
    rows = [{"label": "cpu"} for _ in range(2000)]
    flipped = flip_labels(rows, 0.2, seed=1)
    changed = sum(r["label"] != "cpu" for r in flipped)
    assert 300 < changed < 500
    assert rows[0]["label"] == "cpu"  # the input is not modified


def test_hard_subset_is_names_without_resource_words() -> None:
    assert name_gives_answer_away({"qualified_name": "java.net.SocketOutputStream.socketWrite"})
    assert not name_gives_answer_away({"qualified_name": "pkg.Codec.encodeAll"})


def test_evaluate_records_scores_neural_and_keyword() -> None:
    rows = [
        {"qualified_name": f"x.f{i}", "language": lang, "code": code, "doc": "", "label": label}
        for i, (label, table) in enumerate(
            (("network", SOCKET_SEND), ("disk", FILE_WRITE), ("cpu", CHECKSUM))
        )
        for lang, code in table.items()
    ]
    report = evaluate_records(rows)
    assert report["n"] == 12
    assert report["combined"]["accuracy"] == 1.0
    assert 0.0 <= report["keyword"]["accuracy"] <= 1.0
    assert set(report["by_language"]) == {"java", "scala", "python", "cpp"}


def test_lime_finds_the_network_words_of_a_socket_loop() -> None:
    neural = NeuralClassifier()
    fn = FunctionSource("x.send_all", "python", SOCKET_SEND["python"], "Send every packet.")
    words = lime_explain(fn, neural.predict_proba, num_samples=150)
    top = {w.lower() for w, _ in words["network"][:5]}
    assert top & {"sendall", "sock", "socket", "packet", "packets", "shutdown", "send_all"}
