"""The bandwidth the job saw (``Trace.io`` rows -> ``core.attribution.observed``), and what-ifs scaled from it in both
directions, with hand-computed answers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import FixedClassifier
from crystalperf.core.attribution.observed import observed_bandwidths, window_busy
from crystalperf.core.errors import BadInputError
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.predict.base import DEFAULT_DISK_BANDWIDTH, Baseline
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.record.iocounters import IoCounterSampler, disk_limits, network_bytes

from .helpers import make_trace, op, task

MB = 1e6


def _rows(rates: list[float], counter: str, source: str = "driver", host: str = "h", step: float = 0.25,
          **fields: float) -> list[tr.IoSample]:
    """Cumulative rows, one every ``step`` s, moving ``rates[i]`` bytes/s during the i-th second."""
    rows, total = [], 0.0
    for i in range(len(rates) * int(1 / step) + 1):
        t = i * step
        rows.append(tr.IoSample(t=t, source=source, host=host, **{counter: total}, **fields))
        total += rates[min(int(t), len(rates) - 1)] * step
    return rows


def _network_trace(rows: list[tr.IoSample], duration: float = 20.0) -> tr.Trace:
    # One task of 20 s on one slot, 80 % of it waiting on the network.
    t = task("t", 0, duration, run_time_s=duration, cpu_time_s=0.2 * duration, network_wait_s=0.8 * duration)
    trace = make_trace([op("s", 0, duration, tasks=[t])], total_slots=1)
    trace.io = rows
    return trace


def test_a_throttled_link_is_seen_at_its_plateau():
    # 2 s idle, 16 s at 5 MB/s (a 40 Mbit/s link), a 20 MB/s burst second (the shaper's bucket), 1 s idle
    rates = [0, 0, 20 * MB] + [5 * MB] * 16 + [0]
    seen = observed_bandwidths(_network_trace(_rows(rates, "network_rx_bytes")))["network"]
    assert seen.bandwidth == pytest.approx(5 * MB)
    assert seen.bytes == pytest.approx(100 * MB)
    assert seen.active_s == pytest.approx(17)
    assert seen.direction == "received"
    assert "40 Mbit/s" in seen.describe()


def test_a_cgroup_limit_in_force_while_reading_is_the_disk_bandwidth():
    rows = _rows([4.8 * MB] * 10, "storage_read_bytes", disk_read_limit=5 * MB)
    seen = observed_bandwidths(_network_trace(rows))["disk"]
    assert seen.limit == 5 * MB and seen.effective == 5 * MB
    assert seen.bandwidth == pytest.approx(4.8 * MB)
    # a limit present in too few of the windows that read (joined late, or lifted) is not the job's
    early = [r.model_copy(update={"disk_read_limit": 5 * MB if r.t < 2 else None}) for r in rows]
    assert observed_bandwidths(_network_trace(early))["disk"].limit is None


def test_too_few_bytes_say_nothing():
    assert observed_bandwidths(_network_trace(_rows([100e3] * 5, "network_rx_bytes"))) == {}
    assert observed_bandwidths(_network_trace([])) == {}


def test_a_few_mib_read_from_a_device_say_nothing_of_it_unless_a_limit_held_it():
    # A JVM loading 2 MB of classes over 3 s reads as fast as it asks, not as fast as the device moves: its bytes
    # count, its rate is no device's, and the baseline assumes one and says why
    few = _network_trace(_rows([0.7 * MB, 0.9 * MB, 0.4 * MB], "storage_read_bytes"))
    seen = observed_bandwidths(few)["disk"]
    assert seen.bytes == pytest.approx(2 * MB) and not seen.conclusive
    assert "too little to say what the device moves" in seen.describe()
    baseline = Baseline.of(few)
    assert baseline.origins["disk"] == "assumed" and baseline.disk_bandwidth == DEFAULT_DISK_BANDWIDTH
    assert any("read 1.9 MiB, too little" in a for a in baseline.assumptions)
    assert window_busy(few, {"disk": seen}, 0.0, 3.0) == {}
    # the same bytes under a cgroup limit: the limit is the device the job had
    limited = _network_trace(_rows([0.7 * MB, 0.9 * MB, 0.4 * MB], "storage_read_bytes", disk_read_limit=1 * MB))
    assert observed_bandwidths(limited)["disk"].conclusive
    assert Baseline.of(limited).disk_bandwidth == 1 * MB
    # 20 MB at 2 MB/s: enough that the rate is the device's
    enough = _network_trace(_rows([2 * MB] * 10, "storage_read_bytes"))
    assert observed_bandwidths(enough)["disk"].conclusive
    assert Baseline.of(enough).disk_bandwidth == pytest.approx(2 * MB)


def test_two_processes_reading_one_namespace_count_its_bytes_once():
    a = _rows([5 * MB] * 10, "network_rx_bytes", source="jobmanager:1")
    b = _rows([5 * MB] * 10, "network_rx_bytes", source="taskmanager:2")
    assert observed_bandwidths(_network_trace(a + b))["network"].bytes == pytest.approx(50 * MB)
    # another host's link runs beside this one: a bandwidth change delays each link's 50 MB at the same time
    other_host = _rows([5 * MB] * 10, "network_rx_bytes", source="taskmanager:3", host="h2")
    both = observed_bandwidths(_network_trace(b + other_host))["network"]
    assert both.bytes == pytest.approx(50 * MB) and both.sources == 2


def test_on_a_cluster_the_busiest_executor_link_counts_and_not_the_drivers_namespace():
    # Two executors, each on its own link (own namespace: the same host name, as namespaces on one machine
    # have), receiving 40 and 50 MB at 5 MB/s; the driver's namespace saw both pass a bridge: 90 MB. A bandwidth
    # change delays the busiest link's 50 MB, not 90 or 180.
    rows = (_rows([4 * MB] * 10, "network_rx_bytes", source="executor:0")
            + _rows([5 * MB] * 10, "network_rx_bytes", source="executor:1")
            + _rows([9 * MB] * 10, "network_rx_bytes", source="driver"))
    seen = observed_bandwidths(_network_trace(rows))["network"]
    assert seen.bytes == pytest.approx(50 * MB)
    assert seen.sources == 2
    # in local mode the driver's counters are the job's own
    assert observed_bandwidths(_network_trace(_rows([9 * MB] * 10, "network_rx_bytes")))["network"].bytes == \
        pytest.approx(90 * MB)


def test_on_a_flink_cluster_the_busiest_taskmanager_link_counts_and_not_the_jobmanagers_namespace():
    # The same for Flink: two TaskManagers in namespaces of their own sending 30 and 50 MB; the JobManager's
    # namespace (the bridge's) saw 80 MB pass.
    rows = (_rows([3 * MB] * 10, "network_tx_bytes", source="taskmanager:7")
            + _rows([5 * MB] * 10, "network_tx_bytes", source="taskmanager:8")
            + _rows([8 * MB] * 10, "network_tx_bytes", source="jobmanager:6"))
    seen = observed_bandwidths(_network_trace(rows))["network"]
    assert seen.bytes == pytest.approx(50 * MB) and seen.sources == 2 and seen.direction == "sent"
    # a mini cluster is one process: its counters are the job's
    alone = _rows([8 * MB] * 10, "network_tx_bytes", source="minicluster:6")
    assert observed_bandwidths(_network_trace(alone))["network"].bytes == pytest.approx(80 * MB)


def test_rows_outside_the_job_do_not_count():
    rows = _rows([50 * MB] * 5 + [5 * MB] * 20, "network_rx_bytes")
    trace = _network_trace([r.model_copy(update={"t": r.t - 5}) for r in rows])  # the 50 MB/s before t=0
    assert observed_bandwidths(trace)["network"].bandwidth == pytest.approx(5 * MB)


def test_the_baseline_prefers_declared_then_observed_then_assumed():
    trace = _network_trace(_rows([5 * MB] * 20, "network_rx_bytes"))
    observed = Baseline.of(trace)
    assert observed.network_bandwidth == pytest.approx(5 * MB) and observed.origins["network"] == "observed"
    assert not any(a.startswith("network") for a in observed.assumptions)
    assert observed.origins["disk"] == "assumed"
    trace.environment.network_bandwidth = 125 * MB
    assert Baseline.of(trace).network_bandwidth == 125 * MB
    trace.io = []
    trace.environment.network_bandwidth = None
    assert any("network bandwidth assumed" in a for a in Baseline.of(trace).assumptions)


def test_old_new_states_the_traced_bandwidth():
    changes = Changes.parse(["network=40mbit:100mbit", "disk=20MB/s"])
    assert changes.values == {"network": 12.5 * MB, "disk": 20 * MB}
    assert changes.baselines == {"network": 5 * MB}
    assert changes.describe() == "network=100 Mbit/s (from 40 Mbit/s), disk=20 MB/s"
    for bad in (["cores=1:2"], ["network=:100mbit"], ["network=40mbit:"], ["disk=a:b"]):
        with pytest.raises(BadInputError):
            Changes.parse(bad)


def _predictor(trace: tr.Trace) -> Predictor:
    return Predictor(build_profile(trace, FixedClassifier({}), locators=[]))


def test_a_faster_link_than_the_one_observed_is_faster_and_a_slower_one_slower():
    predictor = _predictor(_network_trace(_rows([5 * MB] * 20, "network_rx_bytes")))
    # The host received 100 MB at 5 MB/s. At 12.5 MB/s they take 8 s instead of 20 s, 12 s sooner; but the task's
    # 16 s on the network shrink by at most 16 * (1 - 5/12.5) = 9.6 s (Algorithm 2 had all of it been transfer).
    up = predictor.predict(Changes({"network": 12.5 * MB}), band=False)
    assert up.crystalperf.runtime_s == pytest.approx(20 - 9.6)
    assert any("as the job saw it" in n for n in up.notes)
    assert not any("assumed" in n for n in up.notes)
    # At 2.5 MB/s the 100 MB take 40 s, 20 s more: 4 + 16 + 20.
    assert predictor.simulate(Changes({"network": 2.5 * MB})) == pytest.approx(40)


def test_a_stated_baseline_wins_over_the_observed_one():
    predictor = _predictor(_network_trace(_rows([5 * MB] * 20, "network_rx_bytes")))
    stated = predictor.predict(Changes.parse(["network=10mbit:100mbit"]), band=False)
    # 100 MB at 1.25 MB/s would be 80 s: the saving is the bound, 16 * (1 - 0.1) = 14.4 s
    assert stated.crystalperf.runtime_s == pytest.approx(20 - 14.4)
    assert any("stated as 10 Mbit/s" in n for n in stated.notes)
    # without counters, Algorithm 2 on the 16 s: t_p = 16 s * 1.25 MB/s in 212,992 B buffers of 25 us each
    plain = _predictor(_network_trace([])).predict(Changes.parse(["network=10mbit:100mbit"]), band=False)
    t_p = 16 * 1.25 * MB / 212_992 * 25e-6
    assert plain.crystalperf.runtime_s == pytest.approx(4 + t_p + (16 - t_p) * 0.1)


def _local_trace(rx_rates: list[float], executor: str = "driver", source: str = "driver") -> tr.Trace:
    """A local-mode job: its one task (16 s of its 20 s sampled as network) ran in the process whose counters the
    trace has, unless ``executor``/``source`` say otherwise."""
    trace = _network_trace(_rows(rx_rates, "network_rx_bytes", source=source, network_tx_bytes=0.0))
    trace.operations[0].tasks[0].executor = executor
    return trace


def test_a_job_whose_counters_saw_no_network_traffic_is_untouched_by_a_bandwidth_change():
    # 100 kB received over 20 s (heartbeats): under a MiB, so the sampled "network" time moved nothing on a link
    predictor = _predictor(_local_trace([5_000.0] * 20))
    assert predictor.baseline.network_idle
    # its band is a rerun's, as for no change at all: nothing of the link's
    rerun = predictor.predict(Changes({"cpu_speed": 1.0})).crystalperf
    for rate in (1 * MB, 125 * MB):
        prediction = predictor.predict(Changes({"network": rate}))
        assert prediction.crystalperf.runtime_s == pytest.approx(20)
        assert (prediction.crystalperf.low_s, prediction.crystalperf.high_s) == pytest.approx((rerun.low_s, rerun.high_s))
        assert any("saw no traffic" in n for n in prediction.notes)


@pytest.mark.parametrize("executor, source", [("1", "driver"), ("driver", "executor:1")])
def test_counters_of_another_process_than_the_tasks_prove_nothing(executor: str, source: str):
    # A cluster executor without its own rows (sampling off): the driver's quiet counters say nothing of its link.
    predictor = _predictor(_local_trace([5_000.0] * 20, executor=executor, source=source))
    assert not predictor.baseline.network_idle
    assert predictor.simulate(Changes({"network": 1 * MB})) > 20


def test_a_job_that_moved_megabytes_is_not_idle():
    assert not _predictor(_local_trace([5 * MB] * 20)).baseline.network_idle


def test_an_assumed_bandwidth_widens_the_band():
    predictor = _predictor(_network_trace([]))
    narrow = _predictor(_network_trace(_rows([5 * MB] * 20, "network_rx_bytes")))
    wide = predictor.predict(Changes({"network": 1 * MB}))
    seen = narrow.predict(Changes({"network": 1 * MB}))
    assert wide.crystalperf.high_s is not None and seen.crystalperf.high_s is not None
    assert wide.crystalperf.low_s is not None and seen.crystalperf.low_s is not None
    width = (wide.crystalperf.high_s - wide.crystalperf.low_s) / wide.crystalperf.runtime_s
    assert width > (seen.crystalperf.high_s - seen.crystalperf.low_s) / seen.crystalperf.runtime_s
    assert any("the band spans" in n for n in wide.notes)


def test_more_of_a_resource_is_never_slower_without_a_reason():
    # Assumed 10 Gbit/s, asked 20 Gbit/s: faster or the same, never slower.
    predictor = _predictor(_network_trace([]))
    for changes in ({"network": 2.5e9}, {"disk": 1e9}, {"cpu_speed": 2.0}, {"cores": 2}, {"memory": 1 << 34}):
        prediction = predictor.predict(Changes(changes), band=False)
        slower = prediction.crystalperf.runtime_s > prediction.baseline_runtime_s * 1.01
        assert not slower or any("slower" in n for n in prediction.notes), (changes, prediction.notes)


def test_more_slots_slower_by_the_measured_warm_up_says_why():
    # 8 tasks on 1 slot whose first ran 3x longer (warm-up): 2 slots put a second task in the first wave.
    tasks = [task("t0", 0, 3, run_time_s=3, cpu_time_s=3)]
    tasks += [task(f"t{i}", 3 + (i - 1), 3 + i, run_time_s=1, cpu_time_s=1) for i in range(1, 2)]
    trace = make_trace([op("s", 0, 4, tasks=tasks)], total_slots=1)
    predictor = _predictor(trace)
    prediction = predictor.predict(Changes({"cores": 2}), band=False)
    if prediction.crystalperf.runtime_s > prediction.baseline_runtime_s * 1.01:
        assert any("first-wave" in n for n in prediction.notes)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/<pid>/io")
def test_the_sampler_reads_this_process_counters(tmp_path: Path):
    sampler = IoCounterSampler("python:test", interval_s=0.05, max_samples=16).start()
    path = tmp_path / "data"
    path.write_bytes(os.urandom(1 << 20))
    with path.open("rb+") as f:
        os.fsync(f.fileno())
    done = threading.Event()
    done.wait(0.6)
    rows = sampler.stop()
    assert rows[0].storage_read_bytes == 0 and rows[0].source == "python:test"
    assert all(a.t <= b.t for a, b in zip(rows, rows[1:], strict=False))
    assert len(rows) <= 16  # halved when full, the interval doubled
    written = [r.storage_write_bytes for r in rows if r.storage_write_bytes is not None]
    assert written == sorted(written)
    assert network_bytes() is None or all(r.network_rx_bytes is not None for r in rows)
    assert disk_limits("self") is not None


def test_the_sampler_never_raises_on_a_vanished_process():
    sampler = IoCounterSampler("gone", pid=2**22 + 12345, interval_s=0.05)
    assert sampler.sample_once() is not None or sampler.samples() == []
    assert isinstance(sampler.stop(), list)


GOLDEN = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize("name", ["spark-demo-trace.json.gz", "tensorflow-fit-trace.json.gz"])
def test_more_of_any_resource_on_recorded_jobs_is_never_slower_without_a_reason(name: str):
    trace = tr.load_trace(GOLDEN / name)
    predictor = _predictor(trace)
    b = predictor.baseline
    for changes in ({"network": b.network_bandwidth * 10}, {"disk": b.disk_bandwidth * 4}, {"cpu_speed": 2.0},
                    {"cores": b.cores_per_executor * 2}, {"executors": b.executors * 2},
                    {"memory": (b.memory_bytes or 1 << 30) * 2}):
        prediction = predictor.predict(Changes(changes), band=False)
        slower = prediction.crystalperf.runtime_s > prediction.baseline_runtime_s * 1.01
        assert not slower or any("slower" in n for n in prediction.notes), (name, changes, prediction.notes)


@pytest.mark.parametrize("row", [{"network_rx_bytes": 1e308}, {"storage_read_bytes": -1.0},
                                 {"disk_read_limit": 1e-300}, {"disk_write_limit": 0.0}])
def test_counters_out_of_the_kernels_range_are_refused_with_the_file_named(tmp_path: Path, row: dict):
    import json

    doc = json.loads(_network_trace([]).to_json())
    doc["io"] = [{"t": 1.0, **row}]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInputError, match="io.0"):
        tr.load_trace(path)
