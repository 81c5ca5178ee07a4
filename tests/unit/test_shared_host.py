"""Task slots on the same hosts: tasks side by side share the cores and the storage device (hand-computed)."""

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import FixedClassifier
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.predict.compute import SharedHostModel
from crystalperf.core.profile.dag import build_profile

from .helpers import make_trace, op, task


def _predictor(cpu: float, waited: float, **env: object) -> Predictor:
    # 8 tasks of 2 s, two at a time on 2 slots (4 waves: 8 s); each ran `cpu` s on a core and waited `waited` s
    # for one (the rest of its 2 s, if any, is disk).
    disk = 2.0 - cpu - waited
    tasks = [task(str(i), 2 * (i // 2), 2 * (i // 2) + 2, run_time_s=2, cpu_time_s=cpu, cpu_wait_s=waited,
                  disk_time_s=disk) for i in range(8)]
    trace = make_trace([op("scan", 0, 8, tasks=tasks)], **{"total_slots": 2, **env})
    return Predictor(build_profile(trace, FixedClassifier({}), locators=[]))


def test_fewer_tasks_side_by_side_wait_less_for_a_core():
    predictor = _predictor(cpu=1.2, waited=0.8)
    # The cores were loaded 1 + 0.8/1.2 = 5/3 times over; with one task side by side instead of two, 5/6: no
    # task waits. Each task takes its 1.2 s of CPU: 8 in a row, 9.6 s (replaying the traced tasks says 16 s).
    assert predictor.simulate(Changes({"slots": 1})) == pytest.approx(9.6)
    assert predictor.simulate(Changes({"slots": 1}), with_vectors=False) == pytest.approx(16.0)
    notes = predictor.predict(Changes({"slots": 1}), band=False).notes
    assert any("run-queue delay" in n and "6.40 s" in n for n in notes)


def test_more_tasks_on_saturated_cores_gain_nothing():
    predictor = _predictor(cpu=1.2, waited=0.8)
    # Four side by side load the cores 10/3 times over: each task's 1.2 s of CPU takes 4 s. Two waves: 8 s, as
    # traced, where the replay says 4 s.
    assert predictor.simulate(Changes({"slots": 4})) == pytest.approx(8.0)
    assert predictor.simulate(Changes({"slots": 4}), with_vectors=False) == pytest.approx(4.0)


def test_cores_not_measurably_saturated_are_taken_to_have_room_for_more_tasks():
    predictor = _predictor(cpu=1.9, waited=0.1)  # 5 % of the CPU time: under SATURATED_WAIT_SHARE
    assert predictor.simulate(Changes({"slots": 4})) == pytest.approx(4.0)
    # Fewer side by side still wait less: the load 2/1.9 halves, below one: 1.9 s each, 8 in a row.
    assert predictor.simulate(Changes({"slots": 1})) == pytest.approx(15.2)


def test_without_a_measured_run_queue_delay_the_tasks_are_replayed():
    tasks = [task(str(i), 2 * (i // 2), 2 * (i // 2) + 2, run_time_s=2, cpu_time_s=2) for i in range(8)]
    trace = make_trace([op("scan", 0, 8, tasks=tasks)], total_slots=2)
    predictor = Predictor(build_profile(trace, FixedClassifier({}), locators=[]))
    assert predictor.simulate(Changes({"slots": 1})) == pytest.approx(16.0)
    assert any("no run-queue delay" in n for n in predictor.predict(Changes({"slots": 1}), band=False).notes)


def test_tasks_reading_side_by_side_share_the_storage_device():
    predictor = _predictor(cpu=1.0, waited=0.0, disk_bandwidth=100e6)
    # 8 s of disk time in all, and the device delivered 800 MB at 100 MB/s: all of it waited on the device.
    predictor.profile.trace.metrics["storage_read_bytes"] = 800e6
    predictor = Predictor(predictor.profile)
    # One reader instead of two waits half as long: 1 s of CPU + 0.5 s of disk, 8 in a row: 12 s.
    assert predictor.simulate(Changes({"slots": 1})) == pytest.approx(12.0)
    # Where the device delivered a quarter of those bytes, three quarters of the disk time were page-cache copies,
    # which do not wait on the device: 1 + 0.25 * 0.5 + 0.75 = 1.875 s each.
    predictor.profile.trace.metrics["storage_read_bytes"] = 200e6
    assert Predictor(predictor.profile).simulate(Changes({"slots": 1})) == pytest.approx(15.0)


def test_more_executors_with_the_same_cores_each_change_nothing_on_a_host():
    tasks = [task(str(i), 2 * (i // 4), 2 * (i // 4) + 2, run_time_s=2, cpu_time_s=1.2, cpu_wait_s=0.8)
             for i in range(8)]
    executors = [tr.Executor(id="1", host="a", cores=2), tr.Executor(id="2", host="b", cores=2)]
    trace = make_trace([op("scan", 0, 4, tasks=tasks)], total_slots=4, cores_per_executor=2, executors=executors)
    predictor = Predictor(build_profile(trace, FixedClassifier({}), locators=[]))
    # 4 executors of 2 cores: the 8 tasks in one wave, each as long as traced.
    assert predictor.simulate(Changes({"executors": 4})) == pytest.approx(2.0)
    # 1 core each: one task per host, no waiting: 1.2 s each, four in a row on each of the 2 executors.
    assert predictor.simulate(Changes({"cores": 1})) == pytest.approx(4.8)


def test_a_job_whose_operations_ran_no_tasks_side_by_side_is_left_to_its_own_model():
    # A training step is one unit (no tasks): TensorFlow's `cores` are threads inside it, not tasks side by side.
    trace = make_trace([op("step", 0, 2, metrics={"run_time_s": 2.0, "cpu_time_s": 1.0, "cpu_wait_s": 1.0})],
                       total_slots=2)
    predictor = Predictor(build_profile(trace, FixedClassifier({}), locators=[]), models=[SharedHostModel()])
    notes = predictor.predict(Changes({"cores": 1}), band=False).notes
    assert predictor.simulate(Changes({"cores": 1})) == pytest.approx(2.0)
    assert not any("side by side" in n for n in notes)
