"""Work beside the analysis in a forked child (crystalperf.core.parallel): the same result as alone, or done alone."""

from __future__ import annotations

import os
import threading
import time

import pytest

from crystalperf.core import parallel
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.report import write_reports
from crystalperf.core.trace.synthetic import dag_trace

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or parallel._available_cpus() < 2,
                                reason="no fork, or one CPU: the analysis never forks a child here")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:  # an earlier test left a thread running: the analysis would rightly not fork
        pytest.skip(f"threads left running by earlier tests: {', '.join(others)}")
    assert parallel.can_fork()


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_the_work_runs_in_a_child_and_its_result_comes_back():
    here = os.getpid()
    with parallel.Beside(lambda: (os.getpid(), [1.5, {"a": "b"}])) as beside:
        assert beside.forked
        pid, value = beside.result()
    assert pid != here and value == [1.5, {"a": "b"}]
    assert _reaped(pid)


def test_a_failing_child_leaves_the_work_to_the_process_which_meets_the_error_itself():
    here = os.getpid()
    calls = []

    def work() -> int:
        if os.getpid() != here:
            raise RuntimeError("only in the child")
        calls.append(1)
        raise ValueError("the work's own error")

    with parallel.Beside(work) as beside, pytest.raises(ValueError, match="the work's own error"):
        beside.result()
    assert calls == [1]


def test_a_child_that_stalls_is_killed_and_the_work_done_here(monkeypatch):
    monkeypatch.setattr(parallel, "STALL_S", 0.5)
    here = os.getpid()
    started = time.monotonic()
    with parallel.Beside(lambda: time.sleep(3600) if os.getpid() != here else "here") as beside:
        assert beside.result() == "here"
    assert time.monotonic() - started < 30


def test_a_child_whose_result_is_not_taken_is_ended_when_the_block_is_left():
    beside = parallel.Beside(lambda: time.sleep(3600))
    with beside:
        pid = beside._pid
        assert pid is not None
    assert _reaped(pid) and not beside.forked


def test_no_child_when_switched_off_not_worth_it_or_another_thread_runs(monkeypatch):
    here = os.getpid()
    assert not parallel.Beside(os.getpid, worth=False).forked
    with parallel.Beside(os.getpid, worth=False) as beside:
        assert beside.result() == here
    monkeypatch.setenv(parallel.PARALLEL_ENV, "0")
    assert not parallel.can_fork()
    monkeypatch.delenv(parallel.PARALLEL_ENV)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not parallel.can_fork()
    finally:
        stop.set()
        thread.join()
    assert parallel.can_fork()


def test_an_analysis_and_its_report_files_are_the_same_with_and_without_the_child(tmp_path, monkeypatch):
    import crystalperf.core.analysis as analysis_module
    import crystalperf.core.report as report_module

    made: list[parallel.Beside] = []

    class Recorded(parallel.Beside):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)
            self.was_forked = self.forked

    monkeypatch.setattr(analysis_module, "Beside", Recorded)
    monkeypatch.setattr(report_module, "Beside", Recorded)
    trace = dag_trace(operations=1200, seed=3)
    with_child = analyze(trace, classifier=KeywordClassifier())
    files_with = write_reports(with_child.report, tmp_path / "with")
    assert [b.was_forked for b in made] == [True, True]  # the predictions, then the HTML page
    monkeypatch.setenv(parallel.PARALLEL_ENV, "0")
    alone = analyze(trace, classifier=KeywordClassifier())
    files_alone = write_reports(alone.report, tmp_path / "alone")
    assert with_child.report == alone.report
    assert [p.read_bytes() for p in files_with] == [p.read_bytes() for p in files_alone]
