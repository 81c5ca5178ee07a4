"""Measured-label files: gzip-compressed rows read like plain ones, a measurement kept unchanged and
byte-reproducibly, bad files one clear error, and the corpus kept in the repository is the one the shipped
weights were trained on."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crystalperf.core.errors import BadInputError
from crystalperf.models.corpus import FORBIDDEN
from crystalperf.models.measured import (
    files_sha256,
    keep_measurement,
    measured_splits,
    read_measured,
    split_by_library,
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = REPO / "crystalperf" / "models" / "weights" / "sparse" / "config.json"
KEPT_CORPUS = REPO / "data" / "measured"


def _row(i: int, label: str | None) -> dict[str, Any]:
    return {"id": f"java:lib{i % 9}.C.m{i}", "language": "java", "qualified_name": f"lib{i % 9}.C.m{i}",
            "library": f"lib{i % 9}", "licence": "MIT", "code": f"void m{i}() {{ out.write(b); }}", "doc": "",
            "origin": "bytecode", "label": label, "shares": {}, "seconds": 0.1, "events": 9, "method": "jfr"}


def _measurement(directory: Path) -> list[dict[str, Any]]:
    rows = [_row(i, (None, "cpu", "disk", "network", "waiting")[i % 5]) for i in range(200)]
    directory.mkdir(parents=True)
    (directory / "jvm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:120]))
    (directory / "python.jsonl").write_text("\n".join(json.dumps(r) for r in rows[120:]) + "\n\n")
    return rows


def test_a_kept_measurement_reads_back_the_same_rows_in_order(tmp_path: Path) -> None:
    rows = _measurement(tmp_path / "raw")
    written = keep_measurement(tmp_path / "raw", tmp_path / "kept")
    assert written == {"jvm.jsonl.gz": 120, "python.jsonl.gz": 80}
    assert keep_measurement(tmp_path / "raw", tmp_path / "labelled", labelled_only=True) == {
        "jvm.jsonl.gz": 96, "python.jsonl.gz": 64}
    assert read_measured(tmp_path / "labelled") == read_measured(tmp_path / "raw")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["jvm.jsonl.gz", "python.jsonl.gz"]
    kept = read_measured(tmp_path / "kept")
    assert [r["id"] for r in kept] == [r["id"] for r in rows if r["label"]]
    assert kept == read_measured(tmp_path / "raw")
    assert measured_splits(tmp_path / "kept") == measured_splits(tmp_path / "raw")


def test_keeping_is_byte_reproducible_and_the_hash_ignores_compression(tmp_path: Path) -> None:
    _measurement(tmp_path / "raw")
    keep_measurement(tmp_path / "raw", tmp_path / "a")
    keep_measurement(tmp_path / "raw", tmp_path / "b")
    for name in ("jvm.jsonl.gz", "python.jsonl.gz"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "jvm.jsonl").write_bytes(gzip.decompress((tmp_path / "a" / "jvm.jsonl.gz").read_bytes()))
    (tmp_path / "fast").mkdir()
    with gzip.open(tmp_path / "fast" / "jvm.jsonl.gz", "wb", compresslevel=1) as fh:
        fh.write((plain / "jvm.jsonl").read_bytes())
    assert files_sha256(plain)["jvm.jsonl"] == files_sha256(tmp_path / "fast")["jvm.jsonl.gz"]
    assert files_sha256(tmp_path / "a")["jvm.jsonl.gz"] == files_sha256(tmp_path / "fast")["jvm.jsonl.gz"]


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [("jvm.jsonl.gz", b"not gzip at all", "cannot be read"),
     ("jvm.jsonl.gz", gzip.compress(b'{"id": 1}\n')[:-6], "cannot be read"),
     ("jvm.jsonl", b"\xff\xfe\x00", "not UTF-8"),
     ("jvm.jsonl", json.dumps({**_row(1, "cpu"), "id": ["x"]}).encode(), "id must be text")],
)
def test_a_bad_measured_file_is_one_error_naming_it(tmp_path: Path, name: str, content: bytes, problem: str) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(BadInputError, match=problem) as caught:
        read_measured(tmp_path)
    assert name in str(caught.value)


def test_keeping_a_missing_directory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "crystalperf.models.measured", "keep", str(tmp_path / "nope"),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "not found" in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_changes_prints_where_own_work_and_inclusive_labels_differ(tmp_path: Path) -> None:
    rows = [dict(_row(i, own), inclusive={"label": inclusive})
            for i, (own, inclusive) in enumerate([("cpu", "cpu"), ("disk", "cpu"), (None, "waiting"), ("cpu", None)])]
    (tmp_path / "jvm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = subprocess.run([sys.executable, "-m", "crystalperf.models.measured", "changes", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    changes = json.loads(done.stdout)
    assert changes["methods"] == 4 and changes["labelled_both"] == 2 and changes["agree"] == 1
    assert changes["changes"] == {"cpu -> disk": 1, "none -> cpu": 1, "waiting -> none": 1}
    (tmp_path / "jvm.jsonl").write_text("not json\n")
    done = subprocess.run([sys.executable, "-m", "crystalperf.models.measured", "changes", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "jvm.jsonl" in done.stderr


def test_the_kept_corpus_is_the_one_the_shipped_weights_were_trained_on() -> None:
    config = json.loads(SHIPPED_CONFIG.read_text())["training"]
    assert files_sha256(KEPT_CORPUS) == config["measured_files_sha256"]
    rows = read_measured(KEPT_CORPUS)
    assert len({r["id"] for r in rows}) == len(rows)
    # Each row names its library and licence (SOURCES.md lists them); the frameworks we profile never train.
    assert all(r["library"] and r.get("licence") for r in rows)
    assert not [r["id"] for r in rows if FORBIDDEN.search(r["qualified_name"]) or FORBIDDEN.search(r["library"])]
    split_by_library(rows, seed=config["seed"])
    splits = Counter(r["split"] for r in rows)
    assert splits["train"] == config["functions"] and splits["val"] == config["validation_functions"]


def test_the_hand_labelled_blend_set_is_the_one_the_shipped_weights_were_fitted_on() -> None:
    """The keyword blend's weight was fitted on data/handlabelled/tensorflow-python.jsonl: the shipped config names
    it by its content, and none of its functions is one the framework set scores."""
    from crystalperf.models.framework_eval import load_set, set_sha256

    dev = load_set(REPO / "data" / "handlabelled" / "tensorflow-python.jsonl")
    config = json.loads(SHIPPED_CONFIG.read_text())
    assert config["training"]["keyword_blend_fit"]["sha256"] == set_sha256(dev)
    assert config["training"]["keyword_blend_fit"]["functions"] == len(dev)
    assert set(config["keyword_blend"]) == {f.language for f in dev}
    assert not {f.qualified_name for f in dev} & {f.qualified_name for f in load_set()}
    assert Counter(f.label for f in dev).keys() == {"cpu", "disk", "network"}
