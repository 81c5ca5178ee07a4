"""Where the classifier is unsure of a function's class, the report says so: each top function's ``confidence`` and
``low_confidence``, a "guess" mark in the HTML and the terminal, and a sentence in the advice when most of the
bottleneck's sampled time rests on guesses. A fixed classifier with fixed confidences gives hand-checked answers."""

from __future__ import annotations

from collections.abc import Sequence

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import (
    ConfidentClassifier,
    FixedClassifier,
    FunctionSource,
    KeywordClassifier,
)
from crystalperf.core.attribution.vectors import embed_resolution
from crystalperf.core.report.html import HtmlRenderer
from crystalperf.core.report.terminal import TerminalRenderer, _function_cell
from crystalperf.core.resources import ResourceVector

from .helpers import RatedClassifier, make_trace, op, task

DISK = ResourceVector.of(0.2, 0.8, 0.0)
RULES = {"app.Disk": DISK, "app.Hash": ResourceVector.of(1.0), "app.Kernel": ResourceVector.of(network=1.0)}
UNSURE = {"app.Disk.write": 0.41234567, "app.Hash.compute": 0.9, "app.Kernel.conv": 0.3}


class DeclaringLocator:
    """Every frame has source; ``app.Kernel.conv`` declares its vector (a compute kernel: a fact, not a guess)."""

    name = "test"

    def locate(self, frame: tr.Frame, context: object) -> FunctionSource:
        extra = {"vector": "1,0,0"} if frame.name == "app.Kernel.conv" else {}
        return FunctionSource(frame.name, "java", f"void {frame.name}() {{}}", extra=extra)


def _trace(counts: dict[str, int]) -> tr.Trace:
    """One operation "stage" of 10 s whose running threads were sampled in these functions, these many times."""
    names = list(counts)
    samples = tr.StackSamples(
        origin=0, frames=[tr.Frame(name=n, language="java") for n in names], stacks=[[i] for i in range(len(names))],
        states=[tr.THREAD_RUNNABLE] * len(names), keys=[tr.SampleKey(operation="stage")], key=[0] * len(names),
        bucket=[0] * len(names), stack=list(range(len(names))), count=list(counts.values()))
    return make_trace([op("stage", 0, 10, tasks=[task("t0", 0, 10)])], end=10, samples=samples)


# Disk.write: 8 samples of (0.2, 0.8, 0); Hash.compute and Kernel.conv: 1 of cpu each. Over 10 samples the stage
# is cpu 0.36, disk 0.64: disk-bound, all of its sampled disk time in Disk.write.
DISK_BOUND = {"app.Disk.write": 8, "app.Hash.compute": 1, "app.Kernel.conv": 1}


def _report(classifier: object, counts: dict[str, int] = DISK_BOUND, trace: tr.Trace | None = None) -> dict:
    return analyze(trace or _trace(counts), classifier=classifier, locators=[DeclaringLocator()], scenarios=[],
                   band=False).report  # type: ignore[arg-type]


def _top(report: dict) -> dict[str, dict]:
    [stage] = report["operations"]
    return {f["name"]: f for f in stage["top_functions"]}


def test_top_functions_carry_the_confidence_of_the_classifier_whose_vector_they_show() -> None:
    top = _top(_report(RatedClassifier(RULES, UNSURE)))
    assert (top["app.Disk.write"]["confidence"], top["app.Disk.write"]["low_confidence"]) == (0.4123, True)
    assert (top["app.Hash.compute"]["confidence"], top["app.Hash.compute"]["low_confidence"]) == (0.9, False)
    # the locator declared the kernel's vector: the classifier's 0.3 is about a vector the report does not show
    assert top["app.Kernel.conv"]["classified"]["cpu"] == 1.0
    assert (top["app.Kernel.conv"]["confidence"], top["app.Kernel.conv"]["low_confidence"]) == (None, False)


def test_a_classifier_that_gives_no_confidence_leaves_it_null() -> None:
    assert not isinstance(FixedClassifier(RULES), ConfidentClassifier)
    assert not isinstance(KeywordClassifier(), ConfidentClassifier)
    for classifier in (FixedClassifier(RULES), RatedClassifier(RULES, {})):
        top = _top(_report(classifier))
        assert {(f["confidence"], f["low_confidence"]) for f in top.values()} == {(None, False)}


def test_a_classifier_failing_to_rate_costs_the_confidences_only() -> None:
    class Failing(RatedClassifier):
        def confidences(self, functions: Sequence[FunctionSource]) -> list[float | None]:
            raise RuntimeError("no confidence for you")

    report = _report(Failing(RULES, UNSURE))
    assert {f["confidence"] for f in _top(report).values()} == {None}
    assert report["bottleneck"]["resource"] == "disk"


def test_only_the_functions_the_report_shows_are_rated() -> None:
    # seven functions sampled 7, 6, ... 1 times: the report shows the five most sampled
    counts = {f"app.Hash.f{i}": 7 - i for i in range(7)}
    classifier = RatedClassifier(RULES, dict.fromkeys(counts, 0.5))
    top = _top(_report(classifier, counts))
    assert sorted(classifier.rated) == sorted(top) == [f"app.Hash.f{i}" for i in range(5)]


def test_advice_says_when_the_bottlenecks_time_rests_on_guesses() -> None:
    report = _report(RatedClassifier(RULES, UNSURE))
    assert report["bottleneck"]["resource"] == "disk"
    [look] = [a for a in report["advice"] if a.startswith("Look at stage first")]
    # 6.40 s: 0.64 of the stage's 10 s; all of its sampled disk time (8 samples x 0.8) is in Disk.write, a guess
    assert look == ("Look at stage first: it spends 6.40 s on disk on the critical path, mostly in app.Disk.write. "
                    "100% of its sampled disk time is in functions the classifier is unsure of (confidence under "
                    "67%): check what they do before adding disk.")

    sure = _report(RatedClassifier(RULES, {**UNSURE, "app.Disk.write": 0.7}))
    [look] = [a for a in sure["advice"] if a.startswith("Look at stage first")]
    assert look.endswith("mostly in app.Disk.write.")


def test_advice_weighs_the_guesses_by_the_resources_samples() -> None:
    # Disk.write (0.8 disk) sampled 4 times, a guess: 3.2 samples of disk; Store.flush (all disk), sure, 3: 3.0.
    # The guess holds 3.2 / 6.2 = 52 % of the disk time: most of it.
    rules = {**RULES, "app.Store": ResourceVector.of(disk=1.0)}
    counts = {"app.Disk.write": 4, "app.Store.flush": 3, "app.Hash.compute": 1}
    report = _report(RatedClassifier(rules, {**UNSURE, "app.Store.flush": 0.95}), counts)
    [look] = [a for a in report["advice"] if a.startswith("Look at stage first")]
    assert " 52% of its sampled disk time is in functions the classifier is unsure of" in look
    # Store.flush sampled 4 times: 3.2 against 4.0, the guess holds less than half
    counts["app.Store.flush"] = 4
    report = _report(RatedClassifier(rules, {**UNSURE, "app.Store.flush": 0.95}), counts)
    [look] = [a for a in report["advice"] if a.startswith("Look at stage first")]
    assert "unsure" not in look


def test_a_trace_analysed_again_keeps_the_confidence_of_the_classifier_it_embeds() -> None:
    classifier = RatedClassifier(RULES, UNSURE)
    first = analyze(_trace(DISK_BOUND), classifier=classifier, locators=[DeclaringLocator()], scenarios=[],
                    band=False)
    trace = first.trace
    assert trace.samples is not None and first.profile.resolution is not None
    trace.samples.resolution = embed_resolution(trace.samples, first.profile.resolution, classifier.version)
    # elsewhere, nothing located: the embedded functions and vectors are used, and the same classifier rates them
    again = _top(analyze(trace, classifier=RatedClassifier(RULES, UNSURE), locators=[], scenarios=[],
                         band=False).report)
    assert again["app.Disk.write"]["confidence"] == 0.4123 and again["app.Hash.compute"]["confidence"] == 0.9
    # the declared kernel's vector is not the classifier's there either
    assert again["app.Kernel.conv"]["confidence"] is None
    # another classifier's confidence is not about the embedded vectors: it reads Disk.write as all network
    other = RatedClassifier({**RULES, "app.Disk": ResourceVector.of(network=1.0)}, UNSURE)
    elsewhere = _top(analyze(trace, classifier=other, locators=[], scenarios=[], band=False).report)
    assert elsewhere["app.Disk.write"]["confidence"] is None
    assert elsewhere["app.Hash.compute"]["confidence"] == 0.9  # there, both give it (1, 0, 0)


def test_html_marks_a_guessed_function_and_an_older_report_renders_without_marks() -> None:
    report = _report(RatedClassifier(RULES, UNSURE))
    html = HtmlRenderer().render(report)
    assert html.count("guess: confidence") == 1
    item = next(li for li in html.split("<li>") if "app.Disk.write" in li and "of samples" in li)
    assert "guess: confidence 41%" in item
    for function in report["operations"][0]["top_functions"]:
        del function["confidence"], function["low_confidence"]
    assert "guess: confidence" not in HtmlRenderer().render(report)


def test_html_and_terminal_leave_a_function_that_only_waited_unmarked() -> None:
    parked = {"name": "pool.Buffers.request", "confidence": 0.3, "low_confidence": True,
              "vector": {"cpu": 0.0, "disk": 0.0, "network": 0.0, "waiting": 1.0}}
    assert _function_cell(parked) == "pool.Buffers.request"
    report = _report(RatedClassifier(RULES, UNSURE))
    report["operations"][0]["top_functions"] = [parked]
    assert "guess: confidence" not in HtmlRenderer().render(report)


def test_the_terminal_names_a_guessed_top_function_as_a_guess() -> None:
    text = TerminalRenderer(width=300).render(_report(RatedClassifier(RULES, UNSURE)))
    assert "app.Disk.write (guess: confidence 41%)" in text
    sure = TerminalRenderer(width=300).render(_report(RatedClassifier(RULES, {**UNSURE, "app.Disk.write": 0.7})))
    assert "app.Disk.write" in sure and "guess" not in sure
    assert _function_cell(None) == ""


def test_advice_to_move_the_work_to_a_gpu_does_not_call_it_adding_cpu() -> None:
    from crystalperf.core.predict.base import Changes

    # a compute kernel, which a GPU would run
    trace = make_trace([op("matmul", 0, 10, kind="op", tasks=[task("s", 0, 10, run_time_s=10, cpu_time_s=10)])])
    trace.application.framework = "tensorflow"
    report = analyze(trace, scenarios=[Changes({"device": "gpu"})], band=False).report
    assert any(a.startswith("Move it to a GPU: with device=gpu") for a in report["advice"]), report["advice"]
    assert not any(a.startswith("Add cpu") for a in report["advice"])
