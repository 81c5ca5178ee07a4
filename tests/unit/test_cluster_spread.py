"""What a larger parallelism spreads over: the cluster's registered slots and workers beside the ones the job used
(trace 1.10), read from the Flink JobManager's part, turned into more CPUs by hand-computed rules."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.errors import BadInputError
from crystalperf.core.predict.base import Baseline, Changes
from crystalperf.core.predict.knobs import FlinkSettings
from crystalperf.core.predict.streaming import Chain, StreamingCpu
from crystalperf.core.profile.machine import ClusterSpread, cluster_spread
from crystalperf.integrations.flink import read_metrics

from .helpers import make_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "flink-cluster-groupby"
CLUSTER_JOB = "2bd6c44ddf7c5638605ebf174ae3563d"
JM_PART = f"crystalperf-flink-{CLUSTER_JOB}.28777.json"  # the job scope only
TM_PART = f"crystalperf-flink-{CLUSTER_JOB}.29404.json"  # a TaskManager's: subtasks ran there


def _trace(workers: list[tuple[str, str | None]], cpu_count: int = 2, slots: int | None = 8,
           registered: int | None = 4) -> tr.Trace:
    op = tr.Operation(id="op", name="op", start=0.0, end=1.0)
    return make_trace([op], executors=[tr.Executor(id=i, host=h) for i, h in workers], cpu_count=cpu_count,
                      cluster_slots=slots, cluster_workers=registered)


def test_fill_first_spread_by_hand() -> None:
    # 8 slots on 4 workers: 2 each; the job ran on 1 worker (host a) with 2 CPUs at 2 slots
    spread = cluster_spread(_trace([("tm1", "a")]), traced=2)
    assert spread == ClusterSpread(slots_per_worker=2, workers=4, used=1, cpus=2.0)
    assert [spread.workers_for(s) for s in (1, 2, 3, 4, 7, 8, 16)] == [1, 1, 2, 2, 4, 4, 4]
    assert spread.factor(5) == 3.0 and spread.factor(1) == 1.0
    assert spread.note(2) is None
    note = spread.note(6)
    assert note is not None and "take 3 of the 4 workers" in note and "6 CPUs instead of 2" in note


def test_no_spread_where_the_trace_cannot_tell_the_placement() -> None:
    assert cluster_spread(_trace([("tm1", "a")], slots=None), traced=2) is None  # the cluster unknown
    assert cluster_spread(_trace([("tm1", "a"), ("tm2", "a")]), traced=4) is None  # workers share a host
    assert cluster_spread(_trace([("tm1", None)]), traced=2) is None  # host unknown
    # 2 slots per worker, yet 2 slots ran on 2 workers: not the fill-first placement
    assert cluster_spread(_trace([("tm1", "a"), ("tm2", "b")]), traced=2) is None
    assert cluster_spread(_trace([("tm1", "a"), ("tm2", "b")]), traced=4) is not None


def test_the_machine_limit_takes_the_cpus_of_the_workers_a_parallelism_takes() -> None:
    # one chain of 8 CPU-s on one subtask, the process 12 CPU-s on the 1 CPU of the one worker it used: the machine
    # limit is 12 s; at parallelism 2 on 1-slot workers the second brings its CPU: threads 4 s, machine 12 / 2 = 6 s
    spread = ClusterSpread(slots_per_worker=1, workers=2, used=1, cpus=1.0)
    model = StreamingCpu([Chain([8.0])], process_cpu_s=12.0, cpu_count=1, runtime_s=12.0, spread=spread)
    assert model.predict(Changes({"parallelism": 2})) == pytest.approx(6.0)
    assert model.predict(Changes({"parallelism": 4})) == pytest.approx(6.0)  # only 2 workers registered
    without = StreamingCpu([Chain([8.0])], process_cpu_s=12.0, cpu_count=1, runtime_s=12.0)
    assert without.predict(Changes({"parallelism": 2})) == pytest.approx(12.0)


def test_the_settings_say_whether_the_cluster_holds_the_slots() -> None:
    trace = _trace([("tm1", "a")], slots=4, registered=2)
    trace.application.framework = "flink"
    settings = FlinkSettings(trace, Baseline.of(trace))
    assert settings.requirements({"parallelism.default": 4}) == [
        "needs 4 task slots: the cluster had 4 on 2 TaskManagers"]
    assert settings.requirements({"parallelism.default": 8}) == [
        "needs 8 task slots: the cluster had 4 on 2 TaskManagers (more TaskManagers or taskmanager.numberOfTaskSlots)"]


def _cluster_copy(tmp_path: Path, part: str, cluster: object) -> Path:
    target = tmp_path / "parts"
    shutil.copytree(DATA, target)
    doc = json.loads((target / part).read_text())
    doc["cluster"] = cluster
    (target / part).write_text(json.dumps(doc))
    return target


def test_the_jobmanagers_part_gives_the_cluster(tmp_path: Path) -> None:
    parts = _cluster_copy(tmp_path, JM_PART, {"task_slots": 6, "taskmanagers": 3})
    env = read_metrics(parts / TM_PART).environment
    assert (env.cluster_slots, env.cluster_workers) == (6, 3)


def test_a_process_that_ran_subtasks_is_a_mini_cluster_whose_slots_say_nothing(tmp_path: Path) -> None:
    parts = _cluster_copy(tmp_path, TM_PART, {"task_slots": 6, "taskmanagers": 3})
    env = read_metrics(parts / TM_PART).environment
    assert (env.cluster_slots, env.cluster_workers) == (None, None)


@pytest.mark.parametrize("cluster", [[6, 3], {"task_slots": 6}, {"task_slots": -1, "taskmanagers": 3}])
def test_a_malformed_cluster_is_one_clear_error(tmp_path: Path, cluster: object) -> None:
    parts = _cluster_copy(tmp_path, JM_PART, cluster)
    with pytest.raises(BadInputError, match="malformed cluster") as found:
        read_metrics(parts / JM_PART)
    assert JM_PART in str(found.value)


def test_a_batch_job_on_one_worker_gets_the_cores_of_the_worker_a_parallelism_adds() -> None:
    from .test_ceilings import cpu_job, predictor

    # ten 1 s tasks on one slot; the process used 19 s of CPU on its host's 2 cores, 9 s of it beside the tasks
    trace = cpu_job()
    trace.environment.executors = [tr.Executor(id="tm1", host="h", cores=1)]
    trace.environment.scaling = ["parallelism"]
    trace.environment.cpu_count = 2
    alone = predictor(trace).predict(Changes({"parallelism": 2}), band=False)
    # without the cluster's figures the second slot shares the two cores: 19 s over 2 cores
    assert alone.crystalperf.runtime_s == pytest.approx(9.5)
    trace.environment.cluster_slots, trace.environment.cluster_workers = 2, 2
    spread = predictor(trace).predict(Changes({"parallelism": 2}), band=False)
    # the second worker brings its 2 cores and spends its own 9 s beside its tasks: 28 s over 4 cores = 7 s (the
    # replay on two slots alone: 5 s); the tasks on it share no host, so no contention note
    assert spread.crystalperf.runtime_s == pytest.approx(7.0)
    assert spread.replay.runtime_s == pytest.approx(5.0)
    assert any("take 2 of the 2 workers" in n for n in spread.notes)
    assert not any(n.startswith("task slots per host") for n in spread.notes)
