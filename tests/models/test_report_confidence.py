"""A report made with the shipped sparse classifier says how sure it is of each top function's class."""

from __future__ import annotations

from pathlib import Path

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.models.sparse import LOW_CONFIDENCE, SparseClassifier

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "spark-demo-trace.json.gz"


def test_the_top_functions_of_a_report_carry_the_sparse_classifiers_confidence() -> None:
    classifier = SparseClassifier()
    # nothing located: every top function is classified by its frame's name, here, by this classifier
    analysis = analyze(tr.load_trace(BUNDLED), classifier=classifier, locators=[], scenarios=[], band=False)
    assert analysis.report["sources"]["classifier"] == classifier.version
    shown = [f for op in analysis.report["operations"] for f in op["top_functions"]]
    # by name: a function found by its frame's name alone has that name for its code
    functions = {f.function.qualified_name: f.function for p in analysis.profile.walk() for f in p.vector.functions}
    expected = dict(zip(functions, classifier.confidence(list(functions.values())), strict=True))
    assert shown
    for entry in shown:
        assert entry["confidence"] == round(float(expected[entry["name"]]), 4), entry["name"]
        assert entry["low_confidence"] is bool(expected[entry["name"]] < LOW_CONFIDENCE)
    # the demo's 75 top functions hold both kinds
    assert {entry["low_confidence"] for entry in shown} == {True, False}
