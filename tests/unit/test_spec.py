"""The exported JSON Schema in spec/ must follow the models: change one, re-export the other
(python -m crystalperf.core.trace.spec)."""

import json
from pathlib import Path

import jsonschema
import pytest

from crystalperf.core import trace as tr
from crystalperf.core.trace.spec import SPEC_DIR, schema_path

ROOT = Path(__file__).resolve().parents[2]


def test_committed_schema_matches_the_models():
    committed = json.loads(schema_path().read_text())
    assert committed == tr.json_schema(), "trace models changed: run python -m crystalperf.core.trace.spec"


def test_schema_id_carries_the_version():
    assert tr.json_schema()["$id"].endswith(tr.SCHEMA_VERSION)


@pytest.mark.parametrize("example", sorted((ROOT / SPEC_DIR / "examples").glob("*.json")), ids=lambda p: p.name)
def test_examples_validate_against_schema_and_models(example):
    doc = json.loads(example.read_text())
    jsonschema.validate(doc, tr.json_schema())
    tr.parse_trace(doc, example)


def test_there_are_examples():
    assert len(list((ROOT / SPEC_DIR / "examples").glob("*.json"))) >= 2
