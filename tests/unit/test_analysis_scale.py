"""The analysis at scale: implicit ordering by a sweep, replay bounded by the tasks (not the slots), operations
whose hook kept a sample of their tasks, and what-if values out of range."""

from __future__ import annotations

import contextlib
import heapq
import random
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.errors import BadInputError
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.profile.bottleneck import find_bottleneck
from crystalperf.core.profile.dag import SEQUENCE_TOLERANCE_S, build_profile, implicit_predecessors
from crystalperf.core.schedule import replay

from .helpers import make_trace, op, task

# -- implicit ordering ------------------------------------------------------------------------------

def quadratic_predecessors(ops: list[tr.Operation]) -> dict[str, str]:
    """The definition: of the siblings that ended (within the tolerance) before an operation without parents
    started and started strictly before it, the one that ended last; of equal ends, the one listed last."""
    result = {}
    for o in ops:
        if o.parents:
            continue
        candidates = [(other.end, i) for i, other in enumerate(ops)
                      if other.id != o.id and other.end <= o.start + SEQUENCE_TOLERANCE_S and other.start < o.start]
        if candidates:
            result[o.id] = ops[max(candidates)[1]].id
    return result


@pytest.mark.parametrize("seed", range(40))
def test_implicit_order_by_sweep_is_the_quadratic_definition(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 30)
    # Few distinct times so that equal starts, equal ends, zero durations and the tolerance's edge all occur.
    times = [rng.choice([0.0, 1.0, 2.0, 2.004, 2.005, 2.006, 3.0, 5.0]) for _ in range(2 * n)]
    ops = []
    for i in range(n):
        start, end = sorted(times[2 * i:2 * i + 2])
        parents = [f"o{rng.randrange(i)}"] if i and rng.random() < 0.2 else []
        ops.append(op(f"o{i}", start, end, parents))
    assert implicit_predecessors(ops) == quadratic_predecessors(ops)


# -- replay ---------------------------------------------------------------------------------------------

def list_schedule(durations: list[float], slots: int, original: int | None = None, warmup: float = 1.0) -> float:
    """Algorithm 1 written out: every task to the slot that frees first, first-wave tasks moved in or out of
    the first wave slowed or sped up by the warm-up factor."""
    old = original or slots
    free = [0.0] * slots
    makespan = 0.0
    for i, d in enumerate(durations):
        if i < old and i >= slots:
            d /= warmup
        elif i < slots and i >= old:
            d *= warmup
        end = heapq.heappop(free) + d
        heapq.heappush(free, end)
        makespan = max(makespan, end)
    return makespan


@pytest.mark.parametrize("seed", range(30))
def test_replay_is_the_list_scheduler_and_a_weighted_task_is_that_many_in_a_row(seed):
    rng = random.Random(seed)
    durations = [rng.uniform(0.1, 2.0) for _ in range(rng.randint(1, 40))]
    slots, original, warmup = rng.randint(1, 50), rng.randint(1, 50), rng.choice([1.0, 1.5])
    assert replay(durations, slots, original_slots=original, warmup=warmup) == pytest.approx(
        list_schedule(durations, slots, original, warmup))
    weight = rng.choice([2, 3, 7])
    expanded = [d for d in durations for _ in range(weight)]
    assert replay(durations, slots, original_slots=original, warmup=warmup, weight=float(weight)) == pytest.approx(
        list_schedule(expanded, slots, original, warmup))


def test_replay_allocates_for_the_tasks_not_the_slots():
    tracemalloc.start()
    try:
        # a billion slots for two tasks: one wave, the longer task
        assert replay([1.0, 2.0], 1_000_000_000) == 2.0
        # 2**40 tasks (three recorded) on 2**31 slots: 256 waves of 1 s
        assert replay([1.0, 1.0, 1.0], 2**31, weight=2**40 / 3) == pytest.approx(512.0)
        # a traced run of 2**31 slots replayed on 8
        assert replay([1.0] * 100, 8, original_slots=2**31, weight=10.0) == pytest.approx(125.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000


# -- sampled tasks ----------------------------------------------------------------------------------------

def stage_trace(sampled: bool) -> tr.Trace:
    """1,000 tasks of 1 s (0.6 s CPU, 0.4 s disk) on 4 slots: 250 s. Sampled: every tenth task recorded, the
    exact totals in the stage's metrics."""
    tasks = [task(str(i), 10.0 + i // 4, 11.0 + i // 4, run_time_s=1.0, cpu_time_s=0.6, disk_time_s=0.4)
             for i in range(1000)]
    extra = {}
    if sampled:
        tasks = tasks[::10]
        # The sample's own CPU figures are off; the hook's totals over all tasks are what counts.
        for t in tasks:
            t.metrics["cpu_time_s"] = 0.5
        extra = {"task_count": 1000, "metrics": {"run_time_s": 1000.0, "cpu_time_s": 600.0, "disk_time_s": 400.0}}
    stage = op("stage-0", 10.0, 260.0, tasks=tasks, **extra)
    return make_trace([stage], start=0.0, end=270.0, total_slots=4, cores_per_executor=4)


def test_a_sampled_stage_splits_its_time_as_the_full_record_does():
    profiles = {s: build_profile(stage_trace(s), KeywordClassifier()) for s in (False, True)}
    for profile in profiles.values():
        prof = profile.by_path["stage-0"]
        # by hand: 600 of 1,000 task-seconds CPU, 400 disk; 1,000 task-seconds of work
        assert prof.vector.vector.cpu == pytest.approx(0.6)
        assert prof.vector.vector.disk == pytest.approx(0.4)
        assert sum(prof.work_seconds.values()) == pytest.approx(1000.0)
        bottleneck = find_bottleneck(profile)
        assert bottleneck.resource == "cpu"
        assert bottleneck.seconds["cpu"] == pytest.approx(150.0)
        assert bottleneck.seconds["disk"] == pytest.approx(100.0)


@pytest.mark.parametrize("changes, expected, replayed", [
    # 1,000 tasks in 125 waves of 8 instead of 250 of 4
    ({"cores": 8}, 270.0 - 125.0, 270.0 - 125.0),
    # every task 0.7 s instead of 1 s; replayed without vectors, all of it is CPU: 0.5 s
    ({"cpu_speed": 2.0}, 270.0 - 250.0 * 0.3, 270.0 - 125.0),
    ({"cores": 2}, 270.0 + 250.0, 270.0 + 250.0),
])
def test_a_sampled_stage_predicts_as_the_full_record_does(changes, expected, replayed):
    for sampled in (False, True):
        predictor = Predictor(build_profile(stage_trace(sampled), KeywordClassifier()))
        prediction = predictor.predict(Changes(changes))
        assert prediction.crystalperf.runtime_s == pytest.approx(expected, rel=0.01)
        assert prediction.replay.runtime_s == pytest.approx(replayed, rel=0.01)
        assert prediction.crystalperf.low_s <= prediction.crystalperf.runtime_s <= prediction.crystalperf.high_s


def test_the_report_counts_all_the_tasks_and_says_how_many_were_recorded():
    report = analyze(stage_trace(True), classifier=KeywordClassifier()).report
    entry = report["operations"][0]
    assert (entry["tasks"], entry["tasks_recorded"]) == (1000, 100)


# -- what-if ranges ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("assignment", [
    "memory=0", "memory=512k", "memory=2p", "cpu_speed=inf", "cpu_speed=nan", "cpu_speed=0", "cpu_speed=1000",
    "cores=0", "cores=1000001", "cores=2.5", "executors=-1", "parallelism=" + "9" * 400, "disk=0",
    "network=" + "9" * 400 + "gbit", "network=20tbit", "disk=1e3", "cpu_share=0", "cpu_share=1e999",
    "gpu_speedup=-1", "network=0:1gbit",
])
def test_what_if_values_outside_their_ranges_are_one_line(assignment):
    with pytest.raises(BadInputError) as caught:
        Changes.parse([assignment])
    message = str(caught.value)
    assert "\n" not in message and len(message) < 200


@pytest.mark.parametrize("assignment, value", [
    ("cores=1000000", 1_000_000), ("cpu_speed=0.01", 0.01), ("cpu_speed=100", 100.0), ("memory=1m", 1 << 20),
    ("memory=1p", 1 << 50), ("network=10tbit", 10e12 / 8), ("disk=1", 1.0), ("cpu_share=50%", 0.5),
])
def test_what_if_values_at_the_ends_of_their_ranges_are_taken(assignment, value):
    key = assignment.partition("=")[0]
    assert Changes.parse([assignment]).values[key] == pytest.approx(value)


def test_absurd_but_valid_traces_analyse_without_huge_allocations():
    tasks = [task(str(i), 0.0, 1e12, run_time_s=1e12) for i in range(3)]
    executors = [tr.Executor(id=str(i), cores=tr.MAX_SLOTS) for i in range(1000)]
    trace = make_trace([op("stage-0", 0.0, 1e12, tasks=tasks, task_count=2**40)], end=1e12,
                       total_slots=tr.MAX_SLOTS, cores_per_executor=tr.MAX_SLOTS, executors=executors)
    tracemalloc.start()
    try:
        result = analyze(trace, classifier=KeywordClassifier(), scenarios=[
            Changes.parse(["cores=1000000", "executors=1000000"]), Changes.parse(["cores=1"])])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert all(p.crystalperf.runtime_s > 0 for p in result.predictions)
    assert peak < 100_000_000


# -- re-traversal of a large level ------------------------------------------------------------------------

def sequential_end(parents: list[int], offsets: list[float], durations: list[float], tail: float) -> float:
    """The definition, one step at a time: a step starts its offset after its predecessor ended, never before
    that predecessor started nor before the level (a root starts at its offset)."""
    start, end = [0.0] * len(parents), [0.0] * len(parents)
    for i, p in enumerate(parents):
        start[i] = max(end[p] + offsets[i], start[p], 0.0) if p >= 0 else max(offsets[i], 0.0)
        end[i] = start[i] + durations[i]
    return max(end) + tail


@pytest.mark.parametrize("seed", range(12))
def test_a_large_forest_level_ends_when_the_step_by_step_definition_says(seed):
    from crystalperf.core.predict.simulation import VECTOR_PROPAGATION_STEPS, LevelPlan

    rng = random.Random(seed)
    n = VECTOR_PROPAGATION_STEPS + rng.randint(0, 3000)
    # chains, trees and several roots; negative offsets (overlapping, pipelined) and zero durations included
    parents = [-1 if i == 0 or rng.random() < 0.02 else rng.choice([i - 1, i - 1, rng.randrange(i)]) for i in range(n)]
    offsets = [rng.choice([rng.uniform(0.0, 2.0), rng.uniform(-3.0, 0.0), 0.0]) for _ in range(n)]
    durations = [rng.choice([rng.uniform(0.0, 5.0), 0.0]) for _ in range(n)]
    plan = LevelPlan([], 1.5, [((p,) if p >= 0 else (), o, None, None) for p, o in zip(parents, offsets, strict=True)])  # type: ignore[misc]
    plan.parents, plan.offsets = np.array(parents), np.array(offsets)
    assert plan.end(durations) == pytest.approx(sequential_end(parents, offsets, durations, 1.5), rel=1e-10)
    plan.parents = None  # the step-by-step loop the level takes below the size
    assert plan.end(durations) == pytest.approx(sequential_end(parents, offsets, durations, 1.5), rel=1e-10)


def test_a_three_step_chain_by_hand():
    from crystalperf.core.predict.simulation import LevelPlan

    # a: 0-2; b after a with a 1 s gap: 3-4; c overlapping b by 5 s, so it starts when b started: 3-10
    plan = LevelPlan([], 0.5, [((), 0.0, None, None), ((0,), 1.0, None, None), ((1,), -5.0, None, None)])  # type: ignore[misc]
    assert plan.end([2.0, 1.0, 7.0]) == 10.5
    plan.parents, plan.offsets = np.array([-1, 0, 1]), np.array([0.0, 1.0, -5.0])
    assert plan.end([2.0, 1.0, 7.0]) == 10.5


def test_many_operations_predict_as_the_step_by_step_traversal_does():
    from crystalperf.core.predict import simulation
    from crystalperf.core.trace.synthetic import dag_trace

    trace = dag_trace(operations=simulation.VECTOR_PROPAGATION_STEPS + 100, shape="flat", seed=5)
    profile = build_profile(trace, KeywordClassifier())
    scenarios = [Changes({"cpu_speed": 2.0}), Changes({"disk": 1e8}), Changes({"cores": 1}), Changes({"network": 1e7})]
    vectorised = [Predictor(profile).predict(c) for c in scenarios]
    original = simulation.VECTOR_PROPAGATION_STEPS
    try:
        simulation.VECTOR_PROPAGATION_STEPS = 10**9
        stepwise = [Predictor(profile).predict(c) for c in scenarios]
    finally:
        simulation.VECTOR_PROPAGATION_STEPS = original
    for a, b in zip(vectorised, stepwise, strict=True):
        assert a.crystalperf.runtime_s == pytest.approx(b.crystalperf.runtime_s, rel=1e-9)
        assert a.crystalperf.low_s == pytest.approx(b.crystalperf.low_s, rel=1e-9)
        assert a.crystalperf.high_s == pytest.approx(b.crystalperf.high_s, rel=1e-9)
        assert a.replay.runtime_s == pytest.approx(b.replay.runtime_s, rel=1e-9)


def test_a_bandwidth_no_operation_used_changes_no_point_estimate_but_the_draws_may_use_it():
    from crystalperf.core.predict.io import IOModel

    stages = [op(f"s{i}", 10.0 * i, 10.0 * i + 8.0, tasks=[task(f"{i}.{k}", 10.0 * i, 10.0 * i + 8.0 - k,
                                                                run_time_s=8.0 - k, cpu_time_s=(8.0 - k) * 0.7)
                                                           for k in range(3)])
              for i in range(4)]
    profile = build_profile(make_trace(stages, end=40.0, total_slots=4), KeywordClassifier())
    predictor = Predictor(profile)
    network = Changes({"network": 1e6})
    predictor.prepare(network)
    io = next(m for m in predictor.models if isinstance(m, IOModel))
    assert io.point_unchanged and not io.unchanged
    calls = []
    original = IOModel.adjust
    try:
        IOModel.adjust = lambda self, ctx, parts: calls.append(ctx) or original(self, ctx, parts)  # type: ignore[method-assign]
        assert predictor.simulate(network) == pytest.approx(predictor.simulate(Changes({})))
        assert calls == []  # the point estimate does not ask the model
        predictor.predict(network)
        assert calls  # the Monte Carlo draws do: a drawn vector may give the network a share
    finally:
        IOModel.adjust = original  # type: ignore[method-assign]


@contextlib.contextmanager
def columns_from(steps: int) -> Iterator[None]:
    """Levels of at least ``steps`` steps adjusted as columns (10**9: every operation one at a time)."""
    from crystalperf.core.predict import engine

    original = engine.COLUMNS_MIN_STEPS
    engine.COLUMNS_MIN_STEPS = steps
    try:
        yield
    finally:
        engine.COLUMNS_MIN_STEPS = original


@pytest.mark.parametrize("seed", range(3))
def test_models_adjusting_columns_give_what_they_give_one_operation_at_a_time(seed):
    from crystalperf.core.predict import engine

    rng = random.Random(seed)
    ops, clock = [], 0.0
    for i in range(engine.COLUMNS_MIN_STEPS + 50):
        tasks = []
        for k in range(rng.randint(1, 3)):
            run = rng.uniform(0.1, 3.0)
            tasks.append(task(f"{i}.{k}", clock, clock + run, run_time_s=run, cpu_time_s=run * rng.uniform(0.2, 0.9),
                              disk_time_s=run * rng.uniform(0.0, 0.1), input_bytes=rng.uniform(0, 1e8)))
        longest = max(t.end for t in tasks)
        # some spans shorter than their tasks (a trace contradicting itself), some kernels a GPU would run
        end = clock + (longest - clock) * (0.5 if rng.random() < 0.1 else 1.0)
        ops.append(op(f"o{i}", clock, end, tasks=tasks, kind=rng.choice(["stage", "kernel"])))
        clock = longest + rng.uniform(0.0, 0.2)
    profile = build_profile(make_trace(ops, total_slots=4, cores_per_executor=4), KeywordClassifier())
    for changes in ({"cpu_speed": 2.0}, {"cpu_share": 0.25}, {"disk": 1e7}, {"network": 1e6}, {"device": "gpu"},
                    {"cores": 1, "cpu_speed": 0.5}, {"disk": 5e9, "cpu_speed": 1.5}):
        durations = {}
        for columns in (True, False):
            with columns_from(engine.COLUMNS_MIN_STEPS if columns else 10**9):
                predictor = Predictor(profile)
                scenario = Changes(changes)
                predictor.prepare(scenario)
                predictor.simulate(scenario, record_point=True)
                durations[columns] = list(predictor._plan(profile.top).points or [])
        assert durations[True] == durations[False], changes


@pytest.mark.parametrize("operations", [300, 4000])
def test_monte_carlo_draws_adjusted_as_columns_are_the_draws_one_operation_at_a_time(operations):
    from crystalperf.core.predict import engine

    rng = random.Random(operations)
    ops, clock = [], 0.0
    for i in range(operations):
        tasks = []
        for k in range(rng.choice([0, 1, 2, 4])):  # operations without tasks; with enough to resample
            run = rng.uniform(0.1, 3.0)
            tasks.append(task(f"{i}.{k}", clock, clock + run, run_time_s=run, cpu_time_s=run * rng.uniform(0.2, 0.9)))
        end = max((t.end for t in tasks), default=clock + 0.5)
        ops.append(op(f"o{i}", clock, end, tasks=tasks))
        clock = end + rng.uniform(0.0, 0.2)
    profile = build_profile(make_trace(ops, total_slots=4, cores_per_executor=4), KeywordClassifier())
    predictions = {}
    for columns in (True, False):
        with columns_from(engine.COLUMNS_MIN_STEPS if columns else 10**9):
            predictor = Predictor(profile)
            predictions[columns] = [predictor.predict(Changes(c)) for c in ({"cpu_speed": 2.0}, {"disk": 1e7})]
    for a, b in zip(predictions[True], predictions[False], strict=True):
        assert (a.crystalperf.runtime_s, a.crystalperf.low_s, a.crystalperf.high_s) == (
            b.crystalperf.runtime_s, b.crystalperf.low_s, b.crystalperf.high_s)
        assert a.crystalperf.low_s != a.crystalperf.high_s  # the draws did draw
