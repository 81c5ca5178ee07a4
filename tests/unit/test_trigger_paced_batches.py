"""Micro-batches of a streaming query in what-ifs: a batch that waited for its trigger starts no earlier however
fast the batches before it get, and right after them once they run past it; batches that ran back to back (an
available-now trigger) gain what their work gains. Hand-computed on jobs of one single-task stage each."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.profile.outside import waited_batches

from .helpers import make_trace, op, task


def _batches(starts: list[float], took: float | list[float], end: float, query: str = "q1",
             fired: list[float] | None = None) -> tr.Trace:
    """A job per batch starting at ``starts``, each one stage of one task computing for ``took`` seconds; with
    ``fired``, the batches' progress: when each trigger fired, and that it ran until its job ended."""
    jobs = []
    for n, start in enumerate(starts):
        took_n = took[n] if isinstance(took, list) else took
        stage = op(f"stage-{n}", start, start + took_n, kind="stage", tasks=[
            task(f"t{n}", start, start + took_n, run_time_s=took_n, cpu_time_s=took_n)])
        attributes = {tr.ATTRIBUTE_STREAMING_QUERY: query, tr.ATTRIBUTE_STREAMING_BATCH: str(n)}
        if fired is not None:
            attributes[tr.ATTRIBUTE_STREAMING_TRIGGER_START] = repr(fired[n])
            attributes[tr.ATTRIBUTE_STREAMING_TRIGGER_S] = repr(round(start + took_n - fired[n], 6))
        jobs.append(op(f"job-{n}", start, start + took_n, kind="job", children=[stage], attributes=attributes))
    return make_trace(jobs, end=end)


def _runtime(trace: tr.Trace, changes: dict[str, float]) -> float:
    predictor = Predictor(build_profile(trace, KeywordClassifier()))
    return predictor.predict(Changes(changes), band=False).crystalperf.runtime_s


def test_batches_on_a_trigger_keep_its_schedule_when_they_get_faster() -> None:
    # batches of 0.4 s every second, the application stopped at 5 s: twice the speed ends the last batch 0.2 s
    # sooner (4.2 s), and the 0.6 s after it stay: 4.8 s
    trace = _batches([0.0, 1.0, 2.0, 3.0, 4.0], took=0.4, end=5.0)
    assert _runtime(trace, {"cpu_speed": 2.0}) == pytest.approx(4.8)


def test_batches_that_outgrow_their_trigger_start_one_after_another() -> None:
    # at a fifth of the speed a batch takes 2 s: each starts when the one before ends (no back-to-back gap was
    # traced to add): 10 s, and the 0.6 s after the last
    trace = _batches([0.0, 1.0, 2.0, 3.0, 4.0], took=0.4, end=5.0)
    assert _runtime(trace, {"cpu_speed": 0.2}) == pytest.approx(10.6)


def test_batches_that_ran_back_to_back_gain_all_their_work_gains() -> None:
    # 0.05 s between batches of 1 s (planning and commits): twice the speed, 5 x 0.5 + 4 x 0.05 + 0.1 after
    trace = _batches([0.0, 1.05, 2.1, 3.15, 4.2], took=1.0, end=5.3)
    assert _runtime(trace, {"cpu_speed": 2.0}) == pytest.approx(2.8)


def test_a_query_behind_its_trigger_then_keeping_up_waited_only_where_its_gaps_outgrew_its_own_steps() -> None:
    # gaps 0.3, 0.3, 0.3 (planning and commits: the query was behind), then 1.2 and 0.7: more than twice the
    # shortest, waits for the trigger
    starts, took = [0.0, 1.3, 2.3, 3.3, 5.0, 6.1], [1.0, 0.7, 0.7, 0.5, 0.4, 0.4]
    trace = _batches(starts, took, end=7.0)
    waited = waited_batches(trace.operations)
    assert {op_id: wait.gap_s for op_id, wait in waited.items()} == pytest.approx({"job-4": 1.2, "job-5": 0.7})
    # the query's own steps: the shortest gap of the batches that did not wait
    assert [wait.overhead_s for wait in waited.values()] == pytest.approx([0.3, 0.3])
    # twice the speed: the first four back to back 0.3 s apart end at 2.35; the last two start at their triggers
    # (5.0, 6.1) and end at 6.3, and the 0.5 s after the last stays
    assert _runtime(trace, {"cpu_speed": 2.0}) == pytest.approx(6.8)


def test_a_wait_for_the_trigger_is_not_time_outside_the_operations_that_a_device_changes() -> None:
    from crystalperf.core.profile.outside import outside_time

    trace = _batches([0.0, 1.0, 2.0, 3.0, 4.0], took=0.4, end=5.0)
    # the driver read a megabyte a second all along
    trace.io = [tr.IoSample(t=i * 0.25, source="driver", storage_read_bytes=i * 0.25e6) for i in range(21)]
    found = outside_time(build_profile(trace, KeywordClassifier()))
    assert found is not None
    # the 0.6 s before each of the four later batches waited for the trigger; the 0.6 s after the last did not
    assert [(g.start, g.end) for g in found.gaps] == [pytest.approx((4.4, 5.0))]


def test_the_batches_progress_tells_a_short_wait_from_a_query_s_own_steps() -> None:
    # A 1 s trigger (as Spark fires it: on whole seconds), planning of 0.24-0.27 s before each job. Batches 1-3 ran
    # behind (their triggers, 1.0, 2.0, 3.0, had fired before the batch ahead ended); batch 4's fired at 4.0, 0.25 s
    # after batch 3 ended: a wait that its gap (0.40 s, against 0.24-0.27 s) alone does not tell from the planning.
    starts, took = [0.27, 1.33, 2.33, 3.32, 4.15], [0.8, 0.75, 0.75, 0.43, 0.4]
    fired = [0.0, 1.07, 2.08, 3.08, 4.0]
    without_progress = waited_batches(_batches(starts, took, end=5.0).operations)
    assert without_progress == {}
    trace = _batches(starts, took, end=5.0, fired=fired)
    waited = waited_batches(trace.operations)
    assert list(waited) == ["job-4"]
    # its own steps: from its trigger to its job
    assert waited["job-4"].gap_s == pytest.approx(0.40)
    assert waited["job-4"].overhead_s == pytest.approx(0.15)
    # twice the speed: batches 0-3 back to back with their traced gaps end at 0.27 + 1.365 + 0.785 = 2.42 (their
    # planning is not CPU the tasks measured); batch 4 starts at its trigger's 4.15 and takes 0.2; 0.45 s after it
    assert _runtime(trace, {"cpu_speed": 2.0}) == pytest.approx(4.8)
