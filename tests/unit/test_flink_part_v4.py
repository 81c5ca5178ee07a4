"""Reporter parts of format version 4 (stacks interned once, rows naming them by index) load as the
earlier versions do, and a row naming a stack that does not exist is a one-line error naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crystalperf.core.errors import BadInputError
from crystalperf.integrations.flink.reader import load_part

START = 1000.0
TOP = "org.example.Map.map\tMap.java\t12\norg.apache.flink.Task.run\tTask.java\t3\n"
OTHER = "[other]\t\t0\n"


def _part(version: int, stacks: list[str] | None, samples: list[list[Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": "crystalperf-flink-metrics", "version": version, "job_id": "j1", "job_name": "job",
        "process": 1, "complete": True, "written": START + 10, "start": START, "end": START + 10,
        "io": [], "cpu_count": 2, "thread_cpu": [], "classpath": [], "dropped_metrics": 0, "scopes": [],
        "metrics": [], "sample_interval_s": 0.1, "sample_origin": START, "sample_bucket_s": 1.0,
        "dropped_samples": 3, "samples": samples,
    }
    if stacks is not None:
        doc["stacks"] = stacks
    return doc


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "crystalperf-flink-j1.1.json"
    path.write_text(json.dumps(doc))
    return path


def test_version_4_rows_name_interned_stacks(tmp_path: Path) -> None:
    doc = _part(4, [TOP, OTHER], [["Map", "0", 2, 0, 5, "runnable", ""], ["Map", "0", 3, 1, 3, "waiting", ""]])
    part = load_part(_write(tmp_path, doc))
    assert [(r.bucket, r.stack, r.count, r.state) for r in part.samples] == [(2, TOP, 5, "runnable"),
                                                                             (3, OTHER, 3, "waiting")]
    assert part.dropped_samples == 3


def test_version_3_rows_with_stack_text_still_load(tmp_path: Path) -> None:
    part = load_part(_write(tmp_path, _part(3, None, [["Map", "0", 2, TOP, 5, "runnable", ""]])))
    assert [(r.stack, r.count) for r in part.samples] == [(TOP, 5)]


@pytest.mark.parametrize("stack", [2, -1])
def test_a_row_naming_a_missing_stack_is_bad_input(tmp_path: Path, stack: int) -> None:
    path = _write(tmp_path, _part(4, [TOP], [["Map", "0", 2, stack, 5, "runnable", ""]]))
    with pytest.raises(BadInputError) as raised:
        load_part(path)
    assert str(path) in str(raised.value) and "stack" in str(raised.value)
