"""The classification cache keeps each function's confidence beside its vector, in the same JSON-lines file, and
reads the rows written before confidences were kept: their vector as it is, their confidence asked once."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from crystalperf.core.attribution.classify import (
    CachedClassifier,
    ConfidentClassifier,
    FixedClassifier,
    FunctionSource,
)
from crystalperf.core.resources import ResourceVector

from .helpers import RatedClassifier

DISK = ResourceVector.of(0.2, 0.8, 0.0)
RULES = {"app.Disk": DISK, "app.Hash": ResourceVector.of(1.0)}
UNSURE = {"app.Disk.write": 0.41234567, "app.Hash.compute": 0.9}


def _function(name: str) -> FunctionSource:
    return FunctionSource(name, "java", f"void {name}() {{}}")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_cache_keeps_each_confidence_beside_its_vector(tmp_path: Path) -> None:
    disk, cpu = _function("app.Disk.write"), _function("app.Hash.compute")
    inner = RatedClassifier(RULES, UNSURE)
    cached = CachedClassifier(inner, tmp_path)
    assert isinstance(cached, ConfidentClassifier)
    assert cached.classify([disk, cpu]) == [DISK, ResourceVector(1.0, 0.0, 0.0)]
    assert cached.confidences([disk, cpu, disk]) == [0.41234567, 0.9, 0.41234567]
    assert inner.rated == ["app.Disk.write", "app.Hash.compute"] and len(inner.classified) == 2
    # the vector rows first, then the same keys with their confidence
    assert [("confidence" in row, row["key"]) for row in _rows(cached.path)] == [
        (False, disk.key), (False, cpu.key), (True, disk.key), (True, cpu.key)]

    fresh = RatedClassifier(RULES, UNSURE)
    again = CachedClassifier(fresh, tmp_path)
    assert again.confidences([cpu, disk]) == [0.9, 0.41234567]
    assert again.classify([disk]) == [DISK]
    assert fresh.rated == [] and fresh.classified == []


def test_an_old_cache_row_without_confidence_is_read_and_rated_once(tmp_path: Path) -> None:
    disk = _function("app.Disk.write")
    inner = RatedClassifier(RULES, UNSURE)
    path = CachedClassifier(inner, tmp_path).path
    # as a cache written before confidences: a vector of its own (not the classifier's today), no confidence
    path.write_text(json.dumps({"key": disk.key, "cpu": 0.5, "disk": 0.5, "network": 0.0}) + "\n")
    old = CachedClassifier(inner, tmp_path)
    assert old.classify([disk]) == [ResourceVector(0.5, 0.5, 0.0, 0.0)] and inner.classified == []
    assert old.confidences([disk]) == [0.41234567]
    assert inner.rated == ["app.Disk.write"] and inner.classified == []  # the vector stays the cached one
    assert _rows(path)[-1] == {"key": disk.key, "cpu": 0.5, "disk": 0.5, "network": 0.0, "confidence": 0.41234567}
    later = RatedClassifier(RULES, UNSURE)
    assert CachedClassifier(later, tmp_path).confidences([disk]) == [0.41234567] and later.rated == []


@pytest.mark.parametrize("bad", [True, "0.4", 1.5, -0.1, math.nan, None])
def test_a_cached_confidence_that_is_no_probability_is_asked_again(tmp_path: Path, bad: object) -> None:
    disk = _function("app.Disk.write")
    inner = RatedClassifier(RULES, UNSURE)
    path = CachedClassifier(inner, tmp_path).path
    path.write_text(json.dumps({"key": disk.key, "cpu": 0.2, "disk": 0.8, "network": 0.0, "confidence": bad}) + "\n")
    assert CachedClassifier(inner, tmp_path).confidences([disk]) == [0.41234567]
    assert inner.rated == ["app.Disk.write"]


def test_the_cache_of_a_classifier_without_confidence_gives_none_and_writes_nothing(tmp_path: Path) -> None:
    cached = CachedClassifier(FixedClassifier(RULES), tmp_path)
    assert cached.confidences([_function("app.Disk.write")]) == [None]
    assert not cached.path.exists()
