"""A standalone Flink cluster whose two TaskManagers are hosts of their own: each in a network namespace, on a
veth link shaped to 50 Mbit/s (bench.cluster); the JobManager and the client run in this namespace. The
reporter in every process writes its part; the TaskManagers' parts carry their samples and their host, and
merge into one trace and one report."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cluster import FlinkCluster, Link, Network, leftovers, unavailable
from crystalperf.integrations import flink as cpflink

from .reports import plumbing_top_functions
from .sql_jobs import batch_table_env, create_keyed_tables, run_on_cluster

pytestmark = pytest.mark.slow

RATE_MBIT = 50


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlinkCluster]:
    pytest.importorskip("pyflink")
    reason = unavailable()
    if reason:
        pytest.skip(f"no network namespaces here: {reason}")
    root = tmp_path_factory.mktemp("netns-flink")
    with Network(["t0", "t1"], link=Link(rate_mbit=RATE_MBIT)) as net, \
            FlinkCluster(net, root, out=root / "out") as flink:
        yield flink
    assert leftovers(net.prefix) == []


def test_taskmanagers_in_namespaces_report_from_their_hosts(cluster: FlinkCluster, tmp_path: Path) -> None:
    from pyflink.common import Configuration

    assert cluster.out is not None
    # Each TaskManager registered from its own namespace, at its own address.
    registered = " ".join(tm["path"] for tm in cluster.taskmanagers())
    assert all(host in registered for host in cluster.hosts), registered

    config = Configuration()
    for key, value in cluster.client_config().items():
        config.set_string(key, value)
    env = batch_table_env(config, parallelism=2)
    create_keyed_tables(env, 50000, keys=100)
    statement = "INSERT INTO snk SELECT k, SUM(SQRT(v * v + 1)) FROM src GROUP BY k"
    cpflink.record_plan(env, cluster.out, statement)
    run_on_cluster(env, statement, cluster.logs)

    # The JobManager and both TaskManagers write their part; a TaskManager (re)writes its part when it releases
    # the job's metrics, seconds after the job ended.
    deadline = time.monotonic() + 90
    while True:
        parts = cpflink.wait_for_metrics(cluster.out, parts=3, timeout_s=90)
        by_host = _samples_by_host(parts)
        # both chains' final values in: the TaskManagers rewrite their parts as they release the job's metrics
        chains = len(cpflink.read_metrics(parts[0]).operations) if parts else 0
        if (set(cluster.hosts) <= {h for h, n in by_host.items() if n} and chains == 2) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(parts) == 3
    # Every TaskManager host sampled the job's threads.
    assert set(by_host) == set(cluster.hosts), by_host
    assert all(n > 0 for n in by_host.values()), by_host

    trace = cpflink.read_metrics(parts[0])
    assert trace.samples is not None and sum(trace.samples.count) > 0
    # The merged trace names the hosts and TaskManagers the subtasks ran on.
    assert set(trace.environment.hosts) == set(cluster.hosts), trace.environment.hosts
    assert {e.host for e in trace.environment.executors} == set(cluster.hosts)
    ran_on = {task.host for op in trace.iter_operations() for task in op.tasks}
    assert ran_on == set(cluster.hosts), ran_on
    # The JobManager's part says what the cluster had: a slot on each TaskManager.
    assert (trace.environment.cluster_slots, trace.environment.cluster_workers) == (2, 2)
    cpflink.finish(parts[-1], tmp_path)
    report = json.loads((tmp_path / "crystalperf-report.json").read_text())
    assert {op["id"] for op in report["operations"]} >= {"chain0", "chain1"}
    assert plumbing_top_functions(report) == []


def test_a_larger_parallelism_takes_the_taskmanager_the_job_left_idle(cluster: FlinkCluster) -> None:
    """At parallelism 1 the job runs on one TaskManager; the trace still knows the cluster had two of one slot each,
    so parallelism 2 is predicted with the second TaskManager's CPUs, and the prediction says so."""
    from pyflink.common import Configuration

    from crystalperf.core.analysis import analyze
    from crystalperf.core.attribution.classify import KeywordClassifier
    from crystalperf.core.predict import Changes, Predictor

    assert cluster.out is not None
    config = Configuration()
    for key, value in cluster.client_config().items():
        config.set_string(key, value)
    env = batch_table_env(config, parallelism=1)
    create_keyed_tables(env, 50000, keys=100)
    job = run_on_cluster(env, "INSERT INTO snk SELECT k, SUM(SQRT(v * v + 1)) FROM src GROUP BY k", cluster.logs)
    # the JobManager's part and the one TaskManager's that ran it
    parts = cpflink.wait_for_metrics(cluster.out, job, parts=2, timeout_s=90)
    trace = cpflink.read_metrics(parts[0])
    assert len(trace.environment.executors) == 1, trace.environment.executors
    assert (trace.environment.cluster_slots, trace.environment.cluster_workers) == (2, 2)
    predictor = Predictor(analyze(trace, classifier=KeywordClassifier(), scenarios=[]).profile)
    prediction = predictor.predict(Changes({"parallelism": 2}), band=False)
    assert any("take 2 of the 2 workers registered with the cluster" in n for n in prediction.notes), prediction.notes


def _samples_by_host(parts: list[Path]) -> dict[str, int]:
    """Sample rows in each TaskManager's part, by the host its scopes name (Flink's ``<host>`` variable), read
    as the reporter wrote them (the merged trace pools the samples of all parts)."""
    found: dict[str, int] = {}
    for part in parts:
        document = json.loads(part.read_text())
        hosts = {scope.get("host") for scope in document.get("scopes", []) if scope.get("tm_id")}
        for host in hosts - {None}:
            found[host] = found.get(host, 0) + len(document.get("samples", []))
    return found
