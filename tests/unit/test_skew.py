"""Skew and stragglers (crystalperf.core.profile.skew): the rule of its docstring on traces small enough to check by
hand, the balanced predictions, and the report's skew list, advice, terminal and HTML."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.predict.balance import predict_balanced
from crystalperf.core.predict.base import Baseline
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.profile.skew import (
    CAUSE_DATA,
    CAUSE_STRAGGLER,
    CAUSE_TIME,
    SkewFindings,
    find_skew,
    task_times,
)
from crystalperf.core.report.html import HtmlRenderer
from crystalperf.core.report.terminal import TerminalRenderer

from .helpers import make_trace, op


def tasks(durations: list[float], start: float = 0.0, read: list[float] | None = None,
          metric: str = tr.METRIC_SHUFFLE_READ_BYTES, starts: list[float] | None = None) -> list[tr.Task]:
    """Tasks ``t0, t1, ...`` (partition = position), all starting at ``start`` unless ``starts`` says."""
    out = []
    for i, d in enumerate(durations):
        s = starts[i] if starts is not None else start
        metrics = {metric: read[i]} if read is not None else {}
        out.append(tr.Task(id=f"t{i}", index=i, executor="e1", start=s, end=s + d, metrics=metrics))
    return out


def stage(id: str, durations: list[float], start: float = 0.0, parents: list[str] | None = None,
          **kw) -> tr.Operation:
    ts = kw.pop("task_list", None) or tasks(durations, start, **kw)
    return op(id, start, max(t.end for t in ts), parents, kind="stage", tasks=ts)


def job(stages: list[tr.Operation], id: str = "job-0") -> tr.Operation:
    return op(id, min(s.start for s in stages), max(s.end for s in stages), kind="job", children=stages)


def findings(trace: tr.Trace) -> SkewFindings:
    profile = build_profile(trace, KeywordClassifier())
    return predict_balanced(profile, find_skew(profile, Baseline.of(trace).slots))


# -- the distribution --------------------------------------------------------------------------------

def test_distribution_interpolates_between_sorted_durations():
    # sorted 1 2 3 4 10: p50 the middle one; p75 at position 0.75 * 4 = 3 -> 4; mean 20 / 5
    times = task_times(stage("s", [10, 1, 3, 2, 4], read=[50, 10, 30, 20, 40]))
    assert times is not None
    assert (times.p50, times.p75, times.max, times.mean) == (3, 4, 10, 4)
    assert (times.read_unit, times.read_p50, times.read_max) == ("bytes", 30, 50)
    # four tasks: p75 at position 2.25, a quarter of the way from the third to the fourth
    times = task_times(stage("s", [1, 1, 1, 9]))
    assert times is not None and times.p75 == pytest.approx(3.0) and times.read_unit is None


def test_too_few_tasks_and_failed_attempts_are_not_counted():
    assert task_times(stage("s", [1, 9])) is None
    ts = tasks([1, 1, 20])
    ts[2].status = "failed"  # retried: its retry is what counts
    assert task_times(stage("s", [], task_list=ts)) is None
    ts.append(tr.Task(id="t2r", index=2, start=0, end=1.2))
    times = task_times(stage("s", [], task_list=ts))
    assert times is not None and times.max == pytest.approx(1.2) and times.recorded == 4


def test_records_when_no_task_read_bytes():
    times = task_times(stage("s", [1, 1, 1, 9], read=[10, 10, 10, 90], metric=tr.METRIC_RECORDS_IN))
    assert times is not None and (times.read_unit, times.read_p50, times.read_max) == ("records", 10, 90)


# -- the rule ------------------------------------------------------------------------------------------

def test_data_skew_in_one_wave_is_balanced_at_the_mean():
    # 4 slots, 4 tasks 1 1 1 9: p75 = 3, slow above 4.5: task 3, which read 9x the median -> data.
    # Balanced: the same 12 s of work over 4 tasks, 3 s each; one wave: the stage 9 s -> 3 s, so does the job.
    trace = make_trace([job([stage("stage-1", [1, 1, 1, 9], read=[100, 100, 100, 900])])], total_slots=4)
    found = findings(trace)
    (skew,) = found.skewed
    assert skew.profile.path == "job-0/stage-1" and found.flagged == {"job-0/stage-1"}
    assert skew.cause == CAUSE_DATA
    assert skew.threshold_s == pytest.approx(4.5) and skew.slow_count == 1
    assert [(s.id, s.index, s.duration_s, s.read) for s in skew.slow] == [("t3", 3, 9, 900)]
    assert skew.balanced_task_s == pytest.approx(3.0)
    assert skew.stage_saved_s == pytest.approx(6.0) and skew.balanced_stage_s == pytest.approx(3.0)
    assert skew.job_runtime_s == pytest.approx(9.0) and skew.balanced_job_s == pytest.approx(3.0)
    assert skew.sentence() == ("Data skew in stage-1: task t3 (partition 3) ran 9.00 s, 9x the median 1.00 s, reading 900 B vs "
                               "100 B; with its data balanced, the job is predicted to take 3.00 s instead of 9.00 s.")


def test_a_straggler_that_read_no_more_goes_back_to_the_median():
    # Same times, same bytes for every task: not the data's. The slow task alone at the median 1 s: 9 s -> 1 s.
    trace = make_trace([job([stage("stage-1", [1, 1, 1, 9], read=[100, 100, 100, 100])])], total_slots=4)
    (skew,) = findings(trace).skewed
    assert skew.cause == CAUSE_STRAGGLER
    assert skew.balanced_task_s == pytest.approx(1.0)
    assert skew.stage_saved_s == pytest.approx(8.0) and skew.balanced_job_s == pytest.approx(1.0)
    assert skew.sentence().startswith("Straggler in stage-1: task t3 (partition 3) ran 9.00 s, 9x the median 1.00 s, "
                                      "reading 100 B vs 100 B; with its slow tasks at the median time")


def test_a_killed_speculative_copy_of_the_straggler_is_not_kept_when_balanced():
    # As above, with a speculative copy of t3 launched at 2 s and killed when t3 ended at 9 s: balanced, t3 ends at
    # 1 s, and the copy is never launched; kept at its traced 7 s it would hold the stage to 9 s.
    ts = tasks([1, 1, 1, 9], read=[100, 100, 100, 100])
    ts.append(tr.Task(id="t3-copy", index=3, attempt=1, executor="e1", start=2.0, end=9.0, status="killed"))
    trace = make_trace([job([stage("stage-1", [], task_list=ts)])], total_slots=5)
    (skew,) = findings(trace).skewed
    assert skew.cause == CAUSE_STRAGGLER and [s.id for s in skew.slow] == ["t3"]
    assert skew.job_runtime_s == pytest.approx(9.0) and skew.balanced_job_s == pytest.approx(1.0)


def test_a_fresh_executors_first_task_is_warming_up_not_a_straggler():
    # 2 slots on one executor: its first two tasks (started before any task there had ended) took 3 s, the eight
    # after them 1 s, all reading the same. p75 = 1.5, slow above 2.25: the two cold tasks only, which a fresh JVM's
    # first wave explains wherever it runs: no straggler.
    starts = [0, 0, 3, 3, 4, 4, 5, 5, 6, 6]
    ts = tasks([3, 3, 1, 1, 1, 1, 1, 1, 1, 1], read=[100] * 10, starts=starts)
    trace = make_trace([job([stage("stage-1", [], task_list=ts)])], total_slots=2)
    assert findings(trace).skewed == []
    # the same tasks on executors that each ran one wave: nothing says they were cold, a straggler each
    for n, t in enumerate(ts[:2]):
        t.executor = f"lone-{n}"
    (skew,) = findings(trace).skewed
    assert skew.cause == CAUSE_STRAGGLER and skew.slow_count == 2 and not skew.warming_up


def test_a_cold_task_that_read_more_or_whose_peers_were_cold_too_is_still_slow():
    # 4 slots: a cold first wave of 12 s (reading 12x the others) and three of 3 s, then twelve warm tasks of 1 s
    # on the three slots the short ones freed. p75 = 1.5, slow above 2.25: t0 read more, data skew, cold or not;
    # the three other cold ones are warming up. Balanced: 33 s of work in 16 tasks on 4 slots, 8.25 s for 12.
    starts = [0, 0, 0, 0] + [3 + wave for wave in range(4) for _slot in range(3)]
    ts = tasks([12, 3, 3, 3] + [1] * 12, read=[1200] + [100] * 15, starts=starts)
    trace = make_trace([job([stage("stage-1", [], task_list=ts)])], total_slots=4)
    (skew,) = findings(trace).skewed
    assert skew.cause == CAUSE_DATA and [s.id for s in skew.slow] == ["t0"] and skew.warming_up == {"t1", "t2", "t3"}
    assert skew.stage_saved_s == pytest.approx(12 - 4 * 33 / 16)
    # a stage whose tasks all ran cold (the executor's first stage), before one that ran warm: the slow one of
    # them is measured against cold peers
    first = tasks([1, 1, 1, 9], read=[100] * 4)
    later = [tr.Task(id=f"u{i}", index=i, executor="e1", start=10.0 + i, end=11.0 + i) for i in range(4)]
    trace = make_trace([job([stage("stage-1", [], task_list=first),
                             stage("stage-2", [], start=10.0, parents=["stage-1"], task_list=later)])], total_slots=4)
    (skew,) = findings(trace).skewed
    assert skew.cause == CAUSE_STRAGGLER and skew.slow[0].id == "t3"


def test_without_read_figures_the_mean():
    trace = make_trace([job([stage("stage-1", [1, 1, 1, 9])])], total_slots=4)
    (skew,) = findings(trace).skewed
    assert skew.cause == CAUSE_TIME and skew.balanced_task_s == pytest.approx(3.0)
    assert skew.slow[0].read is None and "reading" not in skew.sentence()


def test_balanced_tasks_are_not_skew():
    # sorted 1 1.1 1.2 1.3: p75 = 1.225, slow above 1.8375: none; the distribution is still reported
    trace = make_trace([job([stage("stage-1", [1, 1.2, 1.1, 1.3], read=[100, 120, 110, 130])])], total_slots=4)
    found = findings(trace)
    assert found.skewed == [] and found.flagged == set()
    assert found.times["job-0/stage-1"].p75 == pytest.approx(1.225)


def test_a_slow_task_that_other_tasks_waves_overlapped_costs_nothing():
    # 2 slots, in start order 6 then six tasks of 1: slot A runs the 6 s task while slot B runs the six 1 s
    # tasks, both end at 6. sorted p75 = 1, so the 6 s task is slow (and read 6x) ...
    starts = [0, 0, 1, 2, 3, 4, 5]
    ts = tasks([6, 1, 1, 1, 1, 1, 1], read=[600, 100, 100, 100, 100, 100, 100], starts=starts)
    trace = make_trace([job([stage("stage-1", [], task_list=ts)])], total_slots=2)
    # ... but balanced, 7 tasks of 12/7 s on 2 slots take 4 waves, 6.86 s: no saving, no skew.
    assert findings(trace).skewed == []


def test_a_saving_below_two_percent_of_the_job_is_noise():
    # 10 ms tasks and a 90 ms one: 60 ms saved, 67 % of the stage but under 2 % of a 10 s application.
    tiny = stage("stage-1", [0.01, 0.01, 0.01, 0.09], read=[1, 1, 1, 9])
    trace = make_trace([job([tiny])], end=10.0, total_slots=4)
    assert findings(trace).skewed == []
    # the same stage in a 2 s application: 60 ms is 3 % of it
    trace = make_trace([job([stage("stage-1", [0.01, 0.01, 0.01, 0.09], read=[1, 1, 1, 9])])], end=2.0, total_slots=4)
    assert len(findings(trace).skewed) == 1


def test_a_saving_below_ten_percent_of_the_stage_is_not_skew():
    # 8 tasks on 4 slots in two waves: 1 1 1 1 | 1 1 1 1.6. sorted p75 = 1, the 1.6 s task is slow (and read 3x).
    # Replayed: 2.6 s; balanced at the mean 8.6 / 8 = 1.075: 2.15 s; saved 0.45 s = 17 % of 2.6: skew.
    durations = [1, 1, 1, 1, 1, 1, 1, 1.6]
    starts = [0, 0, 0, 0, 1, 1, 1, 1]
    ts = tasks(durations, read=[100] * 7 + [300], starts=starts)
    (skew,) = findings(make_trace([job([stage("stage-1", [], task_list=ts)])], total_slots=4)).skewed
    assert skew.stage_saved_s == pytest.approx(2.6 - 2.15)
    # 20 tasks in five waves, the last one 1.6 s: 5.6 s replayed, 20.6 / 20 = 1.03 s balanced x 5 = 5.15 s;
    # 0.45 s saved is 8 % of the stage: not skew.
    ts = tasks([1] * 19 + [1.6], read=[100] * 19 + [300], starts=[i // 4 for i in range(20)])
    assert findings(make_trace([job([stage("stage-1", [], task_list=ts)])], total_slots=4)).skewed == []


def test_a_sample_of_the_tasks_stands_for_all_of_them():
    # The hook kept 4 of 8 tasks, each standing for 2 in a row; 8 slots: one wave, 9 s -> 3 s as before.
    s = stage("stage-1", [1, 1, 1, 9], read=[100, 100, 100, 900])
    s.task_count = 8
    (skew,) = findings(make_trace([job([s])], total_slots=8)).skewed
    assert (skew.times.count, skew.times.recorded) == (8, 4)
    assert skew.stage_saved_s == pytest.approx(6.0) and skew.balanced_job_s == pytest.approx(3.0)


# -- the job ---------------------------------------------------------------------------------------------

def test_skewed_stages_are_ordered_by_what_the_job_gains():
    # Stage 2 (1 1 1 5, p75 2: the 5 s task is slow; mean 2: saves 3 s) runs after stage 1 (saves 6 s): 14 s.
    first = stage("stage-1", [1, 1, 1, 9], read=[100, 100, 100, 900])
    second = stage("stage-2", [1, 1, 1, 5], start=9.0, parents=["stage-1"], read=[100, 100, 100, 500])
    found = findings(make_trace([job([second, first])], total_slots=4))
    assert [s.profile.op.id for s in found.skewed] == ["stage-1", "stage-2"]
    assert [s.balanced_job_s for s in found.skewed] == [pytest.approx(8.0), pytest.approx(11.0)]
    assert [s.job_saved_s for s in found.skewed] == [pytest.approx(6.0), pytest.approx(3.0)]


def test_a_skewed_stage_off_the_critical_path_saves_the_job_nothing():
    # Stage 1 (skewed, 9 s) ran beside stage 2 (balanced, 10 s) on 8 slots: balanced, stage 1 takes 3 s, and
    # the job still waits 10 s for stage 2.
    skewed = stage("stage-1", [1, 1, 1, 9], read=[100, 100, 100, 900])
    long = stage("stage-2", [10, 10, 10, 10], read=[100, 100, 100, 100])
    (skew,) = findings(make_trace([job([skewed, long])], total_slots=8)).skewed
    assert skew.stage_saved_s == pytest.approx(6.0)
    assert skew.balanced_job_s == pytest.approx(10.0) and skew.job_saved_s == 0.0
    assert "off the critical path" in skew.sentence()


# -- the report -----------------------------------------------------------------------------------------

def test_report_lists_skew_with_advice_and_shows_it():
    trace = make_trace([job([stage("stage-1", [1, 1, 1, 9], read=[100, 100, 100, 900])])], total_slots=4)
    report = analyze(trace, classifier=KeywordClassifier(), band=False).report
    (entry,) = report["skew"]
    assert entry["operation"] == "job-0/stage-1" and entry["cause"] == "data"
    assert entry["slowest"][0] == {"id": "t3", "index": 3, "executor": "e1", "duration_s": 9.0, "read": 900.0}
    assert entry["task_time_s"]["read"] == {"unit": "bytes", "p50": 100.0, "max": 900.0}
    assert entry["balanced_job_runtime_s"] == pytest.approx(3.0) and entry["job_saved_s"] == pytest.approx(6.0)
    assert entry["sentence"] in report["advice"]
    ops = {o["path"]: o for o in report["operations"]}
    assert ops["job-0/stage-1"]["skewed"] is True and ops["job-0/stage-1"]["task_time_s"]["max"] == 9.0
    assert "task_time_s" not in ops["job-0"]  # the job has no tasks of its own
    text = TerminalRenderer(width=200).render(report)
    assert "Skewed operations" in text and "task t3 (partition 3)" in text
    html = HtmlRenderer().render(report)
    assert 'id="skew"' in html and "partition 3" in html


def test_balanced_report_has_an_empty_skew_list_and_no_skew_section():
    trace = make_trace([job([stage("stage-1", [1, 1.2, 1.1, 1.3], read=[100, 120, 110, 130])])], total_slots=4)
    report = analyze(trace, classifier=KeywordClassifier(), band=False).report
    assert report["skew"] == []
    assert report["operations"][1]["skewed"] is False
    assert "Skewed operations" not in TerminalRenderer(width=200).render(report)
    assert 'id="skew"' not in HtmlRenderer().render(report)
