"""The report flags a process whose garbage collector took half its CPU time (hand-made executors' splits)."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import FixedClassifier
from tests.unit.helpers import make_trace, op, task


def _report_warnings(*executors: tr.Executor) -> list[str]:
    trace = make_trace([op("stage", 0, 10, tasks=[task("t", 0, 10, run_time_s=10, cpu_time_s=6.0)])], end=10)
    trace.environment.executors = list(executors)
    return analyze(trace, classifier=FixedClassifier({}), locators=[], band=False).report["warnings"]


def _collector_warnings(*executors: tr.Executor) -> list[str]:
    return [w for w in _report_warnings(*executors) if "garbage collector" in w]


def test_a_process_whose_collector_took_half_its_cpu_is_flagged() -> None:
    # 8.76 of 16 CPU-s in a serial collector, 6.34 in the task threads (a TaskManager with its heap nearly full)
    pressed = tr.Executor(id="tm-1", host="h1", thread_cpu=tr.ThreadCpu(task=6.34, gc=8.76, jit=0.2, other=0.7),
                          garbage_collector=tr.GarbageCollector(family="serial", processors=1))
    [warning] = _collector_warnings(pressed)
    assert "serial garbage collector used 8.76 of the 16.00 CPU-s of process tm-1 (55%)" in warning
    assert "6.34 in its task threads" in warning


@pytest.mark.parametrize(
    "kinds",
    [
        tr.ThreadCpu(task=8.0, gc=2.0, gc_concurrent=1.0),  # a quarter: allocation as usual
        tr.ThreadCpu(task=0.5, gc=1.5),  # three quarters of a process that hardly ran: 1.5 CPU-s say little
    ],
)
def test_a_collector_under_half_the_cpu_or_two_cpu_seconds_is_not(kinds: tr.ThreadCpu) -> None:
    assert _collector_warnings(tr.Executor(id="tm-1", host="h1", thread_cpu=kinds)) == []


def test_g1s_concurrent_threads_count_with_its_pauses_and_an_unsplit_process_is_left_alone() -> None:
    g1 = tr.Executor(id="tm-2", host="h2", thread_cpu=tr.ThreadCpu(task=4.0, gc=2.5, gc_concurrent=2.0))
    unsplit = tr.Executor(id="tm-3", host="h3")
    [warning] = _collector_warnings(g1, unsplit)
    assert "used 4.50 of the 8.50 CPU-s of process tm-2" in warning and "the garbage collector" in warning


def test_a_pressed_heap_whose_live_data_is_known_says_how_full_it_was() -> None:
    pressed = tr.Executor(id="tm-1", host="h1", thread_cpu=tr.ThreadCpu(task=6.34, gc=8.76, jit=0.2, other=0.7),
                          garbage_collector=tr.GarbageCollector(family="serial", processors=1,
                                                                heap_max_bytes=160_000_000, live_bytes=136_000_000,
                                                                old_collection_s=8.0, young_collection_s=0.5))
    [warning] = _collector_warnings(pressed)
    assert "old generation was 85% live after its collections" in warning
    assert "a parallelism what-if that spreads the records over more processes counts it" in warning
