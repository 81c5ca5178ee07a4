"""Ceilings (crystalperf.core.profile.shared, crystalperf.core.predict.ceilings): what the tasks share bounds every
scenario from below. Hand-computed cases: one operation, its processes' counters every second."""

from __future__ import annotations

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.predict.settings import search_settings
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.profile.outside import outside_time
from crystalperf.core.profile.shared import cold_task_cpu, shared_machine

from .helpers import make_trace, op, task


def io_rows(seconds: int, *, process_cores: float, other_cores: float = 0.0, cpus: int = 2,
            limit: float | None = 2.0, read_rate: float = 0.0, read_limit: float | None = None,
            busiest: float | None = None) -> list[tr.IoSample]:
    """One counter row a second: the process kept ``process_cores`` busy on average, other processes
    ``other_cores``; ``busiest``: the cores the host had busy in the first second (the rest evenly slower)."""
    rate = process_cores + other_cores
    first = busiest if busiest is not None else rate
    rest = (rate * seconds - first) / (seconds - 1)

    def busy(t: int) -> float:
        return 0.0 if t == 0 else first + rest * (t - 1)

    return [tr.IoSample(t=float(t), source="driver", host="h",
                        process_cpu_s=busy(t) * process_cores / rate if rate else 0.0,
                        host_cpu_busy_s=busy(t), host_cpu_s=cpus * t, host_cpus=cpus,
                        cpu_limit=limit, storage_read_bytes=read_rate * t, storage_write_bytes=0.0,
                        disk_read_limit=read_limit)
            for t in range(seconds + 1)]


def cpu_job(process_cores: float = 1.9, other_cores: float = 0.0, busiest: float | None = 2.0,
            slots: int = 1) -> tr.Trace:
    """Ten 1 s tasks one after another, each 1 s of CPU, on ``slots`` task slots; the process used
    ``process_cores``, and the host had ``busiest`` cores busy in its busiest second."""
    tasks = [task(f"t{i}", i, i + 1, cpu_time_s=1.0, run_time_s=1.0) for i in range(10)]
    trace = make_trace([op("s", 0, 10, tasks=tasks)], total_slots=slots, cores_per_executor=slots,
                       executors=[tr.Executor(id="driver", cores=slots)])
    trace.io = io_rows(10, process_cores=process_cores, other_cores=other_cores, busiest=busiest)
    return trace


def predictor(trace: tr.Trace) -> Predictor:
    return Predictor(build_profile(trace, KeywordClassifier()))


def test_the_shared_machine_is_read_from_the_processes_counters() -> None:
    machine = shared_machine(build_profile(cpu_job(), KeywordClassifier()))
    assert machine is not None
    assert machine.cores == 2 and machine.hosts == 1 and machine.limited_by == "cpus"
    assert machine.busy_cores == pytest.approx(1.9) and machine.peak_utilization == pytest.approx(1.0)
    # the tasks' 10 s of CPU over 10 s; the rest of the process's 19 s beside them
    assert machine.background_cores == pytest.approx(0.9)
    share = machine.shares["s"]
    assert share.cpu_s == pytest.approx(19.0) and share.task_cpu_s == pytest.approx(10.0)
    assert share.background_cpu_s == pytest.approx(9.0)


def test_a_slot_more_on_cores_the_processes_already_use_gains_what_the_cores_allow() -> None:
    p = predictor(cpu_job())
    # replayed on two slots the tasks would take 5 s; two tasks side by side want 2 cores beside the 0.9 the rest
    # of the process used, 2.9 on 2: 1.45 s each, 7.25 s; their 19 s of CPU on 2 cores take 9.5 s, 2.25 s more
    prediction = p.predict(Changes({"cores": 2}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(9.5)
    assert prediction.replay.runtime_s == pytest.approx(5.0)
    assert prediction.ceilings["cores"][0] == pytest.approx(2.25)
    assert any(note.startswith("ceiling: the cores") for note in prediction.notes)
    # nothing changed is the traced run
    assert p.predict(Changes(), band=False).crystalperf.runtime_s == pytest.approx(10.0)


def test_a_slot_more_in_a_process_whose_kernel_first_touched_its_heap_pays_it_twice() -> None:
    trace = cpu_job(process_cores=1.6)
    before = predictor(trace).predict(Changes({"cores": 2}), band=False).crystalperf.runtime_s
    # of the process's 16 CPU-s, 1.6 in the kernel on 400,000 page faults (schema 1.13)
    trace.environment.executors[0].thread_cpu = tr.ThreadCpu(task=10.0, jit=6.0, kernel=1.6, minor_faults=400_000)
    prediction = predictor(trace).predict(Changes({"cores": 2}), band=False)
    # 16 CPU-s on 2 cores; two slots side by side in the one process take the kernel's tenth twice: 17.6 on 2
    assert (before, prediction.crystalperf.runtime_s) == pytest.approx((8.0, 8.8))
    assert any(n.startswith("page faults: the task processes spent 1.60 CPU-s in the kernel") for n in prediction.notes)
    assert predictor(trace).predict(Changes(), band=False).crystalperf.runtime_s == pytest.approx(10.0)


def test_only_the_task_threads_kernel_time_grows_with_the_slots_side_by_side() -> None:
    trace = cpu_job(process_cores=1.6)
    # the same 1.6 kernel CPU-s, of which the task threads took 0.4 (the rest: the compilers', the collector's)
    trace.environment.executors[0].thread_cpu = tr.ThreadCpu(task=10.0, jit=6.0, kernel=1.6, minor_faults=400_000,
                                                            task_kernel=0.4)
    prediction = predictor(trace).predict(Changes({"cores": 2}), band=False)
    # 16 CPU-s and the task threads' 0.4 once more, on 2 cores: 8.2 s
    assert prediction.crystalperf.runtime_s == pytest.approx(8.2)
    assert any(n.startswith("page faults: the task threads spent 0.40 CPU-s in the kernel over the job (their "
                            "processes 1.60, 400,000 page faults") for n in prediction.notes), prediction.notes
    # none of it in the task threads: nothing grows
    trace.environment.executors[0].thread_cpu = tr.ThreadCpu(task=10.0, jit=6.0, kernel=1.6, minor_faults=400_000,
                                                            task_kernel=0.0)
    flat = predictor(trace).predict(Changes({"cores": 2}), band=False)
    assert flat.crystalperf.runtime_s == pytest.approx(8.0)
    assert not any(n.startswith("page faults") for n in flat.notes)


def test_work_a_gpu_takes_over_leaves_the_cores_with_it() -> None:
    trace = cpu_job()
    trace.operations[0].attributes["placement"] = "device"
    p = predictor(trace)
    # each 1 s task's CPU 4x faster on the GPU: 2.5 s replayed; the cores' floor shrinks with the work it moved
    # (19 s of CPU / 4 on the cores the process had), so it does not hold the job at the traced 10 s
    prediction = p.predict(Changes({"device": "gpu", "gpu_speedup": 4.0}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(2.5)
    # an operation the GPU would not run keeps its CPU and its floor
    host = cpu_job()
    host.operations[0].attributes["placement"] = "host"
    assert predictor(host).predict(Changes({"device": "gpu", "gpu_speedup": 4.0}),
                                   band=False).crystalperf.runtime_s == pytest.approx(10.0)


def test_a_slot_more_beside_threads_that_do_not_follow_the_tasks_waits_for_what_they_keep() -> None:
    """Eight 1 s tasks one after another, each 0.8 s on a core and 0.2 s waiting for one (the cores loaded 1.25
    times over), in a process that kept 0.6 cores busy beside them (the compilers, the driver planning: no
    collector's pauses, work that does not follow the tasks). Two side by side want 2 x 0.8 x 1.25 = 2 cores beside
    the 0.6: 2.6 on 2, 1.3 times over: 1.04 s each, 4 waves, 4.16 s; the process's 11.2 s of CPU on 2 cores take
    5.6 s. Taking the whole load to follow the tasks (2.5 times over) would leave them at 2 s each: 8 s, no gain."""
    tasks = [task(f"t{i}", i, i + 1, cpu_time_s=0.8, cpu_wait_s=0.2, run_time_s=1.0) for i in range(8)]
    trace = make_trace([op("s", 0, 8, tasks=tasks)], total_slots=1, cores_per_executor=1,
                       executors=[tr.Executor(id="driver", cores=1)])
    trace.io = io_rows(8, process_cores=1.4, busiest=2.0)
    prediction = predictor(trace).predict(Changes({"cores": 2}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(5.6)
    assert prediction.ceilings["cores"][0] == pytest.approx(5.6 - 4.16)
    # one slot fewer than two: the same process, the same answer back
    assert predictor(trace).predict(Changes(), band=False).crystalperf.runtime_s == pytest.approx(8.0)


def test_more_cores_on_the_host_lift_the_ceiling() -> None:
    p = predictor(cpu_job())
    # four slots on four cores: 19 s of CPU over 4 cores, 4.75 s (the replay's 3 waves take 3 s)
    prediction = p.predict(Changes({"cores": 4, "host_cpus": 4}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(4.75)


def test_cores_kept_no_busier_than_a_run_that_wanted_more_ever_got() -> None:
    # two slots and 0.9 cores of other threads wanted 2.9 cores, and the host never had more than 1.9 of its 2
    # busy in any second: the machine stops there, so two more slots find no more
    p = predictor(cpu_job(busiest=None, slots=2))
    assert p.predict(Changes({"cores": 4}), band=False).crystalperf.runtime_s == pytest.approx(10.0)


def test_a_run_its_one_slot_held_back_shows_no_ceiling_below_all_the_cores() -> None:
    # one thread kept one of two cores busy: its busiest second is its own demand, not where the machine stops, so
    # a second slot gets the second core (10 s of CPU on 2 cores, as the replay's two slots)
    p = predictor(cpu_job(process_cores=1.0, busiest=None))
    prediction = p.predict(Changes({"cores": 2}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(5.0)
    assert not any(note.startswith("ceiling: the cores") for note in prediction.notes)


def test_the_band_spans_an_operation_no_busier_than_it_was() -> None:
    # the process kept 1.5 of 2 cores busy, 2 in the busiest second: 15 s of CPU on 2 cores take 7.5 s, or, no
    # busier than traced, 10 s
    prediction = predictor(cpu_job(process_cores=1.5)).predict(Changes({"cores": 2}))
    assert prediction.crystalperf.runtime_s == pytest.approx(7.5)
    assert prediction.crystalperf.model_high_s == pytest.approx(10.0)


def test_cores_other_processes_keep_busy_are_not_the_jobs() -> None:
    # the process used 1 core and another process 1: a second slot finds no free core
    p = predictor(cpu_job(process_cores=1.0, other_cores=1.0))
    assert p.predict(Changes({"cores": 2}), band=False).crystalperf.runtime_s == pytest.approx(10.0)


def test_a_job_with_cores_to_spare_is_not_held_back() -> None:
    # the process used 1 of 2 cores (no background work): the second slot halves the run
    p = predictor(cpu_job(process_cores=1.0))
    prediction = p.predict(Changes({"cores": 2}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(5.0)
    assert not prediction.ceilings


def test_traces_without_cpu_counters_predict_as_before() -> None:
    trace = cpu_job()
    trace.io = []
    prediction = predictor(trace).predict(Changes({"cores": 2}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(5.0)


def disk_job() -> tr.Trace:
    """Four 5 s tasks on two slots reading 50 MB through a device limited to 5 MB/s."""
    tasks = [task(f"t{i}", 5 * (i // 2), 5 * (i // 2) + 5, run_time_s=5.0, disk_time_s=5.0) for i in range(4)]
    trace = make_trace([op("scan", 0, 10, tasks=tasks)], total_slots=2, cores_per_executor=2,
                       executors=[tr.Executor(id="driver", cores=2)], properties={"spark.master": "local[2]"})
    trace.io = io_rows(10, process_cores=0.2, read_rate=5e6, read_limit=5e6)
    return trace


def test_more_slots_read_no_faster_than_the_device() -> None:
    p = predictor(disk_job())
    prediction = p.predict(Changes({"cores": 4}), band=False)
    # one wave of four would take 5 s; 50 MB at 5 MB/s take 10 s
    assert prediction.replay.runtime_s == pytest.approx(5.0)
    assert prediction.crystalperf.runtime_s == pytest.approx(10.0)
    assert prediction.ceilings["device"][1] == pytest.approx(2.0)  # twice the device would let the wave run
    assert any(note.startswith("ceiling: the storage device") for note in prediction.notes)


def test_settings_advice_names_the_ceiling_and_what_it_needs() -> None:
    # local mode: more slots (local[N]) share the one machine's device
    p = predictor(disk_job())
    search = search_settings(p)
    assert all(s.prediction.speedup < 1.05 for s in search.suggestions)
    assert search.blocked is not None and search.blocked.kind == "device"
    assert "disk" in search.blocked.prediction.changes
    assert search.blocked.prediction.crystalperf.runtime_s < 10.0 * 0.95
    assert any("held back by the device ceiling" in line for line in search.advice())
    assert search.as_dict()["blocked"]["ceiling"] == "device"


def test_fewer_subtasks_on_saturated_cores_get_the_cores_they_waited_for() -> None:
    """Two subtasks of 6 s, 3 s of CPU each, on two cores the process kept busy: half their time was waiting for a
    core. One subtask doing all the work gets a core to itself: 6 s of CPU, the traced span — not twice it."""
    tasks = [task(f"p{i}", 0, 6, cpu_time_s=3.0, run_time_s=6.0) for i in range(2)]
    trace = make_trace([op("chain", 0, 6, tasks=tasks, parallelism=2)], total_slots=2, scaling=["parallelism"])
    trace.application.framework = "flink"
    trace.io = io_rows(6, process_cores=2.0)
    prediction = predictor(trace).predict(Changes({"parallelism": 1}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(6.0)
    assert prediction.replay.runtime_s == pytest.approx(12.0)


def subtask_samples(threads: int, seconds: int = 6, subtasks: int = 2) -> tr.StackSamples:
    """Every 0.1 s, each subtask's ``threads`` threads (the task thread, then source fetchers) sampled runnable in a
    parse: ``threads`` x 10 samples a second per subtask."""
    roles: list[str | None] = [None, *["fetcher"] * (threads - 1)]
    keys = [tr.SampleKey(operation="chain", task=f"p{i}", thread=role) for i in range(subtasks) for role in roles]
    rows = [(k, b) for k in range(len(keys)) for b in range(seconds)]
    return tr.StackSamples(origin=0.0, frames=[tr.Frame(name="org.example.Parser.parse", language="java")],
                           stacks=[[0]], states=["runnable"], keys=keys, key=[k for k, _ in rows],
                           bucket=[b for _, b in rows], stack=[0] * len(rows), count=[10] * len(rows))


def test_a_subtask_whose_threads_ran_side_by_side_waited_for_a_core_in_each() -> None:
    """Two subtasks of 6 s, each a task thread and a source's fetcher thread that were runnable all the time, 6 s of
    CPU each (3 s a thread), on two cores: 24 s runnable for 12 s of CPU, the cores loaded twice over. One subtask
    doing all the work loads them once over: its two threads take 12 s of CPU in 6 s, side by side. Counting one
    thread a subtask (12 s runnable, as much as the CPU time) finds no wait and puts the two subtasks' 6 s spans in
    a row: 12 s."""
    tasks = [task(f"p{i}", 0, 6, cpu_time_s=6.0, run_time_s=6.0) for i in range(2)]
    trace = make_trace([op("chain", 0, 6, tasks=tasks, parallelism=2)], total_slots=2, scaling=["parallelism"],
                       samples=subtask_samples(threads=2))
    trace.application.framework = "flink"
    trace.io = io_rows(6, process_cores=2.0)
    prediction = predictor(trace).predict(Changes({"parallelism": 1}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(6.0)
    assert prediction.replay.runtime_s == pytest.approx(12.0)
    assert any("waited 12.00 s for a core" in note for note in prediction.notes)
    # the same threads sampled in half the rounds, the budget having stretched the interval: the same waits
    thinned = subtask_samples(threads=2)
    thinned.count = [5] * len(thinned.count)
    trace.samples = thinned
    trace.hook = tr.HookCost(processes=[tr.HookProcess(source="taskmanager:1", cpu_s=0.1, samples_taken=60,
                                                       samples_planned=120)])
    assert predictor(trace).predict(Changes({"parallelism": 1}), band=False).crystalperf.runtime_s == pytest.approx(6.0)
    # the same subtasks sampled in their task threads alone: one thread each, never waiting
    trace.samples, trace.hook = subtask_samples(threads=1), None
    assert predictor(trace).predict(Changes({"parallelism": 1}), band=False).crystalperf.runtime_s == pytest.approx(12.0)


def process_rows(source: str, host: str, *, process_cores: float, host_busy_cores: float, limit: float,
                 seconds: int = 10, cpus: int = 2) -> list[tr.IoSample]:
    """One counter row a second of one process that kept ``process_cores`` busy on a host whose CPUs were
    ``host_busy_cores`` busy (it included)."""
    return [tr.IoSample(t=float(t), source=source, host=host, process_cpu_s=process_cores * t,
                        host_cpu_busy_s=host_busy_cores * t, host_cpu_s=cpus * t, host_cpus=cpus, cpu_limit=limit)
            for t in range(seconds + 1)]


def cluster_job(driver_host: str = "vm") -> tr.Trace:
    """Ten 1 s tasks one after another on one executor of one core under a one-core quota, on a 2-CPU machine:
    each task 0.5 s of CPU, the executor's process a whole core (5 s beside its tasks), the driver half a core —
    on the executor's machine (its host name) or on one of its own."""
    tasks = [task(f"t{i}", i, i + 1, cpu_time_s=0.5, run_time_s=1.0) for i in range(10)]
    for t in tasks:
        t.executor = "0"
    trace = make_trace([op("s", 0, 10, tasks=tasks)], total_slots=1, cores_per_executor=1,
                       hosts=["10.0.0.2"], executors=[tr.Executor(id="0", host="10.0.0.2", cores=1)])
    shared = driver_host == "vm"
    trace.io = (process_rows("driver", driver_host, process_cores=0.5, host_busy_cores=1.5 if shared else 0.5,
                             limit=2.0)
                + process_rows("executor:0", "vm", process_cores=1.0, host_busy_cores=1.5 if shared else 1.0,
                               limit=1.0))
    return trace


def test_an_executor_more_on_the_machine_its_driver_shares_gets_what_the_machine_has_left() -> None:
    machine = shared_machine(build_profile(cluster_job(), KeywordClassifier()))
    assert machine is not None and machine.one_machine
    assert machine.cores == 1 and machine.host_cpus == 2 and machine.other_cores == pytest.approx(0.5)
    # two executors: 10 s of task CPU, and the second JVM's own 5 s beside its tasks as the first's: 15 s on
    # what the machine's 2 CPUs leave beside the driver's half core, 1.5: 10 s (the replay's two slots take 5 s)
    prediction = predictor(cluster_job()).predict(Changes({"executors": 2}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(10.0)
    assert any("share one machine's 2 CPUs" in note for note in prediction.notes)


def test_an_executor_more_on_a_machine_of_its_own_brings_its_core() -> None:
    # the driver elsewhere: the two executors have a core each, 15 s of CPU on 2 cores take 7.5 s
    trace = cluster_job(driver_host="edge")
    machine = shared_machine(build_profile(trace, KeywordClassifier()))
    assert machine is not None and not machine.one_machine
    assert predictor(trace).predict(Changes({"executors": 2}), band=False).crystalperf.runtime_s == pytest.approx(7.5)


@pytest.mark.parametrize(("addresses", "cores"), [(["10.0.0.2", "10.0.0.3"], 2.0), (["10.0.0.2", "10.0.0.2"], 1.0)])
def test_quotas_of_executors_at_addresses_of_their_own_add_up(addresses: list[str], cores: float) -> None:
    # two one-core quotas on one 2-CPU machine: namespaced hosts (an address each) have one each; two executors a
    # worker started at one address share its quota
    tasks = [task(f"t{i}", i, i + 1, cpu_time_s=0.5) for i in range(4)]
    trace = make_trace([op("s", 0, 10, tasks=tasks)], total_slots=2, cores_per_executor=1,
                       executors=[tr.Executor(id=str(i), host=a, cores=1) for i, a in enumerate(addresses)])
    trace.io = [row for i in range(2)
                for row in process_rows(f"executor:{i}", "vm", process_cores=0.5, host_busy_cores=1.0, limit=1.0)]
    machine = shared_machine(build_profile(trace, KeywordClassifier()))
    assert machine is not None and machine.hosts == 1 and machine.cores == pytest.approx(cores)


def startup_and_scan(startup_read: float) -> tr.Trace:
    """10 s of start-up in which the process reads ``startup_read`` bytes, then four 5 s tasks on two slots
    reading 50 MB through a device limited to 5 MB/s."""
    tasks = [task(f"t{i}", 10 + 5 * (i // 2), 15 + 5 * (i // 2), run_time_s=5.0, disk_time_s=5.0) for i in range(4)]
    trace = make_trace([op("scan", 10, 20, tasks=tasks)], start=0.0, total_slots=2, cores_per_executor=2,
                       executors=[tr.Executor(id="driver", cores=2)], properties={"spark.master": "local[2]"})
    rows = io_rows(20, process_cores=0.2, read_limit=5e6)
    for row in rows:
        row.storage_read_bytes = startup_read * min(row.t, 10.0) / 10.0 + 5e6 * max(0.0, row.t - 10.0)
    trace.io = rows
    return trace


def test_reads_outside_every_operation_follow_the_device() -> None:
    outside = outside_time(build_profile(startup_and_scan(25e6), KeywordClassifier()))
    assert outside is not None and len(outside.gaps) == 1
    assert outside.seconds == pytest.approx(10.0) and outside.read_bytes == pytest.approx(25e6)
    # 25 MB at 5 MB/s took 5 of the 10 s; at 10 MB/s they take 2.5 s, the other 5 s stay
    assert outside.disk_seconds(5e6) == pytest.approx(5.0)
    assert outside.seconds_at(5e6, 10e6) == pytest.approx(7.5)
    assert outside.seconds_at(5e6, 1e6) == pytest.approx(30.0)

    faster = Changes({"disk": 10e6})
    reading, idle = predictor(startup_and_scan(25e6)), predictor(startup_and_scan(0.0))
    assert reading.outside_change(faster) == pytest.approx(-2.5) and idle.outside_change(faster) == 0.0
    with_reads, without = reading.predict(faster, band=False), idle.predict(faster, band=False)
    # the scan's 50 MB are scaled alike in both: the start-up's reads are not spread over its tasks
    assert with_reads.crystalperf.runtime_s == pytest.approx(without.crystalperf.runtime_s - 2.5)
    assert any(note.startswith("outside the operations: the job's processes read") for note in with_reads.notes)
    # slots change nothing outside the operations
    assert reading.outside_change(Changes({"cores": 4})) == 0.0


def test_short_gaps_between_operations_are_not_outside_time() -> None:
    tasks = [task("a", 0, 4, run_time_s=4.0), task("b", 4.3, 8, run_time_s=3.7)]
    trace = make_trace([op("s1", 0, 4, tasks=tasks[:1]), op("s2", 4.3, 8, tasks=tasks[1:])], end=9.0)
    trace.io = io_rows(9, process_cores=0.5, read_rate=1e6)
    outside = outside_time(build_profile(trace, KeywordClassifier()))
    assert outside is not None
    assert [(g.start, g.end) for g in outside.gaps] == [(8.0, 9.0)]  # the 0.3 s between the stages is not one
    assert outside.read_bytes == pytest.approx(1e6)


def paced_source(idle_s: float) -> tr.Trace:
    """A Flink source chain of two 10 s subtasks that waited ``idle_s`` each for their input (a rate limit) and
    computed the rest."""
    tasks = [task(f"s#{i}", 0, 10, run_time_s=10.0, cpu_time_s=10.0 - idle_s, idle_time_s=idle_s) for i in range(2)]
    trace = make_trace([op("source", 0, 10, tasks=tasks, parallelism=2,
                           attributes={tr.ATTRIBUTE_WAITS_ON: "its input (rate-limited or empty)"})],
                       total_slots=2, scaling=["parallelism"])
    trace.application.framework = "flink"
    return trace


def test_a_source_paced_by_its_input_gains_nothing_from_more_subtasks() -> None:
    # 8 s of each 10 s waited for the input: four subtasks take a quarter of the input each at a quarter of its
    # rate, 10 s; their 2 s of work each (4 s in all, 1 s a subtask) fits in that pace
    paced = predictor(paced_source(idle_s=8.0))
    assert paced.predict(Changes({"parallelism": 4}), band=False).crystalperf.runtime_s == pytest.approx(10.0)
    # a source that mostly computed spreads its work: 2 s of waiting and 8 s of work each, 20 s over four subtasks
    computing = predictor(paced_source(idle_s=2.0))
    assert computing.predict(Changes({"parallelism": 4}), band=False).crystalperf.runtime_s == pytest.approx(5.0)


def test_a_source_paced_by_its_input_gains_nothing_from_faster_cores_until_its_work_outgrows_the_pace() -> None:
    paced = predictor(paced_source(idle_s=8.0))
    assert paced.predict(Changes({"cpu_speed": 2.0}), band=False).crystalperf.runtime_s == pytest.approx(10.0)
    # a tenth of the speed: 20 s of work a subtask, past the 10 s the input took
    assert paced.predict(Changes({"cpu_speed": 0.1}), band=False).crystalperf.runtime_s == pytest.approx(20.0)


def test_an_executor_more_on_the_same_host_brings_its_own_jvm_but_no_core() -> None:
    # hosts=1: the second executor shares the first one's one-core quota; its JVM pays its own 5 s beside its
    # tasks as the first did (the compilers warming the same code up): 10 + 5 s of CPU on that one core, 15 s,
    # slower than the traced 10 s; on a host of its own it brings its core (10 s, as above)
    prediction = predictor(cluster_job()).predict(Changes({"executors": 2, "hosts": 1}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(15.0)
    assert any(note.startswith("ceiling: the cores") for note in prediction.notes)
    assert predictor(cluster_job()).predict(Changes({"executors": 2}), band=False).crystalperf.runtime_s == \
        pytest.approx(10.0)


def test_what_an_added_jvm_pays_for_itself_leaves_out_the_threads_that_follow_the_work() -> None:
    # the executor's 5 s beside its tasks split by thread kind: 2.5 s its netty threads moving the job's bytes, 2.5 s
    # its compilers; the second JVM on the same core brings the compilers' 2.5 s, not the bytes': 12.5 s
    trace = cluster_job()
    trace.environment.executors[0].thread_cpu = tr.ThreadCpu(task=5.0, network=2.5, jit=2.5)
    machine = shared_machine(build_profile(trace, KeywordClassifier()))
    assert machine is not None and machine.shares["s"].own_share == pytest.approx(0.5)
    prediction = predictor(trace).predict(Changes({"executors": 2, "hosts": 1}), band=False)
    assert prediction.crystalperf.runtime_s == pytest.approx(12.5)


def test_an_executor_more_runs_its_first_task_cold_again() -> None:
    # the executor's first task used 1.5 CPU-s, the other nine 0.5: 1 CPU-s of code run cold (interpreted until
    # compiled). Its process used 10 CPU-s: 6 in its tasks, 4 beside them. Two executors on machines of their own:
    # 6 s of task CPU, 1 s more for the second JVM's cold first task, 4 s beside each one's tasks: 15 s on 2 cores
    trace = cluster_job(driver_host="edge")
    trace.operations[0].tasks[0].metrics[tr.METRIC_CPU_TIME] = 1.5
    share = shared_machine(build_profile(trace, KeywordClassifier())).shares["s"]  # type: ignore[union-attr]
    assert share.cold_cpu_s == pytest.approx(1.0) and share.per_process_cpu_s == pytest.approx(4.0)
    assert predictor(trace).predict(Changes({"executors": 2}), band=False).crystalperf.runtime_s == pytest.approx(7.5)


def test_a_first_task_is_cold_only_beside_later_ones_on_its_process() -> None:
    def run(name: str, executor: str, start: float, cpu: float) -> tr.Task:
        found = task(name, start, start + 1, cpu_time_s=cpu)
        found.executor = executor
        return found

    # executor a: its first task (by start, not by order) 0.9 CPU-s; b: one task, nothing to be colder than; the
    # median of the four measured, 0.6
    tasks = [run("a2", "a", 2, 0.3), run("a1", "a", 0, 0.9), run("a3", "a", 4, 0.2), run("b1", "b", 0, 2.0),
             run("none", "c", 0, 0.0)]
    del tasks[-1].metrics[tr.METRIC_CPU_TIME]
    assert cold_task_cpu(op("s", 0, 5, tasks=tasks)) == pytest.approx(0.9 - 0.6)
    assert cold_task_cpu(op("s", 0, 5, tasks=tasks[3:4])) == 0.0
