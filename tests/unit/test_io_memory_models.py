"""Algorithm 2 (I/O, network) and the reversed roofline for memory, hand-computed."""

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import FixedClassifier
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.predict.io import scale_io_time
from crystalperf.core.predict.memory import overflow
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.resources import ResourceVector

from .helpers import make_trace, op, task

GiB = 1 << 30


def test_algorithm2_by_hand():
    # t = 2 s at 100 MB/s: D = 200 MB in 200 buffers of 1 MB, 1 ms each -> t_p = 0.2 s, t_c = 1.8 s.
    # Half the bandwidth doubles t_c: 0.2 + 3.6 = 3.8 s.
    assert scale_io_time(2.0, 100e6, 50e6, 1e6, 1e-3) == pytest.approx(3.8)
    # Ten times the bandwidth: 0.2 + 0.18.
    assert scale_io_time(2.0, 100e6, 1000e6, 1e6, 1e-3) == pytest.approx(0.38)
    assert scale_io_time(0.0, 100e6, 1e6, 1e6, 1e-3) == 0.0
    assert scale_io_time(2.0, 100e6, 100e6, 1e6, 1e-3) == 2.0


def test_processing_time_never_exceeds_the_io_time():
    # So many buffers that their overhead would exceed t: all of t is processing, nothing scales.
    assert scale_io_time(1.0, 1e9, 1e6, 1.0, 1.0) == pytest.approx(1.0)


def _network_trace():
    # One task of 10 s, half of it on the network at a known 1 Gbit/s.
    t = task("t", 0, 10, run_time_s=10, cpu_time_s=5, network_wait_s=5)
    return make_trace([op("s", 0, 10, tasks=[t])], total_slots=1, network_bandwidth=125e6)


def test_network_change_end_to_end():
    predictor = Predictor(build_profile(_network_trace(), FixedClassifier({}), locators=[]))
    # 5 s of network at 125 MB/s: 625 MB in 2934 buffers of 212,992 B (25 us each: t_p = 0.073 s).
    t_p = 625e6 / 212_992 * 25e-6
    expected = 5 + t_p + (5 - t_p) * 2  # half the bandwidth
    assert predictor.simulate(Changes({"network": 62.5e6})) == pytest.approx(expected)


def test_overflow():
    assert overflow(6 * GiB, 4 * GiB) == 2 * GiB
    assert overflow(6 * GiB, 8 * GiB) == 0


def _spilling_trace():
    # 10 s task, half disk; of its disk bytes half are spill -> 2.5 s of spill time.
    # 4 GiB of memory, 2 GiB spilled beyond it: the data needs 6 GiB.
    t = task("t", 0, 10, run_time_s=10, cpu_time_s=5, disk_time_s=5, spill_disk_bytes=1e9, input_bytes=1e9,
             spill_memory_bytes=2 * GiB)
    trace = make_trace([op("s", 0, 10, tasks=[t])], total_slots=1, memory_bytes=4 * GiB)
    return trace


def test_roofline_falls_linearly_then_stays_flat():
    predictor = Predictor(build_profile(_spilling_trace(), FixedClassifier({}), locators=[]))
    assert predictor.baseline.data_bytes == 6 * GiB
    assert predictor.simulate(Changes({"memory": 4 * GiB})) == pytest.approx(10)
    # 5 GiB: half of the overflow remains -> half the spill time (1.25 s) saved.
    assert predictor.simulate(Changes({"memory": 5 * GiB})) == pytest.approx(8.75)
    # Everything fits from 6 GiB on: all 2.5 s saved, and no more beyond.
    assert predictor.simulate(Changes({"memory": 6 * GiB})) == pytest.approx(7.5)
    assert predictor.simulate(Changes({"memory": 64 * GiB})) == pytest.approx(7.5)
    # Less memory: 3 GiB -> overflow 3 GiB = 1.5x -> +1.25 s.
    assert predictor.simulate(Changes({"memory": 3 * GiB})) == pytest.approx(11.25)


def test_memory_without_a_known_size_predicts_no_change_and_says_so():
    trace = _spilling_trace()
    trace.environment.memory_bytes = None
    predictor = Predictor(build_profile(trace, FixedClassifier({}), locators=[]))
    prediction = predictor.predict(Changes({"memory": 8 * GiB}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(10)
    assert any("does not say how much memory" in n for n in prediction.notes)


def test_cpu_vector_from_samples_scales_only_the_cpu_part():
    # Vector from a fixed classifier: 25 % CPU. Doubling CPU speed saves 1/8 of the time.
    samples = tr.StackSamples(origin=0, frames=[tr.Frame(name="x.f", language="java")], stacks=[[0]],
                              keys=[tr.SampleKey(operation="s")], key=[0], bucket=[0], stack=[0], count=[10])
    trace = make_trace([op("s", 0, 8)], samples=samples)
    clf = FixedClassifier({"x.": ResourceVector(0.25, 0.75, 0.0)})
    predictor = Predictor(build_profile(trace, clf, locators=[]))
    assert predictor.simulate(Changes({"cpu_speed": 2.0})) == pytest.approx(7.0)
    prediction = predictor.predict(Changes({"cpu_speed": 2.0}))
    assert prediction.linear.runtime_s == pytest.approx(4.0)  # linear scaling: everything halves
    assert prediction.replay.runtime_s == pytest.approx(4.0)  # replay without vectors: all CPU
    assert prediction.crystalperf.low_s <= 7.0 <= prediction.crystalperf.high_s


def test_streaming_predicts_the_batch_latency_from_busy_time_on_the_path():
    # Latency 0.5 s through src (busy 2 s) -> map (busy 8 s, 2 subtasks of 4 s) -> sink (busy 1 s).
    def operator(id, parents, start, busy, subtasks=1):
        tasks = [task(f"{id}-{i}", start, 10, run_time_s=busy, cpu_time_s=busy) for i in range(subtasks)]
        return op(id, start, 10, parents, tasks=tasks, parallelism=subtasks)

    ops = [operator("src", [], 0.0, 2), operator("map", ["src"], 0.1, 4, subtasks=2), operator("sink", ["map"], 0.2, 1)]
    trace = make_trace(ops, end=10)
    trace.application.framework = "flink"
    trace.streaming = tr.Streaming(latency_s=0.5)
    predictor = Predictor(build_profile(trace, FixedClassifier({}), locators=[]))
    assert predictor.runtime == 0.5 and predictor.baseline.slots == 2
    # Path busy time 2 + 4 + 1 = 7 s. CPU share halved: all CPU, so 14 s -> latency doubles.
    assert predictor.simulate(Changes({"cpu_share": 0.5})) == pytest.approx(1.0)
    # Parallelism 4: the work spreads over 4 subtasks: src 2/4, map 8/4, sink 1/4 = 2.75 s of 7 s.
    assert predictor.simulate(Changes({"parallelism": 4})) == pytest.approx(0.5 * 2.75 / 7)


def test_a_cpu_quota_slows_only_the_cpu_used_beyond_it():
    # An 8 s all-CPU operation on 2 slots that kept 1.5 CPUs busy. Half the CPU (1 CPU) stretches it
    # 1.5 / (0.5 * 2) = 1.5x -> 12 s; 80 % (1.6 CPUs) is more than it used -> unchanged.
    samples = tr.StackSamples(origin=0, frames=[tr.Frame(name="x.f", language="java")], stacks=[[0]],
                              keys=[tr.SampleKey(operation="s")], key=[0], bucket=[0], stack=[0], count=[10])
    trace = make_trace([op("s", 0, 8)], samples=samples, total_slots=2)
    trace.metrics["cpu_utilization"] = 1.5
    predictor = Predictor(build_profile(trace, FixedClassifier({"x.": ResourceVector(1.0, 0.0, 0.0)}), locators=[]))
    assert predictor.simulate(Changes({"cpu_share": 0.5})) == pytest.approx(12.0)
    assert predictor.simulate(Changes({"cpu_share": 0.8})) == pytest.approx(8.0)
    # Without a measured utilisation the share applies in full.
    del trace.metrics["cpu_utilization"]
    assert Predictor(build_profile(trace, FixedClassifier({"x.": ResourceVector(1.0, 0.0, 0.0)}), locators=[])
                     ).simulate(Changes({"cpu_share": 0.5})) == pytest.approx(16.0)


def _storage_trace(measured: bool = True) -> tr.Trace:
    # Two 4 s tasks side by side on 2 slots, 1 s of disk each (a spill file, say); they read 50 + 150 bytes
    # of input as Spark counts it, and the process read 200 MB from the device at 100 MB/s.
    tasks = [task(f"t{i}", 0, 4, run_time_s=4, cpu_time_s=3, disk_time_s=1, input_bytes=b)
             for i, b in enumerate((50, 150))]
    trace = make_trace([op("scan", 0, 4, tasks=tasks)], total_slots=2, disk_bandwidth=100e6)
    if measured:
        trace.metrics["storage_read_bytes"] = 200e6
    return trace


def test_measured_device_reads_set_the_disk_change():
    predictor = Predictor(build_profile(_storage_trace(), FixedClassifier({}), locators=[]))
    # Half the bandwidth: 200 MB take 4 s instead of 2 s: +2 s shared by input bytes (1/4, 3/4) and by the
    # 2 tasks reading side by side: +1 s and +3 s. The spill disk time stays. Tasks 5 s and 7 s -> 7 s.
    assert predictor.simulate(Changes({"disk": 50e6})) == pytest.approx(7.0)
    notes = predictor.predict(Changes({"disk": 50e6}), band=False).notes
    assert any("from the storage device" in n for n in notes)
    # Twice the bandwidth saves 1 s of device time, shared the same way: -0.5 s and -1.5 s -> 3.5 s.
    assert predictor.simulate(Changes({"disk": 200e6})) == pytest.approx(3.5)


def test_without_measured_device_reads_algorithm2_scales_the_disk_time():
    predictor = Predictor(build_profile(_storage_trace(measured=False), FixedClassifier({}), locators=[]))
    # 1 s of disk per task at 100 MB/s, processing 100 MB / 128 KiB * 0.6 us: almost all doubles.
    t_p = 100e6 / 131_072 * 0.6e-6
    assert predictor.simulate(Changes({"disk": 50e6})) == pytest.approx(3 + t_p + (1 - t_p) * 2)


def test_disk_time_the_device_does_not_explain_is_cpu_work_under_a_cpu_change():
    trace = _storage_trace()
    trace.metrics["storage_read_bytes"] = 50e6  # 0.5 s at 100 MB/s of the 2 s of disk time: 75 % is page cache
    predictor = Predictor(build_profile(trace, FixedClassifier({}), locators=[]))
    # Half the CPU: each task's 3 s of CPU and 0.75 s of page-cache copying double, 0.25 s waits on the device.
    assert predictor.simulate(Changes({"cpu_share": 0.5})) == pytest.approx(7.75)
    assert any("page-cache" in n for n in predictor.predict(Changes({"cpu_share": 0.5}), band=False).notes)
    # Without the measurement all disk time stays disk: 6 + 1.
    plain = Predictor(build_profile(_storage_trace(measured=False), FixedClassifier({}), locators=[]))
    assert plain.simulate(Changes({"cpu_share": 0.5})) == pytest.approx(7.0)
