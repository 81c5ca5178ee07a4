"""Measured training labels: ``/work/data/measured/*.jsonl`` rows (JFR, profiled or strace-verified
functions; format in docs/models.md) read, deduplicated and split by library.

Only rows with a label take part; the split is by library (a seeded hash, ~70/10/20, stratified by each
library's majority class) so no library's names are on both sides, and a ``#bytecode`` twin shares its
library, hence its split, with the source row it renders.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crystalperf.core.errors import BadInputError
from crystalperf.models.sparse import LABELS4

LANGUAGES = ("java", "scala", "python", "cpp")
REQUIRED = ("id", "language", "qualified_name", "library", "code", "label")


def read_measured(directory: Path) -> list[dict[str, Any]]:
    """Every labelled row of every ``*.jsonl`` in ``directory`` (first occurrence of an id wins); a
    malformed row is a BadInputError naming the file and line."""
    if not directory.is_dir():
        raise BadInputError("measured-label directory not found", directory)
    files = sorted(directory.glob("*.jsonl"))
    if not files:
        raise BadInputError("no *.jsonl files of measured functions", directory)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for path in files:
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BadInputError(f"line {number} is not JSON ({exc.msg})", path) from None
                if not isinstance(row, dict):
                    raise BadInputError(f"line {number} is not a JSON object", path)
                if row.get("label") is None:
                    continue  # too little evidence or no dominant resource: kept for analysis only
                missing = [k for k in REQUIRED if k not in row]
                if missing:
                    raise BadInputError(f"line {number} lacks {', '.join(missing)}", path)
                if row["label"] not in LABELS4:
                    raise BadInputError(f"line {number}: label {row['label']!r} is not one of {LABELS4}", path)
                if row["language"] not in LANGUAGES:
                    raise BadInputError(f"line {number}: language {row['language']!r} is unknown", path)
                if row["id"] in seen:
                    continue
                seen.add(row["id"])
                row["doc"] = row.get("doc") or ""
                row["origin"] = row.get("origin") or "source"
                rows.append(row)
    return rows


def _hash(text: str, seed: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\0{text}".encode()).digest()[:8], "big")


def split_by_library(
    rows: Sequence[dict[str, Any]], *, seed: int = 0, test: float = 0.2, val: float = 0.1
) -> None:
    """Sets ``split`` on every row: whole libraries go to test / val / train, per majority class, in an
    order given by a seeded hash, until each class's test and val shares are reached."""
    per_library: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        per_library[r["library"]][r["label"]] += 1
    by_majority: dict[str, list[str]] = defaultdict(list)
    for library, counts in per_library.items():
        by_majority[counts.most_common(1)[0][0]].append(library)
    assignment: dict[str, str] = {}
    targets = {"test": test, "val": val}
    for libraries in by_majority.values():
        total = sum(sum(per_library[lib].values()) for lib in libraries)
        taken = {"test": 0, "val": 0}
        for library in sorted(libraries, key=lambda lib: _hash(lib, seed)):
            size = sum(per_library[library].values())
            split = "train"
            if len(libraries) >= 3:
                for held_out, share in targets.items():
                    # A library that would overshoot its share by half (one huge library holding most of a
                    # class) trains instead: held out, it would leave training without that class.
                    if taken[held_out] < share * total and taken[held_out] + size <= 1.5 * share * total:
                        split = held_out
                        taken[held_out] += size
                        break
            assignment[library] = split
    for r in rows:
        r["split"] = assignment[r["library"]]


def measured_splits(
    directory: Path, *, seed: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, val, test) of the labelled measured functions in ``directory``."""
    rows = read_measured(directory)
    split_by_library(rows, seed=seed)
    by = {s: [r for r in rows if r["split"] == s] for s in ("train", "val", "test")}
    return by["train"], by["val"], by["test"]


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Counts per split/language and label."""
    table: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(LABELS4, 0))
    for r in rows:
        table[f"{r.get('split', '?')}/{r['language']}"][r["label"]] += 1
        table["all"][r["label"]] += 1
    return dict(table)
