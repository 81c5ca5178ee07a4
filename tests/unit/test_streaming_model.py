"""The streaming throughput model: hand-computed limits of a two-chain pipeline (CPU, and the busiest link)."""

from __future__ import annotations

import math
import statistics

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.predict.band import RERUN_SPREAD, with_rerun
from crystalperf.core.predict.base import Changes
from crystalperf.core.predict.streaming import Chain, Link, StreamingCpu


def pipeline(runtime_s: float = 10.0, source: tuple[float, float] = (6.0, 6.0),
             link: Link | None = None) -> StreamingCpu:
    # source chain 6 + 6 CPU-s, sink chain 2 + 2, 18 CPU-s for the whole process on 2 CPUs:
    # traced limit T = max(busiest thread 6, machine 18 / 2 = 9) = 9
    return StreamingCpu([Chain(list(source)), Chain([2.0, 2.0])], process_cpu_s=18.0, cpu_count=2,
                        runtime_s=runtime_s, link=link)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"parallelism": 1}, 12.0),  # one thread does the source's 12 CPU-s: T' = 12 > D = 10
        ({"cpu_share": 0.5}, 18.0),  # machine limit 18 / (2 * 0.5) = 18
        ({"cpu_share": 0.75}, 12.0),  # 18 / 1.5 = 12
        ({"cpu_speed": 2.0}, 5.5),  # T' = 4.5 saves 4.5 s of the limit: 10 - 4.5
        ({"parallelism": 4}, 10.0),  # threads 3 CPU-s each, the machine still needs 9: unchanged
        ({"parallelism": 1, "cpu_share": 0.75}, 12.0),  # max(12, 12)
    ],
)
def test_limits(changes: dict[str, float], expected: float) -> None:
    assert pipeline().predict(Changes(changes)) == pytest.approx(expected)


def test_a_job_paced_by_its_input_keeps_its_runtime_until_a_limit_passes_it() -> None:
    paced = pipeline(runtime_s=30.0)
    assert paced.predict(Changes({"cpu_share": 0.75})) == pytest.approx(30.0)  # T' = 12 < 30
    assert paced.predict(Changes({"cpu_share": 0.25})) == pytest.approx(36.0)  # 18 / 0.5
    assert "paced by its input" in paced.note()


def test_skewed_chain_keeps_its_hot_subtask_but_one_subtask_does_all() -> None:
    skewed = pipeline(source=(8.0, 4.0))  # T = max(8, 9) = 9
    assert skewed.predict(Changes({"parallelism": 1})) == pytest.approx(12.0)  # min(12, 16)
    assert skewed.predict(Changes({"parallelism": 4, "cpu_share": 0.25})) == pytest.approx(36.0)


def test_other_resources_are_left_to_the_resource_models() -> None:
    assert pipeline().predict(Changes({"network": 1e6})) is None  # no link's bytes known
    assert pipeline().predict(Changes({"parallelism": 1, "disk": 1e6})) is None
    assert pipeline(link=Link(40e6, 5e6)).predict(Changes({"network": 1e6, "disk": 1e6})) is None


# The CPU-bound pipeline's busiest link carried 40 MB at 5 MB/s: 8 s, under the CPU's 9 s (T = 9, D = 10).
@pytest.mark.parametrize(
    ("network", "expected"),
    [
        (2.5e6, 16.0),  # 40 MB / 2.5 MB/s = 16 s: the link is the limit now, past D
        (1e6, 40.0),  # 40 s
        (4.5e6, 10.0),  # 8.9 s < D = 10: the slack absorbs it
        (20e6, 10.0),  # a faster link: the CPU still needs 9 s, nothing saved
    ],
)
def test_a_slower_link_becomes_the_limit_of_a_cpu_bound_job(network: float, expected: float) -> None:
    assert pipeline(link=Link(40e6, 5e6)).predict(Changes({"network": network})) == pytest.approx(expected)


def test_time_the_link_carried_nothing_stays_when_it_sets_the_pace() -> None:
    # The same CPU-bound pipeline (T = 9, D = 10), its link busy for 6 of the 10 s: 4 s of deployment and
    # draining that no bandwidth shortens. At 1 MB/s the transfer takes 40 s, and the job 44 s.
    timed = pipeline(link=Link(40e6, 5e6, active_s=6.0))
    assert timed.predict(Changes({"network": 1e6})) == pytest.approx(44.0)
    assert timed.predict(Changes({"network": 4e6})) == pytest.approx(10 + 4)  # 10 s of link, past the CPU's 9
    # where the CPU still sets the pace (8.9 s of link under its 9 s), the link's idle time is in the CPU's limit
    assert timed.predict(Changes({"network": 4.5e6})) == pytest.approx(10.0)
    assert timed.predict(Changes({"network": 20e6})) == pytest.approx(10.0)
    assert timed.predict(Changes({"cpu_share": 0.5})) == pytest.approx(pipeline().predict(Changes({"cpu_share": 0.5})))


def test_a_link_bound_job_gains_what_a_faster_link_saves_until_the_cpu_limits_it() -> None:
    # 150 MB at 5 MB/s: 30 s, the traced runtime; the CPU needs 9 s.
    bound = pipeline(runtime_s=34.0, link=Link(150e6, 5e6))
    # 20 MB/s: 7.5 s of link, the CPU's 9 s the limit: 21 s saved, the 4 s the limits did not set stay
    assert bound.predict(Changes({"network": 20e6})) == pytest.approx(13.0)
    # 10 MB/s: 15 s of link, 15 s saved
    assert bound.predict(Changes({"network": 10e6})) == pytest.approx(19.0)
    assert bound.predict(Changes({"network": 2.5e6})) == pytest.approx(60.0)
    # one subtask for the source (12 CPU-s) and the faster link: 34 - (30 - 12)
    assert bound.predict(Changes({"parallelism": 1, "network": 20e6})) == pytest.approx(16.0)
    # halving the CPU on a link-bound job: the machine needs 18 s, still under the link's 30
    assert bound.predict(Changes({"cpu_share": 0.5})) == pytest.approx(34.0)
    # the note names the link only where the trace shows it held the records back (see the pace tests below)
    assert "bound by its busiest link" in pipeline(runtime_s=34.0, link=Link(150e6, 5e6, declared=True)).note()


def test_a_faster_link_that_hands_the_pace_to_the_cpus_counts_the_link_idle_time_once() -> None:
    # 150 MB at 5 MB/s, the link busy for 30 s of a 34 s run: 4 s in which it carried nothing; the CPUs need 9 s
    # of the whole run's CPU time, those 4 s included.
    bound = pipeline(runtime_s=34.0, link=Link(150e6, 5e6, active_s=30.0))
    # 20 MB/s: 7.5 s of link plus its 4 idle seconds, 11.5 s, above the CPUs' 9 (not 9 + 4)
    assert bound.predict(Changes({"network": 20e6})) == pytest.approx(11.5)
    # 50 MB/s: 3 + 4 = 7 s, under the CPUs' 9
    assert bound.predict(Changes({"network": 50e6})) == pytest.approx(9.0)
    # 10 MB/s: the link still sets the pace, 15 + 4
    assert bound.predict(Changes({"network": 10e6})) == pytest.approx(19.0)
    # without the link's active time, the slack rule: 34 - (30 - 9)
    assert pipeline(runtime_s=34.0, link=Link(150e6, 5e6)).predict(Changes({"network": 50e6})) == pytest.approx(13.0)


def test_a_stated_traced_bandwidth_replaces_the_observed_one() -> None:
    bound = pipeline(runtime_s=30.0, link=Link(150e6, 5e6))
    # the link was 10 MB/s (15 s), now 20 MB/s (7.5 s, under the CPU's 9): 15 - 9 = 6 s saved
    stated = Changes({"network": 20e6}, baselines={"network": 10e6})
    assert bound.predict(stated) == pytest.approx(24.0)


def test_the_predictor_uses_it_for_a_flink_trace_with_cpu_times() -> None:
    from crystalperf.core.predict import Predictor
    from crystalperf.core.profile.dag import build_profile
    from tests.unit.helpers import make_trace, op, task
    from tests.unit.test_io_memory_models import FixedClassifier

    def chain(id: str, parents: list[str], cpu: float) -> tr.Operation:
        tasks = [task(f"{id}#{i}", 0, 10, run_time_s=10, cpu_time_s=cpu) for i in range(2)]
        return op(id, 0, 10, parents, tasks=tasks, parallelism=2)

    trace = make_trace([chain("source", [], 6.0), chain("sink", ["source"], 2.0)], end=10, cpu_count=2)
    trace.application.framework = "flink"
    trace.streaming = tr.Streaming(latency_s=10.0)
    trace.metrics["cpu_utilization"] = 1.8  # 18 CPU-s over the 10 s
    predictor = Predictor(build_profile(trace, FixedClassifier({}), locators=[]))
    prediction = predictor.predict(Changes({"parallelism": 1}))
    assert prediction.crystalperf.runtime_s == pytest.approx(12.0)
    assert any("streaming throughput" in note for note in prediction.notes)
    # the baselines stay what they are: linear scaling and replay without the CPU times
    assert prediction.linear.runtime_s == pytest.approx(20.0)
    assert predictor.predict(Changes({"network": 1e6})).crystalperf.runtime_s > 0


def _counter_rows(source: str, rate: float, seconds: int, counter: str) -> list[tr.IoSample]:
    """Cumulative rows every 0.25 s of one process's namespace moving ``rate`` bytes/s (all on one machine, as
    namespaces are: one host name)."""
    return [tr.IoSample(t=i * 0.25, source=source, host="vm", **{counter: rate * i * 0.25})
            for i in range(seconds * 4 + 1)]


def _cluster_pipeline(source: dict[str, float], window: dict[str, float], utilization: float) -> tr.Trace:
    """A 20 s Flink job on two TaskManagers (2 CPUs): a source chain feeding a window chain, two subtasks each
    with these task metrics; each TaskManager's namespace sent 5 MB/s to the other for the whole run (100 MB on
    the busiest link, seen at 5 MB/s)."""
    from tests.unit.helpers import make_trace, op, task

    sources = [task(f"source#{i}", 0, 20, run_time_s=20, **source) for i in range(2)]
    windows = [task(f"window#{i}", 0, 20, run_time_s=20, **window) for i in range(2)]
    trace = make_trace([op("source", 0, 20, tasks=sources, parallelism=2),
                        op("window", 0, 20, ["source"], tasks=windows, parallelism=2)], end=20, cpu_count=2)
    trace.application.framework = "flink"
    trace.streaming = tr.Streaming(latency_s=20.0)
    trace.metrics["cpu_utilization"] = utilization
    trace.io = (_counter_rows("taskmanager:1", 5e6, 20, "network_tx_bytes")
                + _counter_rows("taskmanager:2", 5e6, 20, "network_tx_bytes"))
    return trace


def test_a_flink_cluster_trace_is_bound_by_its_busiest_taskmanager_link() -> None:
    from crystalperf.core.attribution.classify import FixedClassifier
    from crystalperf.core.predict import Predictor
    from crystalperf.core.profile.dag import build_profile

    # The JobManager's namespace saw both links' traffic pass the bridge (10 MB/s: 200 MB, no link's). Sources 4
    # CPU-s a subtask, windows 3; the processes 16 CPU-s on 2 CPUs: the machine needs 8 s.
    trace = _cluster_pipeline({"cpu_time_s": 4.0}, {"cpu_time_s": 3.0, "idle_time_s": 12.0}, utilization=0.8)
    trace.io += _counter_rows("jobmanager:3", 10e6, 20, "network_tx_bytes")
    predictor = Predictor(build_profile(trace, FixedClassifier({}), locators=[]))
    # the link: 100 MB at 5 MB/s = 20 s, the whole run; at 2.5 MB/s 40 s
    assert predictor.predict(Changes({"network": 2.5e6}), band=False).crystalperf.runtime_s == pytest.approx(40.0)
    # 20 MB/s: 5 s of link, the machine's 8 s the limit
    faster = predictor.predict(Changes({"network": 20e6}), band=False)
    assert faster.crystalperf.runtime_s == pytest.approx(8.0)
    assert any("busiest link" in note for note in faster.notes)
    # the I/O model's sharing of the change over tasks is not what answered it, and is not shown
    assert not any(note.startswith("network: ") for note in faster.notes)


def split(runtime_s: float = 10.0, link: Link | None = None) -> StreamingCpu:
    # the pipeline above with its 18 CPU-s split: 14 of work, 4 of background over the 10 s (0.4 CPU-s a second),
    # which sets no limit: traced limit T = max(busiest thread 6, machine 14 / 2 = 7) = 7
    return StreamingCpu([Chain([6.0, 6.0]), Chain([2.0, 2.0])], process_cpu_s=18.0, cpu_count=2,
                        runtime_s=runtime_s, link=link, work_cpu_s=14.0, background_per_s=0.4)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, 10.0),
        ({"parallelism": 1}, 12.0),  # one thread does the source's 12 CPU-s
        ({"cpu_share": 0.75}, 10.0),  # 14 / 1.5 = 9.33: the 3 s of slack (D - T) absorb it
        ({"cpu_share": 0.5}, 14.0),  # 14 / 1 (all 18 CPU-s as work: 18)
        ({"cpu_share": 0.25}, 28.0),  # 14 / 0.5
        # twice as fast: threads 3 s, machine 14 / 4 = 3.5; T' = 3.5 saves 7 - 3.5 of the runtime
        ({"cpu_speed": 2.0}, 6.5),
    ],
)
def test_only_the_work_sets_the_machine_limit(changes: dict[str, float], expected: float) -> None:
    assert split().predict(Changes(changes)) == pytest.approx(expected)
    assert split().machine() == pytest.approx(7.0) and pipeline().machine() == pytest.approx(9.0)


def test_a_link_bound_run_does_not_count_its_background_as_work_a_faster_link_redoes() -> None:
    # 250 MB at 5 MB/s: 50 s of a 54 s run; the processes used 14.8 CPU-s, 4 of them in task threads (1 CPU-s a
    # subtask) and 10.8 of background (0.2 a second). At 250 MB/s the link needs 1 s:
    chains = [Chain([1.0, 1.0]), Chain([1.0, 1.0])]
    all_work = StreamingCpu(chains, 14.8, 2, 54.0, Link(250e6, 5e6))
    with_split = StreamingCpu(chains, 14.8, 2, 54.0, Link(250e6, 5e6), work_cpu_s=4.0, background_per_s=0.2)
    # all of it work: the machine needs 7.4 s, 54 - (50 - 7.4) = 11.4
    assert all_work.predict(Changes({"network": 250e6})) == pytest.approx(11.4)
    # the split: 4 / 2 = 2 s, 54 - (50 - 2) = 6
    assert with_split.predict(Changes({"network": 250e6})) == pytest.approx(6.0)
    # a slower link: the link sets the pace either way
    assert with_split.predict(Changes({"network": 2.5e6})) == pytest.approx(all_work.predict(Changes({"network": 2.5e6})))
    assert "background" in with_split.note() and "background" not in all_work.note()


def _flink_trace(thread_cpu: list[tr.ThreadCpu | None]) -> tr.Trace:
    from tests.unit.helpers import make_trace, op

    # two TaskManagers, a chain of one subtask on each (6 CPU-s), 18 CPU-s in all processes over the 10 s
    tasks = [tr.Task(id=f"chain#{i}", start=0, end=10, executor=f"tm{i}", metrics={"cpu_time_s": 6.0})
             for i in range(2)]
    trace = make_trace([op("chain", 0, 10, tasks=tasks, parallelism=2)], end=10, cpu_count=2,
                       executors=[tr.Executor(id=f"tm{i}", thread_cpu=cpu) for i, cpu in enumerate(thread_cpu)])
    trace.application.framework = "flink"
    trace.metrics["cpu_utilization"] = 1.8
    return trace


def test_the_split_comes_from_every_taskmanager_of_the_trace() -> None:
    # work: task + network + gc + jit of both TaskManagers, 2 * (5.5 + 0.5 + 0.5 + 0.5) = 14; the rest of the 18
    # (their other, the JobManager's 3) is background: 4 CPU-s over the 10 s
    kinds = tr.ThreadCpu(task=5.5, network=0.5, gc=0.5, jit=0.5, other=0.5)
    model = StreamingCpu.of(_flink_trace([kinds, kinds]), 10.0)
    assert model is not None
    assert (model.work_cpu_s, model.background_per_s) == pytest.approx((14.0, 0.4))
    # T = max(thread 6, machine 14 / 2 = 7) = 7; at half the CPU 14 / 1 (18 as before the split)
    assert model.predict(Changes({"cpu_share": 0.5})) == pytest.approx(14.0)


@pytest.mark.parametrize("thread_cpu", [[None, None], [tr.ThreadCpu(task=6.0, network=1.0), None]])
def test_a_trace_without_the_whole_split_predicts_as_before(thread_cpu: list[tr.ThreadCpu | None]) -> None:
    model = StreamingCpu.of(_flink_trace(thread_cpu), 10.0)
    assert model is not None and model.work_cpu_s is None and model.background_per_s == 0.0
    before = StreamingCpu([Chain([6.0, 6.0])], process_cpu_s=18.0, cpu_count=2, runtime_s=10.0)
    for changes in ({"cpu_share": 0.5}, {"parallelism": 1}, {"cpu_speed": 2.0}, {"cpu_share": 0.3, "cpu_speed": 1.5}):
        assert model.predict(Changes(changes)) == before.predict(Changes(changes))  # exactly
    assert model.predict(Changes({"cpu_share": 0.5})) == pytest.approx(18.0)


def _g1_trace(option: str | None = None, processors: int = 2, family: str = "g1") -> tr.Trace:
    # per TaskManager: task 5, gc 1 (pauses), gc_concurrent 1.5 (refinement): 15 CPU-s of work, 10 s traced
    kinds = tr.ThreadCpu(task=5.0, gc=1.0, gc_concurrent=1.5)
    trace = _flink_trace([kinds, kinds])
    for executor in trace.environment.executors:
        executor.garbage_collector = tr.GarbageCollector(family=family, option=option, processors=processors)
    return trace


@pytest.mark.parametrize(
    ("trace", "share", "expected"),
    [
        # one processor of two: serial, G1's 3 CPU-s of concurrent work are not spent: 12 / 1
        (_g1_trace(), 0.5, 12.0),
        (_g1_trace(), 0.3, 12.0 / 0.6),
        # ceil(2 * 0.75) = 2 processors: G1 stays, 15 / 1.5 = 10
        (_g1_trace(), 0.75, 10.0),
        # chosen on the command line, or not G1, or 4 processors (2 at half): no switch, 15 / (2 * 0.5)
        (_g1_trace(option="-XX:+UseG1GC"), 0.5, 15.0),
        (_g1_trace(family="parallel"), 0.5, 15.0),
        (_g1_trace(processors=4), 0.5, 15.0),
    ],
)
def test_one_processor_takes_the_serial_collector_without_g1s_concurrent_work(
        trace: tr.Trace, share: float, expected: float) -> None:
    model = StreamingCpu.of(trace, 10.0)
    assert model is not None and model.work_cpu_s == pytest.approx(15.0)
    assert model.predict(Changes({"cpu_share": share})) == pytest.approx(expected)
    assert model.predict(Changes({"parallelism": 1})) == pytest.approx(12.0)  # one thread: 12 CPU-s; G1 stays
    note = model.collector_note(Changes({"cpu_share": share}))
    assert (note is not None) == (expected * share * 2 < 15.0 - 1e-9)
    if note:
        assert "serial garbage collector" in note and "3.00 CPU-s" in note


def test_work_beyond_the_processes_time_is_bounded_by_it() -> None:
    kinds = tr.ThreadCpu(task=9.0, network=2.0)
    model = StreamingCpu.of(_flink_trace([kinds, kinds]), 10.0)  # 22 CPU-s of work, 18 measured in all
    assert model is not None and (model.work_cpu_s, model.background_per_s) == (18.0, 0.0)


# -- which limit set the traced pace (the bottleneck verdict of a pipelined job) ----------------------------------

def test_a_declared_link_that_took_the_run_sets_the_pace() -> None:
    # 150 MB at a declared 5 MB/s: 30 s of the 34; the CPU limits 9 s
    pace = pipeline(runtime_s=34.0, link=Link(150e6, 5e6, declared=True)).pace()
    assert (pace.limit, pace.resource) == ("link", "network")
    assert pace.limits == pytest.approx({"link": 30.0, "thread": 6.0, "machine": 9.0})
    assert "30.00 s of the 34.00 s run" in pace.reason()


def test_an_observed_link_sets_the_pace_only_where_its_exchange_stalled() -> None:
    # The same bytes at a rate the job was only seen to reach: a job held back by anything else (its source, a
    # receiver busy elsewhere) reaches its rate too. The link is the limit when the senders were backpressured
    # while the receivers sat idle.
    seen = Link(150e6, 5e6)
    unconfirmed = StreamingCpu([Chain([6.0, 6.0]), Chain([2.0, 2.0])], 18.0, 2, 34.0, seen, stalled_exchange=0.3)
    assert unconfirmed.pace().limit == "input" and unconfirmed.pace().resource is None  # 9 s of CPU in 34 s
    assert "did not wait on each other" in unconfirmed.note()
    stalled = StreamingCpu([Chain([6.0, 6.0]), Chain([2.0, 2.0])], 18.0, 2, 34.0, seen, stalled_exchange=0.9)
    assert stalled.pace().limit == "link" and "bound by its busiest link" in stalled.note()
    # the CPU limits of a job whose unconfirmed link took the run are still judged: 9 s of a 10 s run
    cpu = StreamingCpu([Chain([6.0, 6.0]), Chain([2.0, 2.0])], 18.0, 2, 10.0, Link(48e6, 5e6), stalled_exchange=0.1)
    assert cpu.pace().limit == "machine" and cpu.pace().resource == "cpu"


def test_a_job_whose_limits_took_little_of_the_run_was_paced_by_its_input() -> None:
    pace = pipeline(runtime_s=30.0).pace()
    assert pace.limit == "input" and pace.resource is None and pace.reason() == ""


def _exchange_trace(sender_backpressured: float, receiver_idle: float) -> tr.Trace:
    return _cluster_pipeline({"cpu_time_s": 1.0, "backpressured_time_s": sender_backpressured},
                             {"cpu_time_s": 1.5, "idle_time_s": receiver_idle}, utilization=0.3)


def test_the_stall_of_an_exchange_is_the_smaller_of_its_sides_shares() -> None:
    from crystalperf.core.predict.streaming import stalled_exchange

    assert stalled_exchange(_exchange_trace(18.0, 16.0)) == pytest.approx(0.8)  # min(18/20, 16/20)
    assert stalled_exchange(_exchange_trace(18.0, 2.0)) == pytest.approx(0.1)
    no_times = _exchange_trace(18.0, 2.0)
    for task in no_times.operations[1].tasks:
        del task.metrics[tr.METRIC_IDLE_TIME]
    assert stalled_exchange(no_times) is None


def test_a_link_bound_pipeline_is_named_network_bound_whatever_its_operators_computed() -> None:
    from crystalperf.core.analysis import analyze
    from crystalperf.core.attribution.classify import FixedClassifier

    # Senders backpressured 18 of their 20 s, receivers idle 17: the 100 MB between them took the run. Their own
    # busy time (a few CPU-s) is all the critical path holds, and it is CPU.
    result = analyze(_exchange_trace(18.0, 17.0), classifier=FixedClassifier({}), locators=[], band=False)
    bottleneck = result.report["bottleneck"]
    assert bottleneck["resource"] == "network"
    assert bottleneck["pace"]["limit"] == "link"
    assert bottleneck["pace"]["limits_s"]["link"] == pytest.approx(20.0, rel=0.05)
    assert "busiest network link needed" in bottleneck["sentence"]
    assert any(line.startswith("Add network") for line in result.report["advice"])
    # the same trace without the stall: the link only carried what was sent; the verdict is the operators'
    flowing = analyze(_exchange_trace(1.0, 17.0), classifier=FixedClassifier({}), locators=[], band=False)
    assert flowing.report["bottleneck"]["resource"] != "network"
    assert flowing.report["bottleneck"]["pace"]["limit"] == "input"


def test_a_batch_job_has_no_pace() -> None:
    from crystalperf.core.analysis import analyze
    from crystalperf.core.attribution.classify import FixedClassifier
    from tests.unit.helpers import make_trace, op, task

    trace = make_trace([op("stage", 0, 10, tasks=[task("t", 0, 10, run_time_s=10, cpu_time_s=9.0)])], end=10)
    result = analyze(trace, classifier=FixedClassifier({}), locators=[], band=False)
    assert result.report["bottleneck"]["pace"] is None and result.bottleneck.pace is None


def _placed(trace: tr.Trace, strategy: str = "HASH[k]") -> tr.Trace:
    """Each chain's subtask i on host h<i> in TaskManager tm<i>, the window reading the source by ``strategy``."""
    for op in trace.operations:
        for i, t in enumerate(op.tasks):
            t.host, t.executor = f"h{i}", f"tm{i}"
    trace.operations[1].attributes["ship_strategy"] = f"source: {strategy}"
    return trace


def test_a_round_trip_bounds_a_link_by_the_credits_a_receiver_grants() -> None:
    from crystalperf.core.attribution.classify import FixedClassifier
    from crystalperf.core.predict import Predictor
    from crystalperf.core.predict.streaming import credit_window
    from crystalperf.core.profile.dag import build_profile

    # Each window subtask reads one remote channel: 2 exclusive + 8 floating buffers of 32 KiB per round trip.
    trace = _placed(_cluster_pipeline({"cpu_time_s": 4.0}, {"cpu_time_s": 3.0, "idle_time_s": 12.0}, 0.8))
    assert credit_window(trace) == 10 * 32 * 1024
    predictor = Predictor(build_profile(trace, FixedClassifier({}), locators=[]))
    # +10 ms: 327,680 B per 10.2 ms is 32 MB/s, more than the link's 5 MB/s: nothing changes
    ten = predictor.predict(Changes.parse(["rtt=+10ms"]), band=False)
    assert ten.crystalperf.runtime_s == pytest.approx(20.0)
    assert any("Flink's credits let 320.0 KiB into the busiest receiving host" in n for n in ten.notes)
    assert not any(n.startswith("round trips between hosts 0.2 -> 10.2 ms: +10") for n in ten.notes)
    # +100 ms: 3.27 MB/s, the link's 100 MB take 30.6 s
    slow = predictor.predict(Changes.parse(["rtt=+100ms"]), band=False)
    assert slow.crystalperf.runtime_s == pytest.approx(100e6 / (327_680 / 0.1002))
    # with a faster link as well, the credits are the limit
    both = predictor.predict(Changes.parse(["rtt=+100ms", "network=1gbit"]), band=False)
    assert both.crystalperf.runtime_s == pytest.approx(100e6 / (327_680 / 0.1002))


def test_credits_that_leave_behind_the_receivers_own_records_wait_for_them_where_the_capacity_is_known() -> None:
    from crystalperf.core.attribution.classify import FixedClassifier
    from crystalperf.core.predict import Predictor
    from crystalperf.core.predict.streaming import credits_share_a_queue
    from crystalperf.core.profile.dag import build_profile

    # Both hosts receive (each window subtask reads the other host's source) and both send: each host's credits
    # queue behind up to a window of its own records, 327,680 B / 5 MB/s = 65.5 ms a round trip.
    trace = _placed(_cluster_pipeline({"cpu_time_s": 4.0}, {"cpu_time_s": 3.0, "idle_time_s": 12.0}, 0.8))
    assert credits_share_a_queue(trace)
    predictor = Predictor(build_profile(trace, FixedClassifier({}), locators=[]))
    stated = predictor.predict(Changes.parse(["rtt=+100ms", "network=40mbit:40mbit"]), band=False)
    assert stated.crystalperf.runtime_s == pytest.approx(100e6 / (327_680 / (0.1002 + 327_680 / 5e6)))
    assert any("wait 65.5 ms a round trip behind the records it sends" in n for n in stated.notes)
    # the capacity not stated: only the rate the job reached is known, the wait is left out and said so
    unstated = predictor.predict(Changes.parse(["rtt=+100ms"]), band=False)
    assert unstated.crystalperf.runtime_s == pytest.approx(100e6 / (327_680 / 0.1002))
    assert any("state the link's capacity" in n for n in unstated.notes)
    # one way only (every source on h0, every window on h1): h1's credits have no records of h1's ahead of them
    one_way = _placed(_cluster_pipeline({"cpu_time_s": 4.0}, {"cpu_time_s": 3.0}, 0.8))
    for t in one_way.operations[0].tasks:
        t.host = "h0"
    for t in one_way.operations[1].tasks:
        t.host = "h1"
    assert not credits_share_a_queue(one_way)


def test_records_that_stay_in_their_subtask_or_host_wait_on_no_round_trip() -> None:
    from crystalperf.core.predict.streaming import credit_window

    base = _cluster_pipeline({"cpu_time_s": 4.0}, {"cpu_time_s": 3.0}, 0.8)
    assert credit_window(_placed(base, "FORWARD")) is None
    one_host = _placed(_cluster_pipeline({"cpu_time_s": 4.0}, {"cpu_time_s": 3.0}, 0.8))
    for op in one_host.operations:
        for t in op.tasks:
            t.host = "h0"
    assert credit_window(one_host) is None
    # two gates on one host, each with a remote channel: their windows add up
    four = _placed(_cluster_pipeline({"cpu_time_s": 4.0}, {"cpu_time_s": 3.0}, 0.8))
    window = four.operations[1]
    window.tasks.append(window.tasks[0].model_copy(update={"id": "window#2"}))
    assert credit_window(four) == 10 * 32 * 1024  # h1 still grants one gate's window: the least of the hosts


def test_a_credit_loop_by_mean_value_analysis() -> None:
    from crystalperf.core.predict.streaming import SEGMENT_BYTES, credit_loop_rate, credit_loop_service

    # Two buffers, a delay of 3 s and a server of 1 s a buffer. One buffer: it goes round in 4 s (0.25 a second)
    # and sits at the server a quarter of the time. Two: the second finds the first there a quarter of the time,
    # so a visit takes 1.25 s, the round 4.25 s, and 2 / 4.25 buffers go round a second.
    window = 2 * SEGMENT_BYTES
    assert credit_loop_rate(window, 3.0, 1.0) == pytest.approx(2 / 4.25 * SEGMENT_BYTES)
    # below both bounds: the delay's 2 / (3 + 1) and the server's 1 a second
    assert credit_loop_rate(window, 3.0, 1.0) < min(2 / 4.0, 1.0) * SEGMENT_BYTES
    # no server time: the window per delay; and back from a rate to the server's time
    assert credit_loop_rate(window, 3.0, 0.0) == pytest.approx(window / 3.0)
    assert credit_loop_service(window, 3.0, 2 / 4.25 * SEGMENT_BYTES) == pytest.approx(1.0, rel=1e-6)
    assert credit_loop_service(window, 3.0, window / 3.0) == 0.0


def test_senders_that_waited_for_credit_queue_their_buffers_at_the_path_under_a_longer_round_trip() -> None:
    from crystalperf.core.attribution.classify import FixedClassifier
    from crystalperf.core.predict import Predictor
    from crystalperf.core.predict.streaming import credit_loop_rate, credit_loop_service, credit_waits
    from crystalperf.core.profile.dag import build_profile

    # The sources were backpressured 16 of their 20 s: the credit loop set the link's 5 MB/s. At the traced 0.2 ms
    # the round trip explains none of it (10 buffers per 0.2 ms is 1.6 GB/s): the path took ~6.5 ms a buffer.
    waited = _placed(_cluster_pipeline({"cpu_time_s": 4.0, "backpressured_time_s": 16.0},
                                       {"cpu_time_s": 3.0, "idle_time_s": 12.0}, 0.8))
    assert credit_waits(waited) == pytest.approx(0.8)
    service = credit_loop_service(327_680, 0.0002, 5e6)
    assert service == pytest.approx(32_768 / 5e6, rel=0.01)
    predictor = Predictor(build_profile(waited, FixedClassifier({}), locators=[]))
    slow = predictor.predict(Changes.parse(["rtt=+100ms"]), band=False)
    looped = 100e6 / credit_loop_rate(327_680, 0.1002, service)
    assert slow.crystalperf.runtime_s == pytest.approx(looped)
    # slower than the round trip's bound alone (30.6 s), which the same trace without the waits predicts
    assert looped > 100e6 / (327_680 / 0.1002) + 1.0
    assert any("its senders waited for credit 80 % of their time" in n for n in slow.notes)
    unwaited = _placed(_cluster_pipeline({"cpu_time_s": 4.0, "backpressured_time_s": 4.0},
                                         {"cpu_time_s": 3.0, "idle_time_s": 12.0}, 0.8))
    bound = Predictor(build_profile(unwaited, FixedClassifier({}), locators=[]))
    assert bound.predict(Changes.parse(["rtt=+100ms"]), band=False).crystalperf.runtime_s == pytest.approx(
        100e6 / (327_680 / 0.1002))


def test_a_large_credit_loop_is_approximated_within_a_per_cent_of_the_exact_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from crystalperf.core.predict import streaming
    from crystalperf.core.predict.streaming import SEGMENT_BYTES, credit_loop_rate

    # a host granting 2,000 buffers (hundreds of remote channels): near the knee, and at both ends
    window = 2_000 * SEGMENT_BYTES
    for delay, service in ((0.02, 1e-5), (0.01, 5e-6), (0.001, 1e-3)):
        approximated = credit_loop_rate(window, delay, service)
        monkeypatch.setattr(streaming, "EXACT_LOOP_BUFFERS", 10_000)
        exact = credit_loop_rate(window, delay, service)
        monkeypatch.setattr(streaming, "EXACT_LOOP_BUFFERS", 1024)
        assert approximated == pytest.approx(exact, rel=0.01)
        assert approximated <= min(window / (delay + service), SEGMENT_BYTES / service) * 1.0001


def _one_chain_scan(threads_cpu_s: float | None, reader_cpu_s: float | None, utilization: float) -> tr.Trace:
    """A 10 s Flink job of one chain (a file source, a filter and a sink chained) at parallelism 2 on 2 CPUs, each
    subtask's CPU time 9 s; ``threads_cpu_s`` / ``reader_cpu_s``: each subtask's threads' CPU time and its fetchers'
    part of it (None: not recorded)."""
    from tests.unit.helpers import make_trace, op, task

    metrics: dict[str, float] = {"run_time_s": 10.0, "cpu_time_s": 9.0}
    if threads_cpu_s is not None and reader_cpu_s is not None:
        metrics |= {tr.METRIC_THREADS_CPU_TIME: threads_cpu_s, tr.METRIC_READER_CPU_TIME: reader_cpu_s}
    tasks = [task(f"scan#{i}", 0, 10, **metrics) for i in range(2)]
    trace = make_trace([op("scan", 0, 10, tasks=tasks, parallelism=2)], end=10, cpu_count=2)
    trace.application.framework = "flink"
    trace.streaming = tr.Streaming(latency_s=10.0)
    trace.metrics["cpu_utilization"] = utilization
    return trace


def test_a_subtask_whose_fetcher_ran_beside_its_task_thread_is_limited_by_the_busier_of_the_two() -> None:
    from crystalperf.core.predict import Predictor
    from crystalperf.core.profile.dag import build_profile
    from tests.unit.test_io_memory_models import FixedClassifier

    # Each subtask: 9 CPU-s on its threads, 5 of them in its fetcher, 4 on its task thread; the process used
    # 19.6 CPU-s in 10 s. At parallelism 1 the one subtask's fetcher reads 10 CPU-s and its task thread parses
    # 8, side by side: the busiest thread 10 s, the machine 19.6 / 2 = 9.8 s: 10 s, the traced runtime.
    side_by_side = Predictor(build_profile(_one_chain_scan(9.0, 5.0, 1.96), FixedClassifier({}), locators=[]))
    one = side_by_side.predict(Changes({"parallelism": 1}), band=False)
    assert one.crystalperf.runtime_s == pytest.approx(10.0)
    assert any("busiest subtask thread 5.00 CPU-s" in note for note in one.notes)
    # the 0.2 s of the run beyond its machine limit (9.8 s) may stay or go: the model's band spans 10 to 10.2 s,
    # and a rerun's spread widens it: 1.28 spreads below, and in quadrature with the model's 2 % above
    banded = side_by_side.predict(Changes({"parallelism": 1})).crystalperf
    rerun = statistics.NormalDist().inv_cdf(0.9) * RERUN_SPREAD
    assert banded.model_high_s == pytest.approx(10.2)
    assert banded.low_s == pytest.approx(10.0 * math.exp(-rerun))
    assert banded.high_s == pytest.approx(10.0 * math.exp(math.hypot(math.log(1.02), rerun)))
    # Without the split each subtask's 9 CPU-s are one thread's: 18 s at parallelism 1.
    one_thread = Predictor(build_profile(_one_chain_scan(None, None, 1.96), FixedClassifier({}), locators=[]))
    one_thread_cpu = one_thread.predict(Changes({"parallelism": 1}), band=False).crystalperf.runtime_s
    assert one_thread_cpu == pytest.approx(18.0)


def test_a_subtask_whose_threads_used_more_than_its_run_is_bounded_by_it() -> None:
    from crystalperf.core.predict.streaming import busiest_thread
    from tests.unit.helpers import task

    # threads 16 CPU-s in a 10 s run (capped to 10 as cpu_time_s): the fetcher 11 of them is more than the run
    capped = task("scan#0", 0, 10, run_time_s=10, cpu_time_s=10, threads_cpu_time_s=16.0, reader_cpu_time_s=11.0)
    assert busiest_thread(capped) == pytest.approx(10.0)
    assert busiest_thread(task("t", 0, 10, run_time_s=10, cpu_time_s=4.0)) == pytest.approx(4.0)
    assert busiest_thread(task("t", 0, 10, run_time_s=10)) is None


def test_a_one_chain_batch_job_of_waves_is_left_to_the_replay() -> None:
    from crystalperf.core.predict.streaming import long_running
    from crystalperf.core.profile.dag import build_profile
    from tests.unit.test_io_memory_models import FixedClassifier

    trace = _one_chain_scan(9.0, 5.0, 1.96)
    assert long_running(build_profile(trace, FixedClassifier({}), locators=[]))
    trace.operations[0].parallelism = 4  # two of its four subtasks recorded: not the whole chain side by side
    assert not long_running(build_profile(trace, FixedClassifier({}), locators=[]))
    trace.operations[0].parallelism = 2
    trace.streaming = None  # no hook that ran long-lived subtasks (a Spark stage)
    assert not long_running(build_profile(trace, FixedClassifier({}), locators=[]))


def test_the_band_spans_the_seconds_beyond_the_cpu_limit_kept_and_gone() -> None:
    # T = 9 of D = 10: 1 s the limits did not set. One thread does the source's 12 CPU-s: the point fills that
    # second with the extra work (12 s); the band spans the new limit alone to the new limit with the second.
    assert pipeline().band(Changes({"parallelism": 1})) == pytest.approx((12.0, 13.0))
    assert pipeline().band(Changes({"cpu_speed": 2.0})) == pytest.approx((4.5, 5.5))
    # a job paced by its input keeps its runtime: nothing to span; nor for changes the model does not answer
    assert pipeline(runtime_s=30.0).band(Changes({"parallelism": 1})) is None
    assert pipeline().band(Changes({"parallelism": 1, "disk": 1e6})) is None


def test_a_rerun_s_spread_widens_every_band_in_quadrature_with_the_model_s() -> None:
    from crystalperf.core.predict import Predictor
    from crystalperf.core.profile.dag import build_profile
    from tests.unit.test_io_memory_models import FixedClassifier

    rerun = statistics.NormalDist().inv_cdf(0.9) * RERUN_SPREAD
    assert rerun == pytest.approx(0.0513, abs=1e-4)
    # a band of 5 % below and none above: 5 % and 5.13 % in quadrature below, the rerun's alone above
    low, high = with_rerun(10.0, 10.0 / math.exp(0.05), 10.0)
    assert low == pytest.approx(10.0 * math.exp(-math.hypot(0.05, rerun)))
    assert high == pytest.approx(10.0 * math.exp(rerun))
    # no change on a streaming job (no task to redraw): the model's band spans the 0.2 s beyond the machine limit
    # (9.8 s) gone, and a rerun's spread widens it
    predictor = Predictor(build_profile(_one_chain_scan(9.0, 5.0, 1.96), FixedClassifier({}), locators=[]))
    same = predictor.predict(Changes({"cpu_speed": 1.0})).crystalperf
    assert same.runtime_s == pytest.approx(10.0)
    assert (same.model_low_s, same.model_high_s) == (pytest.approx(9.8), pytest.approx(10.0))
    assert same.low_s == pytest.approx(10.0 * math.exp(-math.hypot(math.log(10.0 / 9.8), rerun)))
    assert same.high_s == pytest.approx(10.0 * math.exp(rerun))


def test_the_kernels_first_touches_grow_with_the_subtasks_side_by_side_in_each_process() -> None:
    from crystalperf.core.predict.jvm import first_touch

    # per TaskManager: task 6 and jit 1, of which 1.5 CPU-s in the kernel on 300,000 page faults: 14 CPU-s of work
    kinds = tr.ThreadCpu(task=6.0, jit=1.0, kernel=1.5, minor_faults=300_000)
    trace = _flink_trace([kinds, kinds])
    touch = first_touch(trace)
    assert touch is not None and (touch.kernel_s, touch.faults, touch.process_cpu_s) == (3.0, 600_000, 14.0)
    assert touch.extra_s(2.0) == 3.0 and touch.extra_s(0.5) == -1.5 and touch.note(1.0) is None
    assert touch.note(2.0) == ("page faults: the task processes spent 3.00 CPU-s in the kernel over the job (600,000 "
                               "page faults memory served: a JVM first touching its heap); 2 times the subtasks side "
                               "by side in each take 6.00 CPU-s there")
    model = StreamingCpu.of(trace, 10.0)
    assert model is not None and model.first_touch == touch
    # parallelism 4 on the same two TaskManagers: two subtasks side by side in each, the kernel's 3 CPU-s twice:
    # the machine limit (14 + 3) / 2
    assert model.machine(parallelism=4) == pytest.approx(8.5)
    # parallelism 1: half the subtasks in each, half the kernel's: (14 - 1.5) / 2
    assert model.machine(parallelism=1) == pytest.approx(6.25)
    assert model.machine() == pytest.approx(7.0)  # as traced
    # a trace without the kernel's time keeps the work: 14 / 2
    plain = StreamingCpu.of(_flink_trace([tr.ThreadCpu(task=6.0, jit=1.0)] * 2), 10.0)
    assert plain is not None and plain.first_touch is None and plain.machine(parallelism=4) == pytest.approx(7.0)
