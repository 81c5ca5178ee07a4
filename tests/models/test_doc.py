"""The doc classifier: markup stripping, the shipped weights loading offline and reading clear docs right,
and the character-LM trainer running end to end on a few lines."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

from crystalperf.models import LABELS, WEIGHTS_DIR
from crystalperf.models.doc import DocClassifier, strip_markup

DOC_WEIGHTS = WEIGHTS_DIR / "doc"


def test_markup_links_tags_and_punctuation_are_stripped() -> None:
    doc = ("Reads up to {@code len} bytes from the <b>file</b>, see https://example.org/x?y=1.\n"
           "@param len the number of bytes @return the count")
    assert strip_markup(doc) == "Reads up to len bytes from the file see"


@pytest.fixture(scope="module")
def classifier() -> DocClassifier:
    if not (DOC_WEIGHTS / "gru.pt").is_file():
        pytest.fail(f"the doc classifier's weights are not shipped in {DOC_WEIGHTS}")
    return DocClassifier.load(DOC_WEIGHTS)


def test_shipped_weights_load_without_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the doc classifier tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = DocClassifier.load(DOC_WEIGHTS)
    probs = loaded.predict_proba(["Closes the stream."])
    assert probs.shape == (1, 3) and np.allclose(probs.sum(axis=1), 1.0)


@pytest.mark.parametrize(("doc", "label"), [
    ("Sends the request over the socket and waits for the server's reply.", "network"),
    ("Writes the buffer to the file and flushes it to disk.", "disk"),
    ("Computes the CRC32 checksum of the array.", "cpu"),
])
def test_unmistakable_docs(classifier: DocClassifier, doc: str, label: str) -> None:
    probs = classifier.predict_proba([doc])[0]
    assert LABELS[int(probs.argmax())] == label, dict(zip(LABELS, probs.round(3), strict=True))


def test_character_lm_training_runs_end_to_end(tmp_path: Path) -> None:
    from flair.embeddings import FlairEmbeddings

    from crystalperf.models.charlm import train_char_lms

    text = tmp_path / "doctext.txt"
    text.write_text("\n".join(
        f"Reads {i} bytes from the file and returns them to the caller." if i % 2 else
        f"Sends message {i} to the remote peer over the network socket." for i in range(200)))
    figures = train_char_lms(text, tmp_path / "lm", hidden=16, embedding=8, epochs=1, sequence_length=40,
                             batch_size=8, splits=1)
    assert (tmp_path / "lm" / "forward.pt").is_file() and (tmp_path / "lm" / "backward.pt").is_file()
    assert figures["forward_test_loss"] > 0 and figures["vocabulary"] > 20
    embedding = FlairEmbeddings(str(tmp_path / "lm" / "forward.pt"))
    assert embedding.embedding_length == 16
