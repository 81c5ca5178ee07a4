"""Train the forward and backward Flair character language models the doc classifier embeds with.

Pretrained Flair models cannot be downloaded where crystalperf runs (clusters are often offline, and so
is our build machine), so we train small ones on documentation text we can reach: Javadoc and Python
docstrings extracted by the corpus builder (never Spark, Flink or TensorFlow documentation: those are
the frameworks we evaluate on). Flair's ``Dictionary.load('chars')`` downloads too, so the character
dictionary is built from the text itself.

    python -m crystalperf.models.charlm DOCTEXT OUT_DIR [--hidden 128] [--epochs 8] [--max-chars 3000000]

writes ``OUT_DIR/forward.pt`` and ``OUT_DIR/backward.pt`` (loadable with ``FlairEmbeddings(path)``).
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

RARE_CHAR_COUNT = 5  # characters seen fewer times share the unknown symbol


def clean_doc_text(text: str) -> str:
    """One documentation paragraph per line, without markup the classifiers should not learn from."""
    from crystalperf.models.doc import strip_markup

    return strip_markup(text)


def build_dictionary(text: str) -> Any:
    """Flair's character dictionary from the characters of ``text`` (frequent first)."""
    from flair.data import Dictionary

    dictionary = Dictionary(add_unk=True)
    for char, count in Counter(text).most_common():
        if count >= RARE_CHAR_COUNT:
            dictionary.add_item(char)
    dictionary.add_item(" ")
    dictionary.add_item("\n")
    return dictionary


def write_corpus(lines: list[str], folder: Path, seed: int = 0, splits: int = 4) -> None:
    """Flair's ``TextCorpus`` layout: ``train/`` split files, ``valid.txt``, ``test.txt``."""
    rng = random.Random(seed)
    lines = lines[:]
    rng.shuffle(lines)
    held = max(1, len(lines) // 50)
    (folder / "train").mkdir(parents=True, exist_ok=True)
    (folder / "valid.txt").write_text("\n".join(lines[:held]) + "\n", encoding="utf-8")
    (folder / "test.txt").write_text("\n".join(lines[held : 2 * held]) + "\n", encoding="utf-8")
    train = lines[2 * held :]
    size = max(1, len(train) // splits)
    for i in range(splits):
        chunk = train[i * size : (i + 1) * size if i < splits - 1 else len(train)]
        (folder / "train" / f"train_split_{i}").write_text("\n".join(chunk) + "\n", encoding="utf-8")


def train_char_lms(
    doctext: Path,
    out_dir: Path,
    *,
    hidden: int = 128,
    embedding: int = 32,
    epochs: int = 8,
    sequence_length: int = 100,
    batch_size: int = 64,
    max_chars: int = 3_000_000,
    splits: int = 4,
    seed: int = 0,
) -> dict[str, float]:
    """Train both directions; returns the validation loss and time of each."""
    import torch
    from flair.models import LanguageModel
    from flair.trainers.language_model_trainer import LanguageModelTrainer, TextCorpus

    torch.manual_seed(seed)
    random.seed(seed)
    raw = doctext.read_text(encoding="utf-8", errors="replace").splitlines()
    lines, total = [], 0
    for line in raw:
        cleaned = clean_doc_text(line)
        if len(cleaned) >= 20:
            lines.append(cleaned)
            total += len(cleaned) + 1
            if total >= max_chars:
                break
    text = "\n".join(lines)
    dictionary = build_dictionary(text)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures: dict[str, float] = {"chars": float(total), "vocabulary": float(len(dictionary))}
    with tempfile.TemporaryDirectory() as tmp:
        corpus_dir = Path(tmp) / "corpus"
        write_corpus(lines, corpus_dir, seed, splits)
        for direction, forward in (("forward", True), ("backward", False)):
            started = time.monotonic()
            corpus = TextCorpus(corpus_dir, dictionary, forward, character_level=True)
            model = LanguageModel(dictionary, forward, hidden_size=hidden, nlayers=1, embedding_size=embedding)
            trainer = LanguageModelTrainer(model, corpus)
            run_dir = Path(tmp) / direction
            trainer.train(run_dir, sequence_length=sequence_length, mini_batch_size=batch_size,
                          max_epochs=epochs, learning_rate=20.0, patience=10, num_workers=0)
            best = run_dir / "best-lm.pt"
            shutil.copy(best if best.is_file() else run_dir / "final-lm.pt", out_dir / f"{direction}.pt")
            losses = re.findall(r"valid loss\s+([\d.]+)", (run_dir / "loss.txt").read_text())
            figures[f"{direction}_test_loss"] = float(losses[-1]) if losses else float("nan")
            figures[f"{direction}_seconds"] = time.monotonic() - started
            log.info("%s character LM: %.0f s", direction, figures[f"{direction}_seconds"])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("doctext", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--max-chars", type=int, default=3_000_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    figures = train_char_lms(args.doctext, args.out_dir, hidden=args.hidden, epochs=args.epochs,
                                    max_chars=args.max_chars)
    for key, value in figures.items():
        print(f"{key}: {value:.4g}")  # noqa: T201


if __name__ == "__main__":
    main()
