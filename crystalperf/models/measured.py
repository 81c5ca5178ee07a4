"""Measured training labels: ``*.jsonl`` (or gzip-compressed ``*.jsonl.gz``) rows of JFR-, profiler- or
strace-measured functions (format in docs/models.md) read, deduplicated and split by library.

The measurement behind the shipped weights is kept in the repository (``data/measured/*.jsonl.gz``, written
by :func:`keep_measurement`, ``python -m crystalperf.models.measured keep SRC DST``): a measurement takes an
hour and differs a little every time, so the corpus the weights were trained on is the only way
``crystalperf train`` can reproduce them.

Only rows with a label take part; the split is by library (a seeded hash, ~70/10/20, stratified by each
library's majority class) so no library's names are on both sides, and a ``#bytecode`` twin shares its
library, hence its split, with the source row it renders.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import zlib
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from crystalperf.core.errors import BadInputError
from crystalperf.models.sparse import LABELS4

LANGUAGES = ("java", "scala", "python", "cpp")
REQUIRED = ("id", "language", "qualified_name", "library", "code", "label")
SUFFIXES = (".jsonl", ".jsonl.gz")


def measured_files(directory: Path) -> list[Path]:
    """The measured-function files in ``directory``, in name order."""
    if not directory.is_dir():
        raise BadInputError("measured-label directory not found", directory)
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
    if not files:
        raise BadInputError("no *.jsonl or *.jsonl.gz files of measured functions", directory)
    return files


def measured_lines(path: Path) -> Iterator[str]:
    """The text lines of a plain or gzip-compressed measured file; a file that cannot be read is a
    BadInputError naming it."""
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                yield from fh
        else:
            with path.open(encoding="utf-8") as fh:
                yield from fh
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise BadInputError(f"cannot be read ({exc})", path) from None
    except UnicodeDecodeError:
        raise BadInputError("is not UTF-8 text", path) from None


def json_lines(path: Path) -> Iterator[tuple[int, str, Any]]:
    """(line number, text, decoded JSON) of each non-blank line; a line that is not JSON is a BadInputError
    naming it and the file."""
    for number, line in enumerate(measured_lines(path), 1):
        if not line.strip():
            continue
        try:
            yield number, line, json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"line {number} is not JSON ({exc.msg})", path) from None


def files_sha256(directory: Path) -> dict[str, str]:
    """The first 16 hex digits of each file's SHA-256, of its decompressed text (so the compression level
    and gzip's header do not change it; a plain file and its ``.gz`` hash alike), by file name."""
    hashes: dict[str, str] = {}
    for path in measured_files(directory):
        digest = hashlib.sha256()
        for line in measured_lines(path):
            digest.update(line.encode("utf-8"))
        hashes[path.name] = digest.hexdigest()[:16]
    return hashes


def read_measured(directory: Path) -> list[dict[str, Any]]:
    """Every labelled row of every measured file in ``directory`` (first occurrence of an id wins); a
    malformed row is a BadInputError naming the file and line."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for path in measured_files(directory):
        for number, _line, row in json_lines(path):
            if not isinstance(row, dict):
                raise BadInputError(f"line {number} is not a JSON object", path)
            if row.get("label") is None:
                continue  # too little evidence or no dominant resource: kept for analysis only
            missing = [k for k in REQUIRED if k not in row]
            if missing:
                raise BadInputError(f"line {number} lacks {', '.join(missing)}", path)
            not_text = [k for k in REQUIRED if not isinstance(row[k], str)]
            if not_text:
                raise BadInputError(f"line {number}: {', '.join(not_text)} must be text", path)
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


def keep_measurement(source: Path, target: Path, *, labelled_only: bool = False) -> dict[str, int]:
    """Each measured file of ``source`` written to ``target`` as ``<name>.jsonl.gz``, its rows' text and order
    unchanged (training reads rows in order), gzip without a timestamp so the same rows give the same bytes.
    The unlabelled rows are kept unless ``labelled_only``: they hold measured shares too (for relabelling at
    other thresholds, and every method seen on a recorded stack, for call graphs). Returns rows per file."""
    files = measured_files(source)
    target.mkdir(parents=True, exist_ok=True)
    written: dict[str, int] = {}
    for path in files:
        name = path.name if path.name.endswith(".gz") else path.name + ".gz"
        written_rows = 0
        tmp = target / f".{name}.tmp"
        try:
            with open(tmp, "wb") as raw, gzip.GzipFile(
                filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0
            ) as out:
                for _number, line, row in json_lines(path):
                    if isinstance(row, dict) and (row.get("label") is not None or not labelled_only):
                        out.write(line.rstrip("\n").encode("utf-8") + b"\n")
                        written_rows += 1
            tmp.replace(target / name)
        finally:
            tmp.unlink(missing_ok=True)
        written[name] = written_rows
    return written


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


# What a function's measured shares need to be worth fitting to: the labelling floors of both measurements
# (crystalperf.models.measure), and enough busy time that its <cpu, disk, network> split is not a few samples.
SHARE_MIN_SECONDS = 0.01
SHARE_MIN_EVENTS = 5
SHARE_MIN_BUSY = 0.2


def share_rows(directory: Path, libraries: Collection[str]) -> list[dict[str, Any]]:
    """The measured functions of ``libraries``, labelled or not, whose shares clear the floors above, each once,
    with ``busy_shares``: its <cpu, disk, network> shares over their sum. Unlabelled rows count: a function that
    split its time 50/50 is what a share fit must see, and a labelled-only set has none."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for path in measured_files(directory):
        for number, _line, row in json_lines(path):
            if not isinstance(row, dict) or row.get("library") not in libraries or row.get("id") in seen:
                continue
            shares = row.get("shares")
            if not isinstance(shares, dict) or not all(
                isinstance(shares.get(c, 0.0), (int, float)) and shares.get(c, 0.0) >= 0 for c in LABELS4
            ):
                raise BadInputError(f"line {number}: shares must map {', '.join(LABELS4)} to numbers >= 0", path)
            busy = [float(shares.get(c, 0.0)) for c in LABELS4[:3]]
            seconds, events = row.get("seconds"), row.get("events")
            evidence = (isinstance(seconds, (int, float)) and isinstance(events, (int, float))
                        and seconds >= SHARE_MIN_SECONDS and events >= SHARE_MIN_EVENTS)
            if not evidence or sum(busy) < SHARE_MIN_BUSY or not isinstance(row.get("code"), str):
                continue
            seen.add(row["id"])
            rows.append({**row, "busy_shares": [b / sum(busy) for b in busy]})
    return rows


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Counts per split/language and label."""
    table: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(LABELS4, 0))
    for r in rows:
        table[f"{r.get('split', '?')}/{r['language']}"][r["label"]] += 1
        table["all"][r["label"]] += 1
    return dict(table)


def label_changes(rows: Iterable[dict[str, Any]], top: int = 12) -> dict[str, Any]:
    """How the own-work labels of measured rows differ from their inclusive ones (rows with an ``inclusive``
    part; a method's bytecode twin counted once): the methods labelled both ways and how many agree, each change
    ``inclusive -> own`` (``none`` for no label), and the libraries with the most changes."""
    transitions: dict[str, int] = defaultdict(int)
    per_library: dict[str, int] = defaultdict(int)
    both = agree = methods = 0
    for row in rows:
        inclusive = row.get("inclusive")
        if not isinstance(inclusive, dict) or str(row.get("id", "")).endswith("#bytecode"):
            continue
        methods += 1
        before, after = inclusive.get("label"), row.get("label")
        if before is not None and after is not None:
            both += 1
            agree += before == after
        if before != after:
            transitions[f"{before or 'none'} -> {after or 'none'}"] += 1
            per_library[str(row.get("library"))] += 1
    libraries = sorted(per_library.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return {
        "methods": methods,
        "labelled_both": both,
        "agree": agree,
        "agree_share": round(agree / both, 4) if both else None,
        "changes": dict(sorted(transitions.items(), key=lambda kv: (-kv[1], kv[0]))),
        "libraries_most_changed": dict(libraries),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m crystalperf.models.measured keep SRC DST``: a measurement, compressed, to keep; ``changes DIR``:
    where its own-work labels differ from the inclusive ones."""
    parser = argparse.ArgumentParser(prog="python -m crystalperf.models.measured", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    keep = sub.add_parser("keep", help="write SRC's measured files to DST/<file>.jsonl.gz")
    keep.add_argument("source", type=Path)
    keep.add_argument("target", type=Path)
    keep.add_argument("--labelled-only", action="store_true", help="leave out the rows without a label")
    changes = sub.add_parser("changes", help="how DIR's own-work labels differ from their inclusive ones (JSON)")
    changes.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "changes":
            rows = (row for path in measured_files(args.directory) for _, _, row in json_lines(path))
            sys.stdout.write(json.dumps(label_changes(r for r in rows if isinstance(r, dict)), indent=1) + "\n")
            return 0
        written = keep_measurement(args.source, args.target, labelled_only=args.labelled_only)
    except BadInputError as exc:
        sys.stderr.write(f"crystalperf: {exc}\n")
        return 2
    for name, count in written.items():
        sys.stdout.write(f"{args.target / name}: {count} rows\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
