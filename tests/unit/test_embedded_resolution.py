"""A trace carries the functions and vectors its job-end analysis used, so that the report regenerates the
same where none of its frames can be located (another machine, no framework, no jars)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution import vectors
from crystalperf.core.attribution.classify import FixedClassifier, KeywordClassifier
from crystalperf.core.attribution.waiting import primitive_vector
from crystalperf.core.finish import finish_job
from crystalperf.core.resources import ResourceVector

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "spark-demo-trace.json.gz"
NETWORK_ONLY = FixedClassifier({}, default=ResourceVector.of(network=1.0))


def _top(report: dict) -> dict[str, list[tuple[str, dict[str, float]]]]:
    return {op["path"]: [(f["name"], f["vector"]) for f in op["top_functions"]] for op in report["operations"]}


def _vectors(report: dict) -> dict[str, dict[str, float]]:
    return {op["path"]: op["vector"] for op in report["operations"]}


@pytest.fixture(scope="module")
def job_end(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, tr.Trace]:
    """What the hook does at job end, in this environment: write, analyse, embed; the report and the trace."""
    out = tmp_path_factory.mktemp("job-end")
    written = finish_job(tr.load_trace(BUNDLED), out)
    assert written is not None
    import json

    return json.loads((out / "crystalperf-report.json").read_text()), tr.load_trace(written)


def test_the_trace_embeds_what_the_analysis_used(job_end: tuple[dict, tr.Trace]) -> None:
    report, trace = job_end
    assert trace.samples is not None and trace.samples.resolution is not None
    embedded = trace.samples.resolution
    assert embedded.classifier == report["sources"]["classifier"]
    assert len(embedded.stack_function) == len(trace.samples.stacks)
    used = set(trace.samples.stack)
    # every sampled stack is accounted for: a function, or known to have none
    assert all(embedded.stack_function[s] != -1 for s in used)
    names = {f.qualified_name for f in embedded.functions}
    for op in report["operations"]:
        for function in op["top_functions"]:
            assert function["name"] in names


def test_elsewhere_without_locators_or_classifier_the_report_is_the_same(job_end: tuple[dict, tr.Trace]) -> None:
    report, trace = job_end
    # Nothing can be located, and the classifier here would call everything network: the embedded
    # functions and vectors must win.
    elsewhere = analyze(trace, classifier=NETWORK_ONLY, locators=[]).report
    assert _top(elsewhere) == _top(report)
    for path, vector in _vectors(report).items():
        for resource, share in vector.items():
            assert elsewhere_vector(elsewhere, path)[resource] == pytest.approx(share, abs=0.02)
    assert elsewhere["bottleneck"]["resource"] == report["bottleneck"]["resource"]
    assert elsewhere["bottleneck"]["sentence"] == report["bottleneck"]["sentence"]
    assert elsewhere["sources"]["classifier"] == report["sources"]["classifier"]
    assert elsewhere["sources"]["samples_by_origin"] == report["sources"]["samples_by_origin"]


def elsewhere_vector(report: dict, path: str) -> dict[str, float]:
    return _vectors(report)[path]


def test_reclassify_ignores_what_the_trace_embeds(job_end: tuple[dict, tr.Trace]) -> None:
    _, trace = job_end
    again = analyze(trace, classifier=NETWORK_ONLY, locators=[], reclassify=True)
    assert again.profile.resolution is not None and again.profile.resolution.classified > 0
    classified = {f.key for f in again.profile.resolution.stack_function.values()
                  if f is not None and primitive_vector(f.qualified_name) is None}
    assert classified
    assert all(again.profile.resolution.function_vectors[k].network == pytest.approx(1.0) for k in classified)
    sampled = [op for op in again.report["operations"] if op["vector_source"] == "samples"]
    assert sampled and any(op["vector"]["network"] > 0.05 for op in sampled)


def test_stacks_beyond_the_bounds_are_located_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tr.load_trace(BUNDLED)
    assert trace.samples is not None
    monkeypatch.setattr(vectors, "EMBED_MAX_FUNCTIONS", 3)
    first = analyze(trace, classifier=KeywordClassifier())
    assert first.profile.resolution is not None
    embedded = vectors.embed_resolution(trace.samples, first.profile.resolution, "keyword-1")
    assert len(embedded.functions) == 3
    left_out = [s for s in set(trace.samples.stack) if embedded.stack_function[s] == -1]
    assert left_out
    # the three kept are the first three functions met going down the stacks by samples
    per_stack: dict[int, int] = {}
    for _, _, stack_id, count in trace.samples.rows():
        per_stack[stack_id] = per_stack.get(stack_id, 0) + count
    expected: list[str] = []
    for stack_id in sorted(per_stack, key=lambda s: -per_stack[s]):
        function = first.profile.resolution.stack_function[stack_id]
        if function is not None and function.key not in expected and len(expected) < 3:
            expected.append(function.key)
    assert [vectors._embedded_function(f).qualified_name for f in embedded.functions] == [
        key.split("#")[0] for key in expected]
    trace.samples.resolution = embedded
    mixed = analyze(trace, classifier=NETWORK_ONLY, locators=[])
    assert mixed.profile.resolution is not None and mixed.profile.resolution.classified > 0
    assert "+ keyword-1" in mixed.report["sources"]["classifier"]


def test_an_embedded_resolution_survives_saving_and_is_checked(tmp_path: Path, job_end: tuple[dict, tr.Trace]) -> None:
    _, trace = job_end
    path = tr.save_trace(trace, tmp_path / "t.json.gz")
    assert tr.load_trace(path).model_dump() == trace.model_dump()
    broken = trace.model_dump(mode="json", by_alias=True)
    broken["samples"]["resolution"]["stack_function"][0] = 10**6
    with pytest.raises(Exception, match="embedded function"):
        tr.Trace.model_validate(broken)
