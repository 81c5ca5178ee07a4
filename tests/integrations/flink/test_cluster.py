"""A standalone Flink cluster from the wheel's scripts (JobManager + 2 TaskManagers on 127.0.0.1, started by
bench.cluster without namespaces) with the reporter configured cluster-wide: the parts its processes write
merge into one trace and one report."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cluster import FlinkCluster, Network
from crystalperf.integrations import flink as cpflink

from .reports import plumbing_top_functions
from .sql_jobs import batch_table_env, create_keyed_tables, run_on_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FlinkCluster, Path]]:
    pytest.importorskip("pyflink")
    root = tmp_path_factory.mktemp("flink-cluster")
    out = root / "out"
    out.mkdir()
    with Network(["t0", "t1"], isolated=False) as net, FlinkCluster(net, root, out=out) as flink:
        yield flink, out


def test_cluster_job_yields_one_merged_report(cluster: tuple[FlinkCluster, Path], tmp_path: Path) -> None:
    from pyflink.common import Configuration

    flink, out = cluster
    config = Configuration()
    config.set_string("execution.target", "remote")
    config.set_string("rest.address", "127.0.0.1")
    config.set_string("rest.port", str(flink.rest_port))
    env = batch_table_env(config, parallelism=2)
    create_keyed_tables(env, 50000, keys=100)
    statement = "INSERT INTO snk SELECT k, SUM(SQRT(v * v + 1)) FROM src GROUP BY k"
    cpflink.record_plan(env, out, statement)
    run_on_cluster(env, statement, flink.logs)

    # The JobManager and both TaskManagers each write their part; a TaskManager (re)writes its part when
    # it releases the job's metrics, seconds after the job ended.
    deadline = time.monotonic() + 60
    while True:
        parts = cpflink.wait_for_metrics(out, parts=3, timeout_s=60)
        trace = cpflink.read_metrics(parts[0])
        subtasks = [sorted(task.index for task in chain.tasks) for chain in trace.operations]
        if (len(subtasks) == 2 and subtasks[0] == [0, 1]) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(parts) == 3
    assert len({p.name.split(".")[0] for p in parts}) == 1  # one job
    assert len(trace.operations) == 2 and trace.operations[1].parents == [trace.operations[0].id]
    assert trace.application.status == "succeeded"  # the JobManager's job status listener, loaded from lib/
    # the source chain ran one subtask on each TaskManager (one slot each), merged here; the adaptive
    # batch scheduler picks the aggregation's parallelism itself
    assert subtasks[0] == [0, 1] and subtasks[1]
    records = {c.name: c.metrics for op in trace.operations for c in op.children}
    assert max(m["records_out"] for m in records.values()) >= 50000
    assert trace.samples is not None and sum(trace.samples.count) > 0
    # each TaskManager's CPU time by thread kind: the shuffle between them ran in their netty threads
    split = [e.thread_cpu for e in trace.environment.executors]
    assert len(split) == 2 and all(kinds is not None and kinds.task > 0 and kinds.network > 0 for kinds in split)
    cpflink.finish(parts[-1], tmp_path)
    report = json.loads((tmp_path / "crystalperf-report.json").read_text())
    assert {op["id"] for op in report["operations"]} >= {"chain0", "chain1"}
    assert len(list(tmp_path.glob("crystalperf-report.json"))) == 1
    assert plumbing_top_functions(report) == []

    # A second job, the cluster stopped as soon as it ended: the TaskManagers still hold its metrics for a few
    # seconds and write their parts as they exit, which must not make the finished job look cut.
    second = run_on_cluster(env, "INSERT INTO snk SELECT k, SUM(v) FROM src GROUP BY k", flink.logs)
    flink.stop()
    second_parts = cpflink.wait_for_metrics(out, job_id=second, parts=3, timeout_s=60)
    assert all("cut" not in json.loads(p.read_text()) for p in second_parts), [p.read_text()[:300] for p in second_parts]
    assert cpflink.read_metrics(second_parts[0]).partial is None
