"""Evidence-first attribution: thread states and plumbing frames make waiting its own category, and what the
framework measured bounds what the classifiers infer. Answers computed by hand in the comments."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import FixedClassifier, FunctionSource
from crystalperf.core.attribution.measurement import Measurement, bounded_vector, measure
from crystalperf.core.attribution.waiting import is_off_cpu, is_plumbing, sample_vector, waits_on_consumer
from crystalperf.core.profile.bottleneck import describe_waiting, find_bottleneck
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.resources import ResourceVector

from .helpers import make_trace, op, task

CLASSIFIER = FixedClassifier({
    "org.apache.spark.storage.ShuffleBlockFetcherIterator": ResourceVector.of(0.2, 0.0, 0.8),
    "app.Hash": ResourceVector.of(1.0),
    "java.util.concurrent": ResourceVector.of(0.0, 0.6, 0.4),  # what a keyword model might say of a lock
    "java.lang.Thread": ResourceVector.of(0.0, 0.65, 0.35),
})


class EveryFrame:
    """Every Java frame has source (so only the attribution rules decide which one is the function)."""

    name = "test"

    def locate(self, frame: tr.Frame, context: object) -> FunctionSource | None:
        return FunctionSource(frame.name, "java", f"void {frame.name}() {{}}")


@pytest.mark.parametrize("name", [
    "java.lang.Object.wait", "java.lang.Thread.sleep", "java.lang.Thread.run", "jdk.internal.misc.Unsafe.park",
    "java.util.concurrent.locks.LockSupport.parkNanos",
    "java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject.await",
    "java.util.concurrent.LinkedBlockingQueue.take", "java.util.concurrent.ThreadPoolExecutor.runWorker",
    "java.util.concurrent.ThreadPoolExecutor$Worker.run", "java.util.concurrent.FutureTask.run",
    "org.apache.flink.streaming.runtime.tasks.mailbox.TaskMailboxImpl.take",
    "org.apache.flink.streaming.runtime.tasks.mailbox.MailboxProcessor.runMailboxLoop",
    "org.apache.flink.shaded.netty4.io.netty.channel.epoll.Native.epollWait",
    "io.netty.channel.nio.NioEventLoop.run", "sun.nio.ch.EPoll.wait",
    "threading.Condition.wait", "threading.Thread.run", "queue.Queue.get", "selectors.EpollSelector.select",
    "concurrent.futures.thread._worker",
    "org.apache.flink.shaded.guava33.com.google.common.util.concurrent.AbstractFutureState.blockingGet",
    "org.apache.flink.streaming.runtime.tasks.StreamTask$ResumeWrapper.run",
    # Spark 4 moved ThreadUtils.awaitResult to common-utils: a parquet footer-reading task waits there
    "org.apache.spark.util.SparkThreadUtils$.awaitResultNoSparkExceptionConversion",
    "org.apache.spark.util.ThreadUtils$.awaitResult",
    # Scala closures written inside a plumbing method (seen on the stacks of a real standalone-cluster job)
    "org.apache.spark.executor.Executor$TaskRunner.$anonfun$run$4",
    "org.apache.spark.executor.Executor$TaskRunner.$anonfun$run$4$adapted",
    # top functions of real reports (a Spark Connect job's stage; a PyFlink DataStream job's Python chains)
    "org.apache.spark.util.KeyLock.acquireLock",
    "org.apache.beam.vendor.guava.v32_1_2_jre.com.google.common.cache.LocalCache$LoadingValueReference.waitForValue",
    "apache_beam.runners.worker.sdk_worker._Future.wait", "apache_beam.runners.worker.sdk_worker._Future.get",
    "apache_beam.runners.worker.sdk_worker._DeferredCall.get.<locals>.<genexpr>",
    "org.apache.beam.vendor.guava.v32_1_2_jre.com.google.common.cache.LocalCache$Segment.waitForLoadingValue",
    # top functions of a real report (a Flink SQL job's start: a compile waiting on the code cache's future and
    # lock, the task's restore starting a pool thread)
    "org.apache.flink.shaded.guava33.com.google.common.util.concurrent.Platform.get",
    "org.apache.flink.util.MdcAwareExecutor.execute",
    "org.apache.flink.shaded.guava33.com.google.common.cache.LocalCache$Segment.lockedGetOrLoad",
    "org.apache.flink.shaded.guava33.com.google.common.cache.LocalCache$Segment.get",
    "org.apache.flink.shaded.guava33.com.google.common.cache.LocalCache$LocalManualCache.get",
])
def test_synchronisation_and_scheduling_frames_are_plumbing(name: str) -> None:
    assert is_plumbing(name)


@pytest.mark.parametrize("name", [
    "org.apache.spark.sql.execution.BufferedRowIterator.hasNext", "java.io.FileInputStream.readBytes",
    "java.util.concurrent.ConcurrentHashMap.get", "java.lang.String.hashCode", "java.lang.ThreadLocal.get",
    "org.apache.spark.storage.ShuffleBlockFetcherIterator.next", "pyspark.worker.process", "hashlib.sha256",
    "org.apache.flink.streaming.runtime.io.StreamOneInputProcessor.processInput",
    "org.apache.spark.rdd.RDD.$anonfun$collect$2",
    # a cache's own bookkeeping is work: only its lookups wrap a loader or a wait
    "org.apache.flink.shaded.guava33.com.google.common.cache.LocalCache$Segment.expand",
    "org.apache.flink.shaded.guava33.com.google.common.cache.LocalCache.getAll",
])
def test_work_is_not_plumbing(name: str) -> None:
    assert not is_plumbing(name)


def test_an_off_cpu_thread_turns_its_functions_cpu_share_into_waiting() -> None:
    fetch = ResourceVector.of(0.2, 0.0, 0.8)
    assert sample_vector(fetch, off_cpu=True) == pytest.approx((0.0, 0.0, 0.8, 0.2))
    assert sample_vector(fetch, off_cpu=False) == pytest.approx((0.2, 0.0, 0.8, 0.0))
    assert sample_vector(None, off_cpu=True) == pytest.approx((0.0, 0.0, 0.0, 1.0))


def test_a_runnable_thread_in_epoll_wait_is_off_cpu() -> None:
    frames = [tr.Frame(name="[native] epoll_wait", language="native"),
              tr.Frame(name="sun.nio.ch.EPoll.wait", language="java"), tr.Frame(name="app.Main.run", language="java")]
    assert is_off_cpu(tr.THREAD_RUNNABLE, frames, [0, 1, 2])
    assert not is_off_cpu(tr.THREAD_RUNNABLE, frames, [2])
    assert is_off_cpu(tr.THREAD_TIMED_WAITING, frames, [2])


FRAMES = [
    tr.Frame(name="jdk.internal.misc.Unsafe.park", language="java"),  # 0
    tr.Frame(name="java.util.concurrent.locks.LockSupport.park", language="java"),  # 1
    tr.Frame(name="java.util.concurrent.LinkedBlockingQueue.take", language="java"),  # 2
    tr.Frame(name="org.apache.spark.storage.ShuffleBlockFetcherIterator.next", language="java"),  # 3
    tr.Frame(name="java.util.concurrent.ThreadPoolExecutor.runWorker", language="java"),  # 4
    tr.Frame(name="java.lang.Thread.run", language="java"),  # 5
    tr.Frame(name="app.Hash.compute", language="java"),  # 6
    tr.Frame(name="java.util.concurrent.ThreadPoolExecutor.getTask", language="java"),  # 7
]


def _samples(stacks: list[list[int]], states: list[str], rows: list[tuple[int, int]]) -> tr.StackSamples:
    """rows: (stack, count), all for operation "a" in bucket 0."""
    return tr.StackSamples(
        origin=0, frames=FRAMES, stacks=stacks, states=states, keys=[tr.SampleKey(operation="a")],
        key=[0] * len(rows), bucket=[0] * len(rows), stack=[r[0] for r in rows], count=[r[1] for r in rows])


def test_waiting_stacks_skip_plumbing_to_what_they_wait_for() -> None:
    samples = _samples(
        stacks=[
            [0, 1, 2, 3, 4, 5],  # parked in a queue take under a shuffle fetch: waits on the network
            [6, 4, 5],  # hashing: CPU
            [0, 1, 2, 7, 4, 5],  # an idle pool thread waiting for work: no time of the operation's
        ],
        states=[tr.THREAD_WAITING, tr.THREAD_RUNNABLE, tr.THREAD_WAITING],
        rows=[(0, 5), (1, 3), (2, 2)],
    )
    trace = make_trace([op("a", 0, 10)], samples=samples)
    profile = build_profile(trace, CLASSIFIER, locators=[EveryFrame()])
    a = profile.top.nodes["a"].vector
    # fetch: 5 x (0, 0, 0.8, 0.2); hash: 3 x (1, 0, 0, 0); the idle pool thread's 2 left out: over 8 samples
    assert tuple(a.vector) == pytest.approx((0.375, 0.0, 0.5, 0.125))
    names = [f.function.qualified_name for f in a.functions]
    assert names == ["org.apache.spark.storage.ShuffleBlockFetcherIterator.next", "app.Hash.compute"]
    assert not any(is_plumbing(n) for n in names)
    # where they waited: the queue under the fetch
    assert a.waiting_in == {"LinkedBlockingQueue.take": 5}

    # The paper's method takes the first located frame: the park, which the classifier calls disk/network.
    paper = build_profile(trace, CLASSIFIER, locators=[EveryFrame()], attribution="paper")
    assert paper.top.nodes["a"].vector.functions[0].function.qualified_name == "jdk.internal.misc.Unsafe.park"
    assert paper.top.nodes["a"].vector.vector.waiting == 0.0


def test_an_operation_of_idle_pool_threads_alone_still_waits() -> None:
    """With no other sample, a pool thread waiting for work is what the operation did: it waited."""
    samples = _samples(stacks=[[0, 1, 2, 7, 4, 5]], states=[tr.THREAD_WAITING], rows=[(0, 4)])
    profile = build_profile(make_trace([op("a", 0, 10)], samples=samples), CLASSIFIER, locators=[EveryFrame()])
    assert tuple(profile.top.nodes["a"].vector.vector) == pytest.approx((0.0, 0.0, 0.0, 1.0))


def test_a_producer_blocked_on_a_full_queue_waits_on_its_consumer() -> None:
    """A split fetcher parked putting into its full hand-off queue waits on its task thread, whatever its own code
    does otherwise: no disk or network however its frames are classified, and none of the operation's time where
    the consumer was sampled."""
    frames = [*FRAMES,
              tr.Frame(name="org.apache.flink.connector.base.source.reader.synchronization."
                            "FutureCompletingBlockingQueue.waitOnPut", language="java"),  # 8
              tr.Frame(name="org.apache.flink.connector.base.source.reader.fetcher.FetchTask.run",
                       language="java"),  # 9
              tr.Frame(name="java.util.concurrent.ArrayBlockingQueue.put", language="java")]  # 10
    assert waits_on_consumer(frames, [0, 1, 8, 9, 4, 5])
    assert waits_on_consumer(frames, [0, 1, 10, 3])
    assert not waits_on_consumer(frames, [0, 1, 2, 3, 4, 5])  # a take waits on its producer: what it fetches
    samples = tr.StackSamples(
        origin=0, frames=frames, stacks=[[0, 1, 8, 9, 4, 5], [6, 4, 5]],
        states=[tr.THREAD_WAITING, tr.THREAD_RUNNABLE], keys=[tr.SampleKey(operation="a", thread="fetcher"),
                                                            tr.SampleKey(operation="a")],
        key=[0, 1], bucket=[0, 0], stack=[0, 1], count=[6, 2])
    a = build_profile(make_trace([op("a", 0, 10)], samples=samples), CLASSIFIER, locators=[EveryFrame()])
    assert tuple(a.top.nodes["a"].vector.vector) == pytest.approx((1.0, 0.0, 0.0, 0.0))
    alone = tr.StackSamples(origin=0, frames=frames, stacks=[[0, 1, 8, 9, 4, 5]], states=[tr.THREAD_WAITING],
                            keys=[tr.SampleKey(operation="a", thread="fetcher")], key=[0], bucket=[0], stack=[0],
                            count=[3])
    b = build_profile(make_trace([op("a", 0, 10)], samples=alone), CLASSIFIER, locators=[EveryFrame()])
    assert tuple(b.top.nodes["a"].vector.vector) == pytest.approx((0.0, 0.0, 0.0, 1.0))


def test_traces_without_states_still_see_wait_primitives() -> None:
    samples = _samples(stacks=[[0, 1, 2, 3, 4, 5], [6, 4, 5]], states=[], rows=[(0, 1), (1, 1)])
    trace = make_trace([op("a", 0, 10)], samples=samples)
    a = build_profile(trace, CLASSIFIER, locators=[EveryFrame()]).top.nodes["a"].vector
    # The park on top says the thread was not running: (0, 0, .8, .2) and (1, 0, 0, 0), halved.
    assert tuple(a.vector) == pytest.approx((0.5, 0.0, 0.4, 0.1))


def test_an_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError, match="thread state"):
        _samples(stacks=[[6]], states=["sleepy"], rows=[(0, 1)])


def test_measured_cpu_time_bounds_the_sampled_split() -> None:
    # Two tasks of 10 s run, 1 s CPU each (Spark's executorCpuTime): 18 of 20 s were not on CPU. The samples
    # say (0.5 cpu, 0.5 disk). Open-time weights: CPU 0.5 - 0.1 = 0.4, disk 0.5: 18 s split 8 s : 10 s, but
    # CPU may claim no more than the 2 s measured (waiting for a core at most doubles CPU time); its other 6 s
    # go to disk, the only other category sampled. With the measured 2 s: (4, 16) / 20.
    tasks = [task("t1", 0, 10, run_time_s=10, cpu_time_s=1), task("t2", 0, 10, run_time_s=10, cpu_time_s=1)]
    measurement = measure((t.duration, t.metrics) for t in tasks)
    assert measurement is not None and measurement.cpu_measured
    assert measurement.fractions() == pytest.approx({"cpu": 0.1})
    assert bounded_vector(measurement, ResourceVector.of(0.5, 0.5)) == pytest.approx((0.2, 0.8, 0.0, 0.0))
    # Samples that see only CPU claim at most the measured 2 s more; the bytes say where the other 16 s went.
    with_input = measure([(10.0, {**t.metrics, tr.METRIC_INPUT_BYTES: 1e9}) for t in tasks])
    assert with_input is not None
    assert bounded_vector(with_input, ResourceVector.of(1.0)) == pytest.approx((0.2, 0.8, 0.0, 0.0))
    # ... and with no bytes moved nothing says it was not CPU after all (the paper's reading).
    assert bounded_vector(measurement, ResourceVector.of(1.0)) == pytest.approx((1.0, 0.0, 0.0, 0.0))


def test_measured_idle_time_is_waiting_and_is_not_counted_twice() -> None:
    # A subtask ran 10 s: 6 s idle (Flink's idleTimeMsPerSecond). Its samples: 50 % CPU, 10 % disk, 40 %
    # waiting (the idle seconds' samples). Measured waiting 0.6 already covers the sampled 0.4, so the open 4 s
    # go to CPU and disk as 0.5 : 0.1 -> cpu 3.33 s, disk 0.67 s.
    measurement = measure([(10.0, {tr.METRIC_RUN_TIME: 10.0, tr.METRIC_IDLE_TIME: 6.0})])
    assert measurement is not None and not measurement.cpu_measured
    vector = bounded_vector(measurement, ResourceVector.of(0.5, 0.1, 0.0, 0.4))
    assert vector == pytest.approx((1 / 3, 1 / 15, 0.0, 0.6))


def test_with_nothing_sampled_the_open_time_follows_the_bytes() -> None:
    m = Measurement(run=10.0)
    m.seconds["cpu"] = 2.0
    m.cpu_measured = True
    m.disk_bytes, m.network_bytes = 300.0, 100.0
    assert bounded_vector(m, None) == pytest.approx((0.2, 0.6, 0.2, 0.0))


def test_a_throttled_source_makes_the_job_input_bound_and_names_the_source() -> None:
    # Source waits for its rate limiter (measured idle 9 of 10 s), the sink downstream waits for the source.
    source = op("src", 0, 10, kind="operator",
                tasks=[task("s0", 0, 10, run_time_s=10, idle_time_s=9, cpu_time_s=1)])
    sink = op("sink", 0, 10, parents=["src"], kind="operator",
              tasks=[task("k0", 0, 10, run_time_s=10, idle_time_s=9.5, cpu_time_s=0.5)])
    sink.name = "Sink: blackhole"
    source.name = "Source: src[1]"
    trace = make_trace([source, sink])
    result = analyze(trace, classifier=CLASSIFIER, locators=[], scenarios=[])
    bottleneck = result.report["bottleneck"]
    assert bottleneck["resource"] == "waiting"
    assert bottleneck["busiest_resource"] == "cpu"
    assert "input-bound" in bottleneck["sentence"]
    assert "waiting on Source: src[1]" in bottleneck["sentence"] or "waiting for its input" in bottleneck["sentence"]
    sink_entry = next(o for o in result.report["operations"] if o["id"] == "sink")
    assert sink_entry["vector"]["waiting"] == pytest.approx(0.95)
    assert sink_entry["measured_share"] == pytest.approx(1.0)
    assert result.report["sources"]["measured_fraction"] == pytest.approx(1.0)


def test_backpressure_names_what_is_downstream() -> None:
    source = op("src", 0, 10, tasks=[task("s0", 0, 10, run_time_s=10, backpressured_time_s=8, cpu_time_s=2)])
    slow = op("slow", 0, 10, parents=["src"], tasks=[task("w0", 0, 10, run_time_s=10, cpu_time_s=1, idle_time_s=0)])
    source.name, slow.name = "Source: fast", "Map: slow"
    # The slow operator is busy all the time (1 s measured CPU, the rest unexplained and no bytes: CPU by the
    # paper's reading): it is the bottleneck, and the source's 8 s of backpressure point at it.
    profile = build_profile(make_trace([source, slow]), CLASSIFIER, locators=[])
    bottleneck = find_bottleneck(profile)
    assert bottleneck.resource == "cpu"
    assert describe_waiting(profile, profile.top.nodes["src"]) == ("backpressured by Map: slow", True)
    assert tuple(profile.top.nodes["src"].vector.vector) == pytest.approx((0.2, 0.0, 0.0, 0.8))


def test_the_paper_method_ignores_measurement() -> None:
    trace = make_trace([op("a", 0, 10, tasks=[task("t", 0, 10, run_time_s=10, cpu_time_s=1, idle_time_s=8)])])
    paper = analyze(trace, classifier=CLASSIFIER, locators=[], scenarios=[], attribution="paper").report
    evidence = analyze(trace, classifier=CLASSIFIER, locators=[], scenarios=[]).report
    assert paper["sources"]["attribution"] == "paper"
    assert evidence["operations"][0]["vector"]["waiting"] == pytest.approx(0.8)
    assert paper["operations"][0]["vector"]["waiting"] == 0.0


def test_waiting_is_fixed_under_resource_changes() -> None:
    from crystalperf.core.predict import Changes, Predictor

    trace = make_trace([op("a", 0, 10, tasks=[task("t", 0, 10, run_time_s=10, cpu_time_s=2, idle_time_s=8)])],
                       total_slots=1)
    profile = build_profile(trace, CLASSIFIER, locators=[])
    predicted = Predictor(profile).predict(Changes({"cpu_speed": 2.0}), band=False)
    # 2 s of CPU become 1 s; the 8 s of waiting stay.
    assert predicted.crystalperf.runtime_s == pytest.approx(9.0, abs=0.05)


def test_a_task_reading_back_its_python_worker_counts_the_workers_samples_only() -> None:
    frames = [
        tr.Frame(name="java.net.SocketInputStream.socketRead0", language="java"),  # 0
        tr.Frame(name="java.io.DataInputStream.readInt", language="java"),  # 1
        tr.Frame(name="org.apache.spark.sql.execution.python.PythonUDFRunner$$anon$2.read", language="java"),  # 2
        tr.Frame(name="org.apache.spark.executor.Executor$TaskRunner.run", language="java"),  # 3
        tr.Frame(name="app.Hash.compute", language="python"),  # 4
    ]
    samples = tr.StackSamples(
        origin=0, frames=frames, stacks=[[0, 1, 2, 3], [4]], states=[tr.THREAD_RUNNABLE, tr.THREAD_RUNNABLE],
        keys=[tr.SampleKey(operation="a", task="1"), tr.SampleKey(operation="a", task="1", thread="python-worker"),
              tr.SampleKey(operation="b", task="2")],
        key=[0, 1, 2], bucket=[0, 0, 0], stack=[0, 1, 0], count=[10, 8, 4])
    trace = make_trace([op("a", 0, 10), op("b", 0, 10)], samples=samples)
    profile = build_profile(trace, CLASSIFIER, locators=[EveryFrame()])
    # a: the JVM thread's 10 reads are the worker's 8 CPU samples seen from the other side: only those count.
    assert tuple(profile.top.nodes["a"].vector.vector) == pytest.approx((1.0, 0.0, 0.0, 0.0))
    assert profile.top.nodes["a"].vector.samples == 8
    # b: no worker was sampled; the reads are waiting (on the worker), not network.
    assert tuple(profile.top.nodes["b"].vector.vector) == pytest.approx((0.0, 0.0, 0.0, 1.0))


def test_run_queue_delay_is_cpu_demand() -> None:
    # 10 s run: 2 s on CPU, 6 s runnable waiting for a core (schedstat): 8 s of CPU measured; the samples
    # (all CPU) claim the open 2 s too, within the measured 8 s.
    measurement = measure([(10.0, {tr.METRIC_RUN_TIME: 10.0, tr.METRIC_CPU_TIME: 2.0, tr.METRIC_CPU_WAIT_TIME: 6.0,
                                   tr.METRIC_INPUT_BYTES: 1e9})])
    assert measurement is not None and measurement.fractions() == pytest.approx({"cpu": 0.8})
    assert bounded_vector(measurement, ResourceVector.of(1.0)) == pytest.approx((1.0, 0.0, 0.0, 0.0))


@pytest.mark.parametrize(("name", "resource"), [
    ("java.io.FileInputStream.readBytes", "disk"), ("sun.nio.ch.FileChannelImpl.read", "disk"),
    ("java.io.RandomAccessFile.readBytes", "disk"), ("io.FileIO.readall", "disk"),
    ("java.net.SocketInputStream.socketRead0", "network"), ("sun.nio.ch.NioSocketImpl.read", "network"),
    ("socket.socket.recv_into", "network"), ("http.client.HTTPResponse.read", "network"),
])
def test_runtime_io_primitives_are_what_they_wait_for_whatever_the_classifier_says(name: str, resource: str) -> None:
    frames = [tr.Frame(name=name, language="java"), tr.Frame(name="app.Main.run", language="java")]
    samples = tr.StackSamples(origin=0, frames=frames, stacks=[[0, 1]], states=[tr.THREAD_RUNNABLE],
                              keys=[tr.SampleKey(operation="a")], key=[0], bucket=[0], stack=[0], count=[3])
    profile = build_profile(make_trace([op("a", 0, 1)], samples=samples),
                            FixedClassifier({}, default=ResourceVector.of(cpu=1.0)), locators=[EveryFrame()])
    assert profile.top.nodes["a"].vector.vector.dominant() == resource
    paper = build_profile(make_trace([op("a", 0, 1)], samples=samples),
                          FixedClassifier({}, default=ResourceVector.of(cpu=1.0)), locators=[EveryFrame()],
                          attribution="paper")
    assert paper.top.nodes["a"].vector.vector.dominant() == "cpu"


def test_waiting_on_an_input_that_worked_on_the_disk_is_disk_bound_through_it() -> None:
    # A step waited 9 of 10 s for its input pipeline, which the hook measured spent 80 % of its work on disk.
    step = op("input", 0, 10, metrics={tr.METRIC_RUN_TIME: 9.0, tr.METRIC_WAIT_TIME: 9.0},
              attributes={tr.ATTRIBUTE_WAITS_ON: "input pipeline (TextLineDataset)",
                          tr.ATTRIBUTE_WAITS_ON_WORK: "cpu=0.2,disk=0.8,network=0"})
    report = analyze(make_trace([step]), classifier=CLASSIFIER, locators=[], scenarios=[]).report
    bottleneck = report["bottleneck"]
    assert bottleneck["resource"] == "disk"
    assert bottleneck["through_input"] == pytest.approx({"cpu": 0.2, "disk": 0.8, "network": 0.0, "waiting": 0.0})
    assert bottleneck["sentence"].startswith("The job is disk-bound through its input:")
    assert "input pipeline (TextLineDataset)" in bottleneck["sentence"]


def _input_wait_sampled_in(frame: str, state: str) -> tr.Trace:
    """A step's 8 s input wait (of its 10 s), whose own samples are the input code that ran meanwhile."""
    step = op("input", 0, 10, metrics={tr.METRIC_RUN_TIME: 8.0, tr.METRIC_WAIT_TIME: 8.0},
              attributes={tr.ATTRIBUTE_WAITS_ON: "input pipeline (generator)", tr.ATTRIBUTE_WAITS_ON_WORK: "samples"})
    frames = [tr.Frame(name=frame, language="python"), tr.Frame(name="app.records", language="python")]
    samples = tr.StackSamples(origin=0, frames=frames, stacks=[[0, 1]], states=[state],
                              keys=[tr.SampleKey(operation="input", thread="generator")], key=[0], bucket=[0],
                              stack=[0], count=[40])
    return make_trace([step], samples=samples)


def test_an_input_wait_sampled_reading_a_socket_is_network_bound_through_its_input() -> None:
    report = analyze(_input_wait_sampled_in("socket.socket.recv_into", tr.THREAD_WAITING),
                     classifier=CLASSIFIER, locators=[EveryFrame()], scenarios=[]).report
    entry = next(o for o in report["operations"] if o["id"] == "input")
    # All of the run time waited; the input code spent its time in a socket read: all network, 10 s on the path.
    assert entry["vector"]["network"] == pytest.approx(1.0) and entry["vector"]["waiting"] == pytest.approx(0.0)
    assert entry["waited_for_work"]["network"] == pytest.approx(1.0)
    bottleneck = report["bottleneck"]
    assert bottleneck["resource"] == "network" and bottleneck["through_input"]["network"] == pytest.approx(1.0)
    assert bottleneck["sentence"].startswith("The job is network-bound through its input: 10.00 s")
    assert "input pipeline (generator)" in bottleneck["sentence"]


def test_an_input_wait_sampled_sleeping_stays_waiting() -> None:
    report = analyze(_input_wait_sampled_in("time.sleep", tr.THREAD_TIMED_WAITING),
                     classifier=CLASSIFIER, locators=[EveryFrame()], scenarios=[]).report
    entry = next(o for o in report["operations"] if o["id"] == "input")
    assert entry["vector"]["waiting"] == pytest.approx(1.0) and "waited_for_work" not in entry
    assert report["bottleneck"]["resource"] == "waiting" and report["bottleneck"]["through_input"] is None


def test_a_wait_given_to_the_awaited_work_is_fixed_under_changes_of_the_waiters_resources() -> None:
    from crystalperf.core.predict import Changes, Predictor

    profile = build_profile(_input_wait_sampled_in("socket.socket.recv_into", tr.THREAD_WAITING), CLASSIFIER,
                            locators=[EveryFrame()])
    predicted = Predictor(profile).predict(Changes({"cpu_speed": 2.0, "network": 10e9}), band=False)
    # The wait is the input code's network time, but changing the step's own resources does not shorten it:
    # how the input pipeline would change is the framework model's (TensorFlow's prefetching) business.
    assert predicted.crystalperf.runtime_s == pytest.approx(predicted.baseline_runtime_s, rel=0.01)


def test_waiting_on_an_upstream_operator_that_computed_is_cpu_bound_through_it() -> None:
    # The source computes (8 of its 10 s on CPU); the sink downstream idles 9.5 of 10 s waiting for it.
    source = op("src", 0, 10, tasks=[task("s0", 0, 10, run_time_s=10, cpu_time_s=8, idle_time_s=0)])
    sink = op("sink", 0, 10, parents=["src"],
              tasks=[task("k0", 0, 10, run_time_s=10, idle_time_s=9.5, cpu_time_s=0.5)])
    source.name = "Source: hash"
    report = analyze(make_trace([source, sink]), classifier=CLASSIFIER, locators=[], scenarios=[]).report
    # The path (src, then sink in the pipeline) holds 10 s of source CPU... and 9.5 s of the sink's waiting:
    # CPU dominates outright, so no resolving is needed; the waiting never becomes a resource.
    assert report["bottleneck"]["resource"] == "cpu"
    assert report["bottleneck"]["through_input"] is None


def test_in_a_pipeline_waiting_for_the_upstream_on_the_path_is_not_counted_twice() -> None:
    # Source computes 9 of its 10 s (measured CPU); the sink, running alongside, idles 9 of its 10 s for it.
    source = op("src", 0, 10, tasks=[task("s0", 0, 10, run_time_s=10, cpu_time_s=9, idle_time_s=0)])
    sink = op("sink", 0, 10, parents=["src"], tasks=[task("k0", 0, 10, run_time_s=10, idle_time_s=9, cpu_time_s=1)])
    bottleneck = find_bottleneck(build_profile(make_trace([source, sink]), CLASSIFIER, locators=[]))
    # path: src (cpu 9, waiting... none: idle 0; open 1 s -> CPU) then sink (cpu 1, waiting 9 dropped)
    assert bottleneck.resource == "cpu"
    assert bottleneck.seconds == pytest.approx({"cpu": 11.0, "disk": 0.0, "network": 0.0, "waiting": 0.0})


def test_a_function_a_thread_was_parked_in_shows_what_its_samples_did() -> None:
    # pool.Buffers.request: 6 samples parked (waiting), 2 running; app.Hash: 4 running. The classifier reads the
    # pool as cpu 0.5 / network 0.5, so its running samples are half cpu: 1 sample of cpu against Hash's 4.
    frames = [tr.Frame(name="pool.Buffers.request", language="java"), tr.Frame(name="app.Hash.run", language="java")]
    samples = tr.StackSamples(origin=0, frames=frames, stacks=[[0], [0], [1]], keys=[tr.SampleKey(operation="calc")],
                              key=[0, 0, 0], bucket=[0, 0, 0], stack=[0, 1, 2], count=[6, 2, 4],
                              states=[tr.THREAD_WAITING, tr.THREAD_RUNNABLE, tr.THREAD_RUNNABLE])
    trace = make_trace([op("calc", 0, 10, tasks=[task("t0", 0, 10)])], end=10, samples=samples)
    classifier = FixedClassifier({"pool.": ResourceVector.of(0.5, 0.0, 0.5), "app.": ResourceVector.of(1.0)})
    report = analyze(trace, classifier=classifier, locators=[EveryFrame()], band=False).report
    [calc] = report["operations"]
    pool = next(f for f in calc["top_functions"] if f["name"] == "pool.Buffers.request")
    # parked: cpu -> waiting, network stays; running: as classified. 8 samples: (6 * 0.5 + 2 * 0.5) / 8 network
    assert pool["samples"] == 8 and calc["top_functions"][0]["name"] == "pool.Buffers.request"
    assert pool["vector"]["waiting"] == pytest.approx(0.375) and pool["vector"]["cpu"] == pytest.approx(0.125)
    assert pool["classified"]["cpu"] == pytest.approx(0.5) and pool["classified"]["waiting"] == 0.0
    # cpu-bound (5 of 12 samples' worth of cpu): the advice names Hash first (4 samples of cpu against the pool's 1),
    # though the pool was sampled twice as often
    assert report["bottleneck"]["resource"] == "cpu"
    advice = next(a for a in report["advice"] if a.startswith("Look at"))
    assert advice.endswith("mostly in app.Hash.run, pool.Buffers.request."), advice


IO_WAIT_FRAMES = [
    tr.Frame(name="jdk.internal.misc.Unsafe.park", language="java"),
    tr.Frame(name="java.util.concurrent.locks.LockSupport.parkNanos", language="java"),
    tr.Frame(name="java.util.concurrent.CompletableFuture.get", language="java"),
    tr.Frame(name="org.apache.parquet.hadoop.util.wrapped.io.FutureIO.awaitFuture", language="java"),
    tr.Frame(name="org.apache.parquet.hadoop.ParquetFileReader$ConsecutivePartList.readFromVectoredRange",
             language="java"),
]


def _io_wait_trace(read_rate: float) -> tr.Trace:
    """A task thread parked on a vectored read another thread does, 10 samples; the device read at
    ``read_rate`` under a 5 MB/s limit."""
    samples = tr.StackSamples(origin=0, frames=IO_WAIT_FRAMES, stacks=[[0, 1, 2, 3, 4]], states=[tr.THREAD_WAITING],
                              keys=[tr.SampleKey(operation="a")], key=[0], bucket=[0], stack=[0], count=[10])
    trace = make_trace([op("a", 0, 10)], samples=samples)
    trace.io = [tr.IoSample(t=float(t), source="driver", storage_read_bytes=read_rate * t, storage_write_bytes=0.0,
                            disk_read_limit=5e6) for t in range(11)]
    return trace


def test_a_wait_for_another_threads_read_is_the_busy_devices() -> None:
    profile = build_profile(_io_wait_trace(5e6), CLASSIFIER, locators=[EveryFrame()])
    vector = profile.top.nodes["a"].vector.vector
    # the device read at its 5 MB/s limit all along: the wait was the device's
    assert vector.disk == pytest.approx(1.0) and vector.waiting == pytest.approx(0.0)


def test_a_wait_for_another_threads_read_while_the_device_idled_stays_waiting() -> None:
    # 50 MB over 10 s at a 5 MB/s limit, then 2 MB/s: busy 0.4, under BUSY_SHARE: 0.8 of the wait is the device's
    profile = build_profile(_io_wait_trace(2e6), CLASSIFIER, locators=[EveryFrame()])
    vector = profile.top.nodes["a"].vector.vector
    assert vector.disk == pytest.approx(0.8) and vector.waiting == pytest.approx(0.2)
    trace = _io_wait_trace(5e6)
    trace.io = []
    quiet = build_profile(trace, CLASSIFIER, locators=[EveryFrame()]).top.nodes["a"].vector.vector
    assert quiet.waiting == pytest.approx(1.0)
