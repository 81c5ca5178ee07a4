"""The code classifier (paper §3.2): a recursive autoencoder over the function's binarised AST.

tree-sitter parses the function; each AST node's children are folded pairwise into a balanced binary
tree; the leaves are the identifier sub-tokens (``readFully`` -> ``read``, ``fully``) with learned
embeddings (rare and unseen sub-tokens share an ``<unk>`` embedding). A parent is
``p = tanh(W [s1; s2] + b)``; a decoder reconstructs ``[s1; s2]`` from ``p`` (the autoencoder loss) and
a linear softmax head reads the root. Trees are evaluated level by level over a whole batch, so one
tensor operation covers every node of that height in every tree.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from crystalperf.core.attribution.classify import subtokens
from crystalperf.models import LABELS
from crystalperf.models.sources import parser_for

log = logging.getLogger(__name__)

IDENTIFIER_TYPES = frozenset(
    {
        "identifier",
        "type_identifier",
        "field_identifier",
        "namespace_identifier",
        "property_identifier",
        "package_identifier",
        "operator_identifier",
    }
)
PAD, UNK = 0, 1
MAX_LEAVES = 400


@dataclass(frozen=True)
class Tree:
    """A binarised AST in post-order: leaves carry a token id, internal nodes two child indices."""

    token: np.ndarray  # int64 [n]; -1 for internal nodes
    left: np.ndarray  # int64 [n]; -1 for leaves
    right: np.ndarray  # int64 [n]
    height: np.ndarray  # int64 [n]; 0 for leaves

    @property
    def size(self) -> int:
        return int(self.token.shape[0])


def leaf_tokens(code: str, language: str) -> list[list[str]]:
    """Identifier sub-tokens grouped by AST node (used for vocabularies and LIME)."""
    return [toks for toks in _walk_identifiers(code, language)]


def _walk_identifiers(code: str, language: str) -> list[list[str]]:
    tree = parser_for(language).parse(code.encode("utf-8", errors="replace"))
    out: list[list[str]] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type in IDENTIFIER_TYPES:
            toks = subtokens(node.text.decode("utf-8", errors="replace"))
            if toks:
                out.append(toks)
        else:
            stack.extend(reversed(node.children))
    return out


def binarise(code: str, language: str, vocab: dict[str, int]) -> Tree:
    """Parse ``code`` and fold its AST into a binary tree over identifier sub-tokens."""
    ast = parser_for(language).parse(code.encode("utf-8", errors="replace"))
    token: list[int] = []
    left: list[int] = []
    right: list[int] = []
    height: list[int] = []

    def new_leaf(tok: str) -> int:
        token.append(vocab.get(tok, UNK))
        left.append(-1)
        right.append(-1)
        height.append(0)
        return len(token) - 1

    def fold(items: list[int]) -> int:
        # Pairwise rounds give a balanced tree, so depth grows with log(children), not children.
        while len(items) > 1:
            nxt = []
            for i in range(0, len(items) - 1, 2):
                a, b = items[i], items[i + 1]
                token.append(-1)
                left.append(a)
                right.append(b)
                height.append(max(height[a], height[b]) + 1)
                nxt.append(len(token) - 1)
            if len(items) % 2:
                nxt.append(items[-1])
            items = nxt
        return items[0]

    leaves = 0
    # Iterative post-order walk: (node, visited) pairs; results[] holds each node's subtree root.
    results: list[list[int]] = [[]]
    stack: list[tuple[object, bool]] = [(ast.root_node, False)]
    while stack:
        node, visited = stack.pop()
        if node.type in IDENTIFIER_TYPES:  # type: ignore[attr-defined]
            if leaves >= MAX_LEAVES:
                continue
            toks = subtokens(node.text.decode("utf-8", errors="replace"))[:6]  # type: ignore[attr-defined]
            if toks:
                leaves += len(toks)
                results[-1].append(fold([new_leaf(t) for t in toks]))
            continue
        if not visited:
            stack.append((node, True))
            results.append([])
            stack.extend((c, False) for c in reversed(node.children))  # type: ignore[attr-defined]
        else:
            children = results.pop()
            if children:
                results[-1].append(fold(children))
    roots = results[0]
    if not roots:
        new_leaf("<unk>")
    else:
        fold(roots)
    return Tree(
        np.asarray(token, dtype=np.int64),
        np.asarray(left, dtype=np.int64),
        np.asarray(right, dtype=np.int64),
        np.asarray(height, dtype=np.int64),
    )


@dataclass
class Batch:
    """Several trees flattened into one node array, with per-level index groups."""

    leaf_index: torch.Tensor
    leaf_token: torch.Tensor
    levels: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # (node, left, right) per height
    roots: torch.Tensor
    size: int
    tree_of_node: torch.Tensor
    tree_sizes: torch.Tensor


def make_batch(trees: Sequence[Tree]) -> Batch:
    offsets = np.cumsum([0] + [t.size for t in trees])
    token = np.concatenate([t.token for t in trees])
    left = np.concatenate(
        [np.where(t.left >= 0, t.left + o, -1) for t, o in zip(trees, offsets, strict=False)]
    )
    right = np.concatenate(
        [np.where(t.right >= 0, t.right + o, -1) for t, o in zip(trees, offsets, strict=False)]
    )
    height = np.concatenate([t.height for t in trees])
    leaf = np.nonzero(height == 0)[0]
    order = np.argsort(height[height > 0], kind="stable")
    internal = np.nonzero(height > 0)[0][order]
    levels = []
    if internal.size:
        hs = height[internal]
        bounds = np.nonzero(np.diff(hs))[0] + 1
        for group in np.split(internal, bounds):
            levels.append(
                (torch.from_numpy(group), torch.from_numpy(left[group]), torch.from_numpy(right[group]))
            )
    roots = offsets[1:] - 1
    return Batch(
        torch.from_numpy(leaf),
        torch.from_numpy(token[leaf]),
        levels,
        torch.from_numpy(roots),
        int(offsets[-1]),
        torch.from_numpy(np.repeat(np.arange(len(trees)), [t.size for t in trees])),
        torch.tensor([float(t.size) for t in trees]),
    )


@dataclass
class CodeConfig:
    dim: int = 64
    vocab_size: int = 2
    reconstruction_weight: float = 1.0
    dropout: float = 0.25


class RecursiveAutoencoder(nn.Module):
    """Embeddings, the shared composition ``tanh(W[s1;s2]+b)``, its decoder and the softmax head."""

    def __init__(self, config: CodeConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.dim, padding_idx=PAD)
        self.compose = nn.Linear(2 * config.dim, config.dim)
        self.decode = nn.Linear(config.dim, 2 * config.dim)
        # The head reads the root and the mean of all node vectors: on libraries never seen in training
        # the root alone overfits (held-out accuracy fell ~8 points in our runs), the mean is steadier.
        self.head = nn.Linear(2 * config.dim, len(LABELS))
        self.dropout = nn.Dropout(config.dropout)

    def encode(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Root vectors [n_trees, dim] and the mean squared reconstruction error over internal nodes."""
        dim = self.config.dim
        states = torch.zeros(batch.size, dim)
        leaves = self.dropout(torch.tanh(self.embedding(batch.leaf_token)))
        states = states.index_put((batch.leaf_index,), leaves)
        rec_total = torch.zeros(())
        count = 0
        for node, left, right in batch.levels:
            children = torch.cat([states[left], states[right]], dim=1)
            parent = torch.tanh(self.compose(children))
            if self.training:
                rebuilt = torch.tanh(self.decode(parent))
                rec_total = rec_total + ((rebuilt - children.detach()) ** 2).sum()
                count += children.numel()
            if torch.is_grad_enabled():
                states = states.index_put((node,), parent)
            else:  # inference: no autograd history to keep, write in place instead of copying per level
                states[node] = parent
        sums = torch.zeros(batch.roots.shape[0], dim).index_add(0, batch.tree_of_node, states)
        means = sums / batch.tree_sizes[:, None]
        return torch.cat([states[batch.roots], means], dim=1), rec_total / max(count, 1)

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        summary, rec = self.encode(batch)
        return self.head(self.dropout(summary)), rec


def build_vocab(
    token_lists: Sequence[list[list[str]]], min_count: int = 2, max_size: int = 30000
) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for groups in token_lists:
        for group in groups:
            counts.update(group)
    vocab = {"<pad>": PAD, "<unk>": UNK}
    for tok, n in counts.most_common(max_size):
        if n < min_count:
            break
        vocab[tok] = len(vocab)
    return vocab


class CodeClassifier:
    """A trained recursive autoencoder with its vocabulary; loads from and saves to a directory."""

    def __init__(self, model: RecursiveAutoencoder, vocab: dict[str, int]) -> None:
        self.model = model.eval()
        self.vocab = vocab

    @classmethod
    def load(cls, weights_dir: Path) -> CodeClassifier:
        config = CodeConfig(**json.loads((weights_dir / "config.json").read_text()))
        vocab = json.loads((weights_dir / "vocab.json").read_text())
        model = RecursiveAutoencoder(config)
        state = torch.load(weights_dir / "model.pt", map_location="cpu", weights_only=True)
        model.load_state_dict({k: v.float() for k, v in state.items()})
        return cls(model, vocab)

    def save(self, weights_dir: Path) -> None:
        weights_dir.mkdir(parents=True, exist_ok=True)
        (weights_dir / "config.json").write_text(json.dumps(asdict(self.model.config)))
        (weights_dir / "vocab.json").write_text(json.dumps(self.vocab))
        # float16 halves the shipped size; the model is evaluated in float32 after loading.
        torch.save({k: v.half() for k, v in self.model.state_dict().items()}, weights_dir / "model.pt")

    def trees(self, codes: Sequence[str], languages: Sequence[str]) -> list[Tree]:
        return [binarise(c, lang, self.vocab) for c, lang in zip(codes, languages, strict=True)]

    @torch.no_grad()
    def predict_proba(
        self, codes: Sequence[str], languages: Sequence[str], batch_size: int = 128
    ) -> np.ndarray:
        """[n, 3] probabilities in the order cpu, disk, network."""
        trees = self.trees(codes, languages)
        return self.predict_trees(trees, batch_size)

    @torch.no_grad()
    def predict_trees(self, trees: Sequence[Tree], batch_size: int = 128) -> np.ndarray:
        out = []
        for i in range(0, len(trees), batch_size):
            logits, _ = self.model(make_batch(trees[i : i + batch_size]))
            out.append(torch.softmax(logits, dim=1).numpy())
        return np.concatenate(out) if out else np.zeros((0, len(LABELS)), dtype=np.float32)


def weights_hash(weights_dir: Path) -> str:
    """Content hash of a weights directory (what the classifier's version is derived from)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in weights_dir.rglob("*") if p.is_file()):
        digest.update(path.relative_to(weights_dir).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def train_code_classifier(
    train: Sequence[dict[str, str]],
    val: Sequence[dict[str, str]],
    out_dir: Path,
    *,
    seed: int = 0,
    epochs: int = 8,
    dim: int = 64,
    batch_size: int = 32,
    lr: float = 3e-3,
    progress: bool = True,
    on_epoch: Callable[[int, float, float], None] | None = None,
) -> CodeClassifier:
    """Train on records' ``code``/``language``/``label``; keeps the epoch with the best val accuracy."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    started = time.monotonic()
    vocab = build_vocab([leaf_tokens(r["code"], r["language"]) for r in train])
    train_trees = [binarise(r["code"], r["language"], vocab) for r in train]
    val_trees = [binarise(r["code"], r["language"], vocab) for r in val]
    y_train = torch.tensor([LABELS.index(r["label"]) for r in train])
    y_val = np.asarray([LABELS.index(r["label"]) for r in val])
    config = CodeConfig(dim=dim, vocab_size=len(vocab))
    model = RecursiveAutoencoder(config)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-3)
    classifier = CodeClassifier(model, vocab)
    best_acc, best_state = -1.0, None
    rng = np.random.default_rng(seed)
    bar = _progress(progress)
    for epoch in range(epochs):
        model.train()
        order = rng.permutation(len(train_trees))
        total = 0.0
        batches = range(0, len(order), batch_size)
        for start in bar(batches, f"code epoch {epoch + 1}/{epochs}"):
            idx = order[start : start + batch_size]
            trees = [_dropout_tokens(train_trees[i], rng) for i in idx]
            logits, rec = model(make_batch(trees))
            loss = nn.functional.cross_entropy(logits, y_train[idx]) + config.reconstruction_weight * rec
            optimiser.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimiser.step()
            total += float(loss.detach()) * len(idx)
        model.eval()
        val_acc = float((classifier.predict_trees(val_trees).argmax(1) == y_val).mean()) if val_trees else 0.0
        log.info("code epoch %d: loss %.4f val acc %.3f", epoch + 1, total / len(order), val_acc)
        if on_epoch:
            on_epoch(epoch + 1, total / len(order), val_acc)
        if val_acc > best_acc:
            best_acc = val_acc
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    classifier.save(out_dir)
    log.info("code classifier trained in %.0f s (best val acc %.3f)", time.monotonic() - started, best_acc)
    return classifier


def _dropout_tokens(tree: Tree, rng: np.random.Generator, rate: float = 0.05) -> Tree:
    # Replacing a few known tokens by <unk> in training teaches the <unk> embedding something useful.
    mask = (tree.token > UNK) & (rng.random(tree.size) < rate)
    if not mask.any():
        return tree
    token = tree.token.copy()
    token[mask] = UNK
    return Tree(token, tree.left, tree.right, tree.height)


def _progress(enabled: bool) -> Callable[[Sequence[int] | range, str], Iterable[int]]:
    def bar(items: Sequence[int] | range, description: str) -> Iterable[int]:
        if not enabled:
            return items
        from rich.progress import track

        return track(items, description=description, transient=True)

    return bar
