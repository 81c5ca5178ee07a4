"""Small trace builders with numbers simple enough to check by hand."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from importlib import metadata
from importlib.machinery import ModuleSpec

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import FixedClassifier, FunctionSource
from crystalperf.core.resources import ResourceVector
from crystalperf.integrations.base import Integration


def op(id: str, start: float, end: float, parents: list[str] | None = None, **kw) -> tr.Operation:
    return tr.Operation(id=id, name=id, start=start, end=end, parents=parents or [], **kw)


def task(id: str, start: float, end: float, **metrics: float) -> tr.Task:
    return tr.Task(id=id, start=start, end=end, metrics=dict(metrics))


def make_trace(operations: list[tr.Operation], start: float = 0.0, end: float | None = None,
               samples: tr.StackSamples | None = None, **env) -> tr.Trace:
    end = end if end is not None else max(o.end for o in operations)
    return tr.Trace(
        application=tr.Application(framework="spark", id="app", start=start, end=end),
        environment=tr.Environment(**env),
        operations=operations,
        samples=samples,
    )


def fake_installed(monkeypatch: pytest.MonkeyPatch, integration: Integration, versions: dict[str, str] | None) -> None:
    """Make the integration's framework look absent (None) or installed from these of its distributions at
    these versions, as Integration.version() reads them; other modules and distributions stay real."""
    real_find_spec, real_version = importlib.util.find_spec, metadata.version

    def find_spec(name: str, *args: object, **kwargs: object) -> ModuleSpec | None:
        if name == integration.module:
            return None if versions is None else ModuleSpec(name, None)
        return real_find_spec(name, *args, **kwargs)  # type: ignore[arg-type]

    def version(distribution: str) -> str:
        if distribution not in integration.distributions:
            return real_version(distribution)
        if versions is not None and distribution in versions:
            return versions[distribution]
        raise metadata.PackageNotFoundError(distribution)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(metadata, "version", version)


def assert_same_document(actual: object, expected: object, path: str = "", rel: float = 1e-9) -> None:
    """Equal JSON-like documents, floats within ``rel``: Python 3.12's sum() rounds differently (it
    compensates), so a trace assembled there differs from one recorded on 3.11 in the last digits."""
    if isinstance(expected, float) or isinstance(actual, float):
        assert isinstance(actual, (int, float)) and isinstance(expected, (int, float)), path
        assert math.isclose(actual, expected, rel_tol=rel, abs_tol=1e-12), f"{path}: {actual} != {expected}"
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), path
        for key in expected:
            assert_same_document(actual[key], expected[key], f"{path}/{key}", rel)
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), path
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same_document(a, e, f"{path}[{index}]", rel)
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


class RatedClassifier(FixedClassifier):
    """A classifier that gives confidences (``ConfidentClassifier``): the fixed classifier's vectors, a fixed
    confidence per qualified name (None for the others), and the names it was asked to classify and to rate."""

    def __init__(self, rules: dict[str, ResourceVector], confidence: dict[str, float]) -> None:
        super().__init__(rules)
        self.confidence = confidence
        self.rated: list[str] = []
        self.classified: list[str] = []

    def classify(self, functions: Sequence[FunctionSource]) -> list[ResourceVector]:
        self.classified += [f.qualified_name for f in functions]
        return super().classify(functions)

    def confidences(self, functions: Sequence[FunctionSource]) -> list[float | None]:
        self.rated += [f.qualified_name for f in functions]
        return [self.confidence.get(f.qualified_name) for f in functions]
