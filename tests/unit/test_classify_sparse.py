"""The shipped sparse classifier in the base install: no torch, numpy only, chosen first by load_classifier."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from crystalperf.core.attribution.classify import (
    FunctionSource,
    KeywordClassifier,
    ResourceClassifier,
    load_classifier,
)
from crystalperf.models.sparse import FourClassView, SparseClassifier, SparseWeightsMissingError

# The cases live with the models tier's tests, whose package skips itself without torch: load the file alone.
_spec = importlib.util.spec_from_file_location(
    "unmistakable_cases", Path(__file__).resolve().parents[1] / "models" / "test_unmistakable.py"
)
assert _spec is not None and _spec.loader is not None
_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cases)
CASES, DOCS = _cases.CASES, _cases.DOCS


@pytest.fixture(scope="module")
def sparse() -> SparseClassifier:
    return SparseClassifier()


@pytest.mark.parametrize("with_doc", [False, True], ids=["no-doc", "doc"])
@pytest.mark.parametrize(("resource", "language", "code"), CASES, ids=[f"{r}-{lang}" for r, lang, _ in CASES])
def test_shipped_weights_get_the_unmistakable_functions_right(
    sparse: SparseClassifier, resource: str, language: str, code: str, with_doc: bool
) -> None:
    doc = DOCS[resource] if with_doc else ""
    [vector] = sparse.classify([FunctionSource(f"example.{resource}", language, code, doc)])
    assert vector.dominant() == resource, vector
    assert abs(vector.cpu + vector.disk + vector.network - 1.0) < 1e-6 and vector.waiting == 0.0


def test_batched_equals_one_by_one_and_waiting_is_a_probability(sparse: SparseClassifier) -> None:
    functions = [FunctionSource(f"f{i}", lang, code) for i, (_, lang, code) in enumerate(CASES)]
    together = sparse.classify(functions)
    alone = [sparse.classify([f])[0] for f in functions]
    for a, b in zip(together, alone, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-6
    waiting = sparse.waiting_probability(functions)
    assert len(waiting) == len(functions) and all(0.0 <= w <= 1.0 for w in waiting)
    four = FourClassView(sparse).classify(functions)
    assert all(abs(sum(v) - 1.0) < 1e-6 for v in four)
    assert sparse.classify([]) == [] and sparse.waiting_probability([]) == []


def test_a_frame_with_only_its_name_still_gets_a_vector(sparse: SparseClassifier) -> None:
    [vector] = sparse.classify([FunctionSource("org.example.Gen$$Lambda$1.apply", "unknown", "")])
    assert abs(sum(vector) - 1.0) < 1e-6


def test_load_classifier_prefers_the_sparse_classifier(sparse: SparseClassifier) -> None:
    chosen = load_classifier(cache=False)
    assert isinstance(chosen, ResourceClassifier)
    assert chosen.version == sparse.version and chosen.version.startswith("sparse-")
    assert load_classifier("sparse", cache=False).version == sparse.version
    assert isinstance(load_classifier("keyword", cache=False), KeywordClassifier)


def test_missing_weights_are_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SparseWeightsMissingError, match="crystalperf train"):
        SparseClassifier(tmp_path)


def test_the_core_imports_without_numpy_or_torch() -> None:
    code = (
        "import sys, crystalperf.core, crystalperf.core.attribution.classify, crystalperf.models.sparse\n"
        "print(sorted(m for m in ('numpy', 'torch', 'flair', 'tree_sitter') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]"
