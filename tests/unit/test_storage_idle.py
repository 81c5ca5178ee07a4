"""A job whose processes the OS saw do no disk I/O has no disk share, and one whose processes moved nothing over a
network interface no network share: the sampled functions a classifier reads as I/O computed (or copied from the
page cache, or from a local channel). Hand-built traces: io rows of the processes that ran the tasks."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import FixedClassifier
from crystalperf.core.attribution.observed import BUFFERED_WRITE_BYTES, MIN_BYTES, storage_counted_idle
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.resources import ResourceVector

from .helpers import make_trace, op, task

DISK = ResourceVector(0.0, 1.0, 0.0)
CPU = ResourceVector(1.0, 0.0, 0.0)
CLASSIFIER = FixedClassifier({"state.": DISK, "calc.": CPU})


def _rows(source: str, read: float, written: float, seconds: int = 10) -> list[tr.IoSample]:
    """Cumulative counters every second of one process reading and writing at a steady rate over the run."""
    return [tr.IoSample(t=float(i), source=source, host="vm", storage_read_bytes=read * i / seconds,
                        storage_write_bytes=written * i / seconds) for i in range(seconds + 1)]


def _trace(io: list[tr.IoSample], executors: tuple[str | None, ...] = (None,), **metrics: float) -> tr.Trace:
    # one operation, its 4 samples: 3 in a function the classifier reads as disk, 1 computing
    frames = [tr.Frame(name="state.Map.get", language="java"), tr.Frame(name="calc.hash", language="java")]
    samples = tr.StackSamples(origin=0, frames=frames, stacks=[[0], [1]], keys=[tr.SampleKey(operation="agg")],
                              key=[0, 0], bucket=[0, 0], stack=[0, 1], count=[3, 1])
    tasks = [task(f"t{i}", 0, 10, run_time_s=10, **metrics) for i, _ in enumerate(executors)]
    for t, executor in zip(tasks, executors, strict=True):
        t.executor = executor
    trace = make_trace([op("agg", 0, 10, tasks=tasks)], end=10, samples=samples)
    trace.io = io
    return trace


def test_counters_that_saw_no_reads_and_buffered_writes_are_idle() -> None:
    assert storage_counted_idle(_trace(_rows("driver", 0, 4e6))) == (0.0, pytest.approx(4e6))
    assert storage_counted_idle(_trace(_rows("driver", MIN_BYTES, 0))) is None  # a MiB read: maybe a disk wait
    assert storage_counted_idle(_trace(_rows("driver", 0, BUFFERED_WRITE_BYTES))) is None  # past the page cache
    assert storage_counted_idle(_trace([])) is None  # nothing counted: unknown


def test_every_process_that_ran_tasks_must_be_counted() -> None:
    # Spark executors by name: executor 2 has no counters
    assert storage_counted_idle(_trace(_rows("executor:1", 0, 0), executors=("1", "2"))) is None
    both = _rows("executor:1", 0, 0) + _rows("executor:2", 0, 1e6)
    assert storage_counted_idle(_trace(both, executors=("1", "2"))) == (0.0, pytest.approx(1e6))
    # Flink TaskManagers: executor ids are not the counters' names; one source per TaskManager
    tms = ("10.0.0.2:35959-bae0e2", "10.0.0.3:39277-9a0d83")
    assert storage_counted_idle(_trace(_rows("taskmanager:17085", 0, 0), executors=tms)) is None
    counted = _rows("taskmanager:17085", 0, 0) + _rows("taskmanager:17090", 0, 0) + _rows("jobmanager:1", 0, 0)
    assert storage_counted_idle(_trace(counted, executors=tms)) == (0.0, 0.0)
    # a local PyFlink job: the mini cluster's JVM and the Python program that started it
    local = _rows("minicluster:1138", 0, 4e6) + _rows("python:1137", 0, 2e6)
    assert storage_counted_idle(_trace(local, executors=("6e08e1f7",))) == (0.0, pytest.approx(6e6))
    # several processes, none named as running tasks
    assert storage_counted_idle(_trace(_rows("python:1", 0, 0) + _rows("python:2", 0, 0))) is None


def test_the_disk_share_of_an_idle_job_is_cpu() -> None:
    idle = build_profile(_trace(_rows("driver", 0, 4e6)), CLASSIFIER, locators=[])
    vector = idle.top.nodes["agg"].vector.vector
    assert vector.disk == 0.0 and vector.cpu == pytest.approx(1.0)
    assert idle.storage_idle == (0.0, pytest.approx(4e6))
    # the same samples where the process read from storage: the classifier's split stands
    reading = build_profile(_trace(_rows("driver", 50e6, 0)), CLASSIFIER, locators=[])
    assert reading.top.nodes["agg"].vector.vector.disk == pytest.approx(0.75)
    assert reading.storage_idle is None
    # the paper's method knows nothing of the counters
    paper = build_profile(_trace(_rows("driver", 0, 0)), CLASSIFIER, locators=[], attribution="paper")
    assert paper.top.nodes["agg"].vector.vector.disk == pytest.approx(0.75)


def test_disk_time_the_framework_measured_stays() -> None:
    # 2 of the task's 10 s measured as disk (a spill's write time): kept; the samples' extra disk share is cpu
    profile = build_profile(_trace(_rows("driver", 0, 0), disk_time_s=2.0), CLASSIFIER, locators=[])
    vector = profile.top.nodes["agg"].vector.vector
    assert vector.disk == pytest.approx(0.2) and vector.cpu == pytest.approx(0.8)


def test_the_report_says_so() -> None:
    from crystalperf.core.analysis import analyze

    report = analyze(_trace(_rows("driver", 0, 4e6)), classifier=CLASSIFIER, locators=[], band=False).report
    assert any("read 0 B from storage and wrote 3.8 MiB" in w for w in report["warnings"]), report["warnings"]
    assert report["operations"][0]["vector"]["disk"] == 0.0


NETWORK = ResourceVector(0.0, 0.0, 1.0)


def _network_rows(source: str, received: float, start: float = 0.0) -> list[tr.IoSample]:
    return [tr.IoSample(t=start + i, source=source, host="vm", network_rx_bytes=received * i / 10,
                        network_tx_bytes=0.0) for i in range(11)]


def test_the_network_share_of_a_job_that_moved_nothing_over_a_network_is_cpu() -> None:
    from crystalperf.core.analysis import analyze

    exchanging = FixedClassifier({"state.": NETWORK, "calc.": CPU})  # a local channel's buffer pool read as network
    local = _trace(_network_rows("minicluster:7", 50_000.0), executors=("6e08e1f7",))
    idle = build_profile(local, exchanging, locators=[])
    assert idle.network_idle
    assert idle.top.nodes["agg"].vector.vector.network == 0.0
    assert idle.top.nodes["agg"].vector.vector.cpu == pytest.approx(1.0)
    report = analyze(local, classifier=exchanging, locators=[], band=False).report
    assert any("network counters of the job's processes saw no traffic" in w for w in report["warnings"])
    # 50 MB received: the classifier's split stands
    busy = build_profile(_trace(_network_rows("minicluster:7", 50e6), executors=("6e08e1f7",)), exchanging,
                         locators=[])
    assert not busy.network_idle and busy.top.nodes["agg"].vector.vector.network == pytest.approx(0.75)
    # network time the framework measured stays
    measured = build_profile(_trace(_network_rows("driver", 0.0), network_wait_s=2.0), exchanging, locators=[])
    assert measured.top.nodes["agg"].vector.vector.network == pytest.approx(0.2)


def test_a_counter_source_of_another_run_is_left_out() -> None:
    # the mini cluster counted the job; a Python program's file from a run an hour earlier has one reading
    rows = _rows("minicluster:7", 0, 1e6) + _rows("python:5", 0, 0)[:1]
    for row in rows[-1:]:
        row.t -= 3600
    assert storage_counted_idle(_trace(rows, executors=("6e08e1f7",))) == (0.0, pytest.approx(1e6))


def test_a_blocked_thread_keeps_its_network_share_and_loses_its_disk_share() -> None:
    # 3 samples blocked in a function read as half network, half disk, 1 running in it; no bytes on any interface
    # and none read from storage
    frames = [tr.Frame(name="client.Fetcher.read", language="java")]
    samples = tr.StackSamples(origin=0, frames=frames, stacks=[[0], [0]], keys=[tr.SampleKey(operation="agg")],
                              key=[0, 0], bucket=[0, 0], stack=[0, 1], count=[3, 1],
                              states=[tr.THREAD_WAITING, tr.THREAD_RUNNABLE])
    trace = make_trace([op("agg", 0, 10, tasks=[task("t0", 0, 10, run_time_s=10)])], end=10, samples=samples)
    trace.io = [tr.IoSample(t=float(i), source="driver", host="vm", network_rx_bytes=0.0, network_tx_bytes=0.0,
                            storage_read_bytes=0.0, storage_write_bytes=0.0) for i in range(11)]
    half = FixedClassifier({"client.": ResourceVector(0.0, 0.5, 0.5)})
    vector = build_profile(trace, half, locators=[]).top.nodes["agg"].vector.vector
    # blocked: network 0.5 stays (a slow peer), disk 0.5 waits; running: all cpu
    assert vector.network == pytest.approx(0.375) and vector.disk == 0.0
    assert vector.waiting == pytest.approx(0.375) and vector.cpu == pytest.approx(0.25)


def test_a_thread_parked_on_a_synchroniser_waits_whatever_its_function_reads_as() -> None:
    # Flink's LocalBufferPool.requestMemorySegmentBlocking parks for a buffer under a package named io.network:
    # with no traffic on any interface, its network share is waiting, where a blocked read's stays
    frames = [tr.Frame(name="jdk.internal.misc.Unsafe.park", language="java"),
              tr.Frame(name="pool.io.network.Buffers.request", language="java")]
    samples = tr.StackSamples(origin=0, frames=frames, stacks=[[0, 1]], keys=[tr.SampleKey(operation="agg")],
                              key=[0], bucket=[0], stack=[0], count=[4], states=[tr.THREAD_WAITING])
    trace = make_trace([op("agg", 0, 10, tasks=[task("t0", 0, 10, run_time_s=10)])], end=10, samples=samples)
    trace.io = _network_rows("driver", 0.0)
    read_as_network = FixedClassifier({"pool.": ResourceVector(0.5, 0.0, 0.5)})
    vector = build_profile(trace, read_as_network, locators=[]).top.nodes["agg"].vector.vector
    assert vector.network == 0.0 and vector.waiting == pytest.approx(1.0)
