"""The driver's own work outside every operation (samples keyed to ``tr.DRIVER_OPERATION``), by hand."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.profile.driver import driver_work
from crystalperf.core.report.html import HtmlRenderer

from .helpers import make_trace, op, task


def _trace() -> tr.Trace:
    # Two 1 s jobs with 8 s between them. The driver's main thread outside its Spark calls, at 0.1 s a sample:
    # 30 samples computing in etl.rank (line 12), 20 sleeping in the program's top level, 5 starting the hook.
    frames = [tr.Frame(name="etl.rank", file="/jobs/etl.py", line=12, language="python"),
              tr.Frame(name="etl.<module>", file="/jobs/etl.py", line=1, language="python"),
              tr.Frame(name="time.sleep", language="python"),
              tr.Frame(name="crystalperf.core.record.sampling.PythonStackSampler.start", language="python"),
              tr.Frame(name="job.Hash.run", language="java")]
    driver = tr.SampleKey(operation=tr.DRIVER_OPERATION, thread="python-driver")
    samples = tr.StackSamples(origin=0, interval_s=0.1, frames=frames,
                              stacks=[[0, 1], [2, 1], [3, 1], [4]],
                              states=[tr.THREAD_RUNNABLE, tr.THREAD_WAITING, tr.THREAD_WAITING, tr.THREAD_RUNNABLE],
                              keys=[driver, tr.SampleKey(operation="a")], key=[0, 0, 0, 1], bucket=[2, 3, 0, 0],
                              stack=[0, 1, 2, 3], count=[30, 20, 5, 10])
    jobs = [op("a", 0, 1, tasks=[task("a1", 0, 1, cpu_time_s=1.0)]),
            op("b", 9, 10, parents=["a"], tasks=[task("b1", 9, 10, cpu_time_s=1.0)])]
    return make_trace(jobs, end=10.0, samples=samples)


def test_the_drivers_own_samples_are_named_by_function_without_the_hooks_own() -> None:
    work = driver_work(build_profile(_trace(), KeywordClassifier(), locators=[]))
    assert work is not None and work.samples == 50
    assert work.seconds == pytest.approx(5.0) and work.waiting_s == pytest.approx(2.0)
    rank, top = work.functions
    assert (rank.name, rank.where, rank.resource) == ("etl.rank", "/jobs/etl.py:12", "cpu")
    assert rank.seconds == pytest.approx(3.0)
    # a sleep is waiting, named by the program's frame it was called from; a module's top level is its file
    assert (top.name, top.where, top.resource) == ("etl.<module>", "/jobs/etl.py", "waiting")
    assert work.sentence() == ("Outside its calls into Spark the driver's own Python ran about 3.00 s and waited "
                               "about 2.00 s (sampled 50 times): 3.00 s on cpu in etl.rank (etl.py:12), 2.00 s waiting "
                               "in etl.<module> (etl.py).")


def test_the_report_and_its_advice_carry_the_drivers_work() -> None:
    report = analyze(_trace(), classifier=KeywordClassifier(), locators=[], scenarios=[]).report
    assert report["bottleneck"]["driver_work"]["functions"][0]["name"] == "etl.rank"
    assert any(a.startswith("Outside its calls into Spark the driver's own Python") for a in report["advice"])
    # the operations' own vectors know nothing of it
    assert all(o["vector"]["cpu"] == pytest.approx(1.0) for o in report["operations"])
    html = HtmlRenderer().render(report)
    assert 'id="driver-work"' in html and "<code>etl.rank</code>" in html and "/jobs/etl.py:12" in html


def test_no_driver_samples_no_driver_work() -> None:
    trace = _trace()
    assert trace.samples is not None
    trace.samples.keys[0] = tr.SampleKey(operation="a", thread="python-driver")
    assert driver_work(build_profile(trace, KeywordClassifier(), locators=[])) is None
