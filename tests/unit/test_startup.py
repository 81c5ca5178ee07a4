"""Executors starting on the machine the application keeps busy (crystalperf.core.predict.startup): hand-computed
start-up phases of a Spark application on one 2-CPU machine."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.predict.startup import StartUp, start_up
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.profile.shared import shared_machine

from .helpers import make_trace, op, task


def application(executors: int = 1, *, busy_cores: float = 1.8, startup_cpu_s: float | None = 3.0,
                added: float = 3.0, executor_host: str = "vm") -> tr.Trace:
    """Start-up from 0 to 6 s (the executors registered at ``added``), then ten 1 s tasks of 0.5 s CPU each on
    ``executors`` one-core executors; the machine's 2 CPUs ``busy_cores`` busy throughout, as the driver's counter
    rows (a row a second) read them; each executor's JVM took ``startup_cpu_s`` of CPU to start."""
    tasks = [task(f"t{i}", 6 + i, 7 + i, cpu_time_s=0.5, run_time_s=1.0) for i in range(10)]
    for t in tasks:
        t.executor = "0"
    ids = [str(i) for i in range(executors)]
    trace = make_trace([op("s", 6, 16, tasks=tasks)], total_slots=executors, cores_per_executor=1,
                       hosts=[f"10.0.0.{i + 2}" for i in range(executors)],
                       executors=[tr.Executor(id=i, host=f"10.0.0.{int(i) + 2}", cores=1, added=added) for i in ids])
    trace.io = [tr.IoSample(t=float(t), source="driver", host="vm", process_cpu_s=0.5 * t,
                            host_cpu_busy_s=busy_cores * t, host_cpu_s=2.0 * t, host_cpus=2, cpu_limit=2.0)
                for t in range(17)]
    trace.io += [tr.IoSample(t=float(t), source=f"executor:{i}", host=executor_host, process_cpu_s=0.5 * (t - 3),
                             host_cpu_busy_s=busy_cores * (t - 3), host_cpu_s=2.0 * (t - 3), host_cpus=2, cpu_limit=1.0)
                 for i in ids for t in range(3, 17)]
    trace.hook = tr.HookCost(processes=[tr.HookProcess(source="driver", cpu_s=0.01, startup_cpu_s=1.0)]
                             + [tr.HookProcess(source=f"executor:{i}", cpu_s=0.01, startup_cpu_s=startup_cpu_s)
                                for i in ids])
    return trace


def phase(trace: tr.Trace) -> StartUp | None:
    profile = build_profile(trace, KeywordClassifier())
    return start_up(profile, shared_machine(profile))


def test_the_start_up_phase_is_read_from_the_trace() -> None:
    found = phase(application())
    assert found == StartUp(seconds=6.0, busy_share=pytest.approx(0.9), cpus=2, executor_cpu_s=3.0, executors=1)
    # 10 % of 2 CPUs over 6 s left idle: 1.2 CPU-s
    assert found is not None and found.idle_cpu_s == pytest.approx(1.2)


def test_an_executor_more_stretches_a_busy_start_up_by_its_cpu_over_the_machines() -> None:
    found = phase(application())
    assert found is not None
    # 3 CPU-s more on 2 CPUs: 1.5 s; the band's other end fills the 1.2 idle CPU-s first: (3 - 1.2) / 2 = 0.9 s
    assert found.ends(2) == pytest.approx((1.5, 0.9))
    assert found.ends(2)[0] == pytest.approx(1.5)
    assert found.ends(3) == pytest.approx((3.0, (6 - 1.2) / 2))
    assert found.ends(1) == (0.0, 0.0)


def test_the_prediction_adds_the_start_up_and_its_band_spans_the_other_end() -> None:
    without = application(startup_cpu_s=None)
    with_start_up = application()
    assert phase(without) is None
    before = Predictor(build_profile(without, KeywordClassifier())).predict(Changes({"executors": 2}), band=False)
    after = Predictor(build_profile(with_start_up, KeywordClassifier())).predict(Changes({"executors": 2}))
    assert after.crystalperf.runtime_s == pytest.approx(before.crystalperf.runtime_s + 1.5)
    assert after.crystalperf.fast_end_s <= after.crystalperf.runtime_s - 0.6 + 1e-9
    note = next(n for n in after.notes if n.startswith("start-up:"))
    assert "3.00 s of CPU each" in note and "90% busy" in note and "+1.50 s" in note and "+0.90 s" in note
    # the same job's own scenario changes nothing
    assert Predictor(build_profile(with_start_up, KeywordClassifier())).predict(
        Changes(), band=False).crystalperf.runtime_s == pytest.approx(16.0)


def test_an_executor_less_gives_back_its_start_up_where_the_phase_waited_for_cpu() -> None:
    found = phase(application(executors=2))
    assert found is not None and found.executors == 2
    assert found.ends(1) == pytest.approx((-1.5, -0.9))
    idle = phase(application(executors=2, busy_cores=1.0))
    assert idle is not None and idle.ends(1) == (0.0, 0.0)
    # more executors on a half-idle machine: 6 CPU-s idle may hide the 3 more
    assert idle.ends(3) == pytest.approx((1.5, 0.0))


@pytest.mark.parametrize("trace", [
    application(added=7.0),  # an executor registered after the first operation: the job did not wait for it
    application(executor_host="worker-1"),  # executors on machines of their own start beside the driver's
], ids=["registered-late", "machines-of-their-own"])
def test_no_start_up_change_where_executors_do_not_share_the_phase(trace: tr.Trace) -> None:
    assert phase(trace) is None
    prediction = Predictor(build_profile(trace, KeywordClassifier())).predict(Changes({"executors": 2}), band=False)
    assert not any(n.startswith("start-up:") for n in prediction.notes)
