"""Algorithm 1: list-scheduling replay, first-wave warm-up, sequential parts (hand-computed)."""

import pytest

from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.predict.compute import estimate_warmup
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.schedule import replay

from .helpers import make_trace, op, task

DURATIONS = [4, 4, 4, 4, 2, 2]


def test_waves_on_two_slots():
    # slot A: 4, 4, 2 ; slot B: 4, 4, 2  -> 10
    assert replay(DURATIONS, 2) == pytest.approx(10)


def test_three_slots():
    # 4,4,4 | then 4 at t=4 -> 8, 2 at 4 -> 6, 2 at 6 -> 8
    assert replay(DURATIONS, 3) == pytest.approx(8)


def test_task_moved_into_first_wave_is_slowed_by_warmup():
    # Third task joins the first wave: 4*2 = 8 on slot C; the rest as before -> 8.
    assert replay(DURATIONS, 3, original_slots=2, warmup=2.0) == pytest.approx(8)
    # With warm-up 3 that task alone takes 12.
    assert replay(DURATIONS, 3, original_slots=2, warmup=3.0) == pytest.approx(12)


def test_task_moved_out_of_first_wave_is_sped_up_by_warmup():
    # Third task leaves the first wave: 4/2 = 2. A: 4 | B: 4 | 2 at 4->6, 4 at 4->8, 2 at 6->8, 2 at 8->10.
    assert replay(DURATIONS, 2, original_slots=3, warmup=2.0) == pytest.approx(10)


def test_sequential_parts_stay_sequential():
    # Amdahl: one task cannot use more slots; order is kept (no re-sorting by length).
    assert replay([10], 8) == 10
    assert replay([1, 1, 10], 2) == pytest.approx(11)


def test_empty_operation():
    assert replay([], 4) == 0.0


def test_warmup_estimated_from_first_versus_later_waves():
    # 2 slots; first wave tasks take 3 s, later ones 2 s -> factor 1.5.
    tasks = [task("a", 0, 3), task("b", 0, 3), task("c", 3, 5), task("d", 3, 5), task("e", 5, 7), task("f", 5, 7)]
    trace = make_trace([op("s", 0, 7, tasks=tasks)], total_slots=2)
    profile = build_profile(trace, KeywordClassifier(), locators=[])
    factor, per_op = estimate_warmup(profile, 2)
    assert factor == pytest.approx(1.5) and per_op == [pytest.approx(1.5)]


def test_more_slots_through_the_predictor_and_no_change_is_identity():
    tasks = [task(str(i), 0 + 2 * (i // 2), 2 + 2 * (i // 2), run_time_s=2, cpu_time_s=2) for i in range(8)]
    trace = make_trace([op("s", 0, 8, tasks=tasks)], total_slots=2)
    predictor = Predictor(build_profile(trace, KeywordClassifier(), locators=[]))
    assert predictor.simulate(Changes({})) == pytest.approx(8)
    # 8 tasks of 2 s on 4 slots: 2 waves -> 4 s.
    assert predictor.simulate(Changes({"slots": 4})) == pytest.approx(4)
    # CPU twice as fast: all-CPU tasks take 1 s -> 4 waves of 1 s.
    assert predictor.simulate(Changes({"cpu_speed": 2.0})) == pytest.approx(4)
