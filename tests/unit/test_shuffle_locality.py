"""A new executor count changes how much of a shuffle crosses the network (core.predict.io)."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import FixedClassifier
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.predict.io import remote_share
from crystalperf.core.profile.dag import build_profile

from .helpers import make_trace, op, task

MB = 1e6


def _shuffle_trace(executors: int, remote_bytes: float, hosts: int | None = None, **metrics: float) -> tr.Trace:
    """One reduce stage of ``executors`` tasks (one per executor, one core each, on ``hosts`` hosts: one each by
    default): 10 s each, 5 s of it waiting on shuffle fetches, 100 MB read of which ``remote_bytes`` remotely."""
    tasks = [task(f"t{i}", 0, 10, run_time_s=10, cpu_time_s=5, network_wait_s=5, shuffle_read_bytes=100 * MB,
                  shuffle_remote_read_bytes=remote_bytes, **metrics) for i in range(executors)]
    for i, t in enumerate(tasks):
        t.executor = str(i)
    return make_trace([op("reduce", 0, 10, tasks=tasks)],
                      executors=[tr.Executor(id=str(i), host=f"h{i % (hosts or executors)}", cores=1)
                                 for i in range(executors)],
                      cores_per_executor=1, total_slots=executors, network_bandwidth=10 * MB)


def _predict(trace: tr.Trace, change: str) -> tuple[float, list[str]]:
    prediction = Predictor(build_profile(trace, FixedClassifier({}), locators=[])).predict(
        Changes.parse(change.split(" ")), band=False)
    return prediction.crystalperf.runtime_s, prediction.notes


def test_remote_share_of_evenly_spread_map_outputs():
    assert [remote_share(e) for e in (1, 2, 4)] == [0.0, 0.5, 0.75]


def test_one_executor_fetches_nothing_over_the_network():
    # Two executors fetched half their blocks remotely (5 s each). On one the blocks are all local: each task is
    # its 5 s of CPU, and the two run one after the other on the one core.
    runtime, notes = _predict(_shuffle_trace(2, 50 * MB), "executors=1")
    assert runtime == pytest.approx(10)
    assert any("0% of a shuffle's blocks" in n and "fetched 50%" in n for n in notes)


def test_more_executors_fetch_a_larger_share_remotely():
    # 2 -> 4 executors: 75 % of the blocks remote instead of 50 %, 7.5 s of fetching instead of 5 s; the two tasks
    # still run side by side.
    runtime, notes = _predict(_shuffle_trace(2, 50 * MB), "executors=4")
    assert runtime == pytest.approx(5 + 7.5)
    assert any("slower with more executors: 75% of the shuffle" in n for n in notes)  # a cost, not an artefact


def test_a_local_shuffle_gets_the_new_remote_bytes_over_the_link():
    # One executor read all 100 MB locally (its 5 s of "network" time is local fetching, left as it is). On two
    # executors half of it, 50 MB, crosses a 10 MB/s link: 5 s more.
    runtime, _ = _predict(_shuffle_trace(1, 0.0), "executors=2")
    assert runtime == pytest.approx(10 + 5)


def test_executors_added_on_the_same_hosts_read_each_others_blocks_from_the_hosts_disks():
    # 2 -> 4 executors on the same 2 hosts: still half the blocks on the other host, the fetching as it was
    runtime, notes = _predict(_shuffle_trace(2, 50 * MB), "executors=4 hosts=2")
    assert runtime == pytest.approx(10)
    assert not any("shuffle's blocks" in n for n in notes)
    # both executors on one host: nothing crosses the network, the two tasks side by side on its two cores
    runtime, notes = _predict(_shuffle_trace(2, 50 * MB), "hosts=1")
    assert runtime == pytest.approx(5)
    assert any(n.startswith("hosts 2 -> 1: 0% of a shuffle's blocks") for n in notes)


def test_executors_the_traced_run_had_on_one_host_fetched_from_none():
    # two executors on one host read all 100 MB there; 4 executors, two hosts by default: 50 MB over the 10 MB/s
    # link, 5 s more (with 4 hosts, 75 MB: 7.5 s)
    trace = _shuffle_trace(2, 0.0, hosts=1)
    runtime, notes = _predict(trace, "executors=4")
    assert runtime == pytest.approx(10 + 5)
    assert any(n.startswith("hosts 1 -> 2: 50% of a shuffle's blocks") for n in notes)
    assert _predict(trace, "executors=4 hosts=4")[0] == pytest.approx(10 + 7.5)
    # no more hosts than executors: a host without one runs nothing of the job
    assert _predict(trace, "executors=4 hosts=8") == _predict(trace, "executors=4 hosts=4")


def test_a_trace_without_the_remote_split_keeps_its_shuffle_time():
    trace = _shuffle_trace(2, 0.0)
    for t in trace.operations[0].tasks:
        del t.metrics[tr.METRIC_SHUFFLE_REMOTE_READ_BYTES]
    runtime, notes = _predict(trace, "executors=4")
    assert runtime == pytest.approx(10)
    assert not any("shuffle's blocks" in n for n in notes)


# Round trips between hosts (rtt): a task launched by the driver over the network waits one round trip more per
# launch, and a reduce task one more per 48 MiB it fetched remotely (at least one).
def test_a_longer_round_trip_costs_each_task_its_launch_and_fetch_rounds():
    # 100 MB fetched remotely: 2 rounds of 48 MiB, plus the launch: 3 round trips of 10 ms more, side by side
    runtime, notes = _predict(_shuffle_trace(2, 100 * MB), "rtt=+10ms")
    assert runtime == pytest.approx(10 + 3 * 0.010)
    assert any("round trips between hosts 0.2 -> 10.2 ms: +10 ms for each task's launch" in n for n in notes)
    # stated as OLD:NEW, the difference counts
    assert _predict(_shuffle_trace(2, 100 * MB), "rtt=0.5ms:20.5ms")[0] == pytest.approx(10 + 3 * 0.020)
    # a shorter round trip saves the fetch rounds; the launches' waits between tasks are no part of the traced
    # tasks' time (the replay runs a slot's tasks back to back), so there is none of it to save
    assert _predict(_shuffle_trace(2, 100 * MB), "rtt=1ms:0.5ms")[0] == pytest.approx(10 - 2 * 0.0005)


def test_a_job_in_one_process_has_no_round_trip_between_hosts_to_lengthen():
    trace = _shuffle_trace(1, 0.0)
    trace.environment.executors = [tr.Executor(id="driver", host="h0", cores=1)]
    for t in trace.operations[0].tasks:
        t.executor = "driver"
    runtime, notes = _predict(trace, "rtt=50ms")
    assert runtime == pytest.approx(10)
    assert any("ran in the driver's process" in n for n in notes)


@pytest.mark.parametrize(("given", "problem"), [("rtt=10", "as a duration"), ("rtt=0ms", "between 1us and 10s"),
                                                ("rtt=+11s", "between 1us and 10s"), ("cores=+2", "is for rtt only"),
                                                ("memory=1g:2g", "take OLD:NEW")])
def test_round_trip_values_that_are_refused(given, problem):
    from crystalperf.core.errors import BadInputError

    with pytest.raises(BadInputError, match=problem):
        Changes.parse([given])


def test_round_trip_forms():
    assert Changes.parse(["rtt=+10ms"]).rtt() == pytest.approx((0.0002, 0.0102))
    assert Changes.parse(["rtt=250us"]).rtt() == pytest.approx((0.0002, 0.00025))
    assert Changes.parse(["rtt=1ms:0.01s"]).rtt() == pytest.approx((0.001, 0.01))
    assert Changes.parse(["rtt=+10ms"]).describe() == "rtt=+10ms"
    assert Changes.parse(["cores=2"]).rtt() is None
