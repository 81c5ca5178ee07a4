"""The documentation classifier (paper §3.2): Flair character-LM embeddings -> GRU -> softmax.

A doc comment is stripped of markup, punctuation and links, split into words, and each word embedded by
our own forward and backward Flair character language models (``charlm.py``; nothing is downloaded).
The embeddings are computed once per document and a small bidirectional GRU reads them; its last states
feed a linear layer over <cpu, disk, network>.

Weights: ``weights/doc/{forward.pt, backward.pt, gru.pt, config.json}``.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crystalperf.models import LABELS

log = logging.getLogger(__name__)

MAX_WORDS = 64  # the first sentences of a doc comment say what the function does; the rest is @param noise

_LINK = re.compile(r"https?://\S+|www\.\S+")
_INLINE_TAG = re.compile(r"\{@(?:code|link|linkplain|literal|value)\s+([^}]*)\}")
_HTML = re.compile(r"<[^>]{1,40}>")
_BLOCK_TAG = re.compile(r"@(param|return|throws|exception|see|since|author|version|deprecated)\b.*", re.S)
_PUNCT = re.compile(r"[^\w\s]+")


def strip_markup(doc: str) -> str:
    """Plain words of a doc comment: links, HTML, Javadoc block tags (@param...) and punctuation go."""
    text = _LINK.sub(" ", doc)
    text = _INLINE_TAG.sub(r" \1 ", text)
    text = _HTML.sub(" ", text)
    text = _BLOCK_TAG.sub(" ", text)
    text = _PUNCT.sub(" ", text)
    return " ".join(text.split())


def _words(doc: str) -> list[str]:
    return strip_markup(doc).split()[:MAX_WORDS]


class _Embedder:
    """Word vectors from the two character LMs (contextual: each word's vector depends on its doc)."""

    def __init__(self, weights_dir: Path) -> None:
        from flair.embeddings import FlairEmbeddings, StackedEmbeddings

        self.embeddings = StackedEmbeddings([
            FlairEmbeddings(str(weights_dir / "forward.pt")),
            FlairEmbeddings(str(weights_dir / "backward.pt")),
        ])
        self.dim = self.embeddings.embedding_length

    def embed(self, docs: Sequence[str], batch_size: int = 64) -> list[Any]:
        import torch
        from flair.data import Sentence

        out: list[Any] = []
        for i in range(0, len(docs), batch_size):
            sentences = [Sentence(_words(d) or ["empty"]) for d in docs[i : i + batch_size]]
            with torch.no_grad():
                self.embeddings.embed(sentences)
            for s in sentences:
                out.append(torch.stack([t.embedding.detach().cpu() for t in s]))
                s.clear_embeddings()
        return out


def _gru_model(input_dim: int, hidden: int) -> Any:
    import torch
    from torch import nn

    class DocGRU(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(input_dim, hidden, batch_first=True, bidirectional=True)
            self.dropout = nn.Dropout(0.3)
            self.head = nn.Linear(2 * hidden + input_dim, len(LABELS))

        def forward(self, padded: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            packed = nn.utils.rnn.pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
            _, last = self.gru(packed)  # [2, batch, hidden]: the forward and the backward final states
            # The mean word vector next to the GRU's states: with two thousand labelled docs the GRU
            # alone overfits to word order; the mean keeps the bag of words it would otherwise forget.
            mean = padded.sum(dim=1) / lengths.unsqueeze(1).to(padded.dtype)
            return self.head(self.dropout(torch.cat([last[0], last[1], mean], dim=1)))

    return DocGRU()


def _pad(vectors: Sequence[Any]) -> tuple[Any, Any]:
    import torch
    from torch import nn

    lengths = torch.tensor([len(v) for v in vectors])
    return nn.utils.rnn.pad_sequence(list(vectors), batch_first=True), lengths


class DocClassifier:
    """Loaded offline from ``weights/doc``; ``predict_proba(docs) -> [n, 3]``."""

    def __init__(self, weights_dir: Path, embedder: _Embedder, model: Any) -> None:
        self.weights_dir = weights_dir
        self.embedder = embedder
        self.model = model

    @classmethod
    def load(cls, weights_dir: Path) -> DocClassifier:
        import torch

        weights_dir = Path(weights_dir)
        config = json.loads((weights_dir / "config.json").read_text())
        embedder = _Embedder(weights_dir)
        model = _gru_model(embedder.dim, int(config["gru_hidden"]))
        model.load_state_dict(torch.load(weights_dir / "gru.pt", map_location="cpu", weights_only=True))
        model.eval()
        return cls(weights_dir, embedder, model)

    def predict_proba(self, docs: Sequence[str], batch_size: int = 64) -> np.ndarray:
        import torch

        if not docs:
            return np.zeros((0, len(LABELS)))
        vectors = self.embedder.embed(docs, batch_size)
        out = []
        with torch.no_grad():
            for i in range(0, len(vectors), batch_size):
                padded, lengths = _pad(vectors[i : i + batch_size])
                out.append(torch.softmax(self.model(padded, lengths), dim=1).numpy())
        return np.concatenate(out)


def train_doc_classifier(
    train: Sequence[dict[str, Any]],
    val: Sequence[dict[str, Any]],
    weights_dir: Path,
    *,
    gru_hidden: int = 64,
    epochs: int = 15,
    batch_size: int = 32,
    seed: int = 0,
) -> dict[str, float]:
    """Train the GRU on the corpus functions that have docs (the character LMs must already be in
    ``weights_dir``); keeps the epoch with the best validation accuracy."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    rng = random.Random(seed)
    started = time.monotonic()
    train = [r for r in train if strip_markup(r.get("doc") or "")]
    val = [r for r in val if strip_markup(r.get("doc") or "")]
    embedder = _Embedder(weights_dir)
    x_train = embedder.embed([r["doc"] for r in train])
    x_val = embedder.embed([r["doc"] for r in val])
    y_train = torch.tensor([LABELS.index(r["label"]) for r in train])
    y_val = np.asarray([LABELS.index(r["label"]) for r in val])
    embed_seconds = time.monotonic() - started
    counts = torch.bincount(y_train, minlength=len(LABELS)).float()
    loss_fn = nn.CrossEntropyLoss(weight=counts.sum() / (len(LABELS) * counts.clamp(min=1)))
    model = _gru_model(embedder.dim, gru_hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, weight_decay=1e-5)
    best_acc, best_state = -1.0, None
    order = list(range(len(x_train)))
    for epoch in range(epochs):
        model.train()
        rng.shuffle(order)
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            padded, lengths = _pad([x_train[k] for k in idx])
            optimizer.zero_grad()
            loss = loss_fn(model(padded, lengths), y_train[idx])
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        model.eval()
        with torch.no_grad():
            preds = np.concatenate([
                model(*_pad(x_val[i : i + 256])).argmax(dim=1).numpy() for i in range(0, len(x_val), 256)
            ]) if x_val else np.zeros(0)
        acc = float((preds == y_val).mean()) if len(y_val) else 0.0
        log.info("doc classifier epoch %d: validation accuracy %.3f", epoch + 1, acc)
        if acc > best_acc:
            best_acc, best_state = acc, {k: v.clone() for k, v in model.state_dict().items()}
    assert best_state is not None
    torch.save(best_state, weights_dir / "gru.pt")
    (weights_dir / "config.json").write_text(json.dumps({"gru_hidden": gru_hidden, "max_words": MAX_WORDS}))
    return {"doc_train": float(len(train)), "doc_val_accuracy": best_acc, "doc_embed_seconds": embed_seconds,
            "doc_seconds": time.monotonic() - started}
