"""A standalone Flink cluster from the wheel's scripts (JobManager + 2 TaskManagers on 127.0.0.1) with the
reporter configured cluster-wide: the parts its processes write merge into one trace and one report."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crystalperf.integrations import flink as cpflink

from .reports import plumbing_top_functions
from .sql_jobs import batch_table_env, create_keyed_tables


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rest_ready(port: int, taskmanagers: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/taskmanagers", timeout=2) as response:
            return len(json.load(response)["taskmanagers"]) >= taskmanagers
    except OSError:
        return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    pyflink = pytest.importorskip("pyflink")
    home = Path(pyflink.__file__).parent
    root = tmp_path_factory.mktemp("flink-cluster")
    out, lib, conf, log, pids = (root / d for d in ("out", "lib", "conf", "log", "pids"))
    for d in (out, lib, conf, log, pids):
        d.mkdir()
    # the wheel's own jars plus the reporter in lib/, as a user puts it in a cluster's lib/
    for jar in (home / "lib").glob("*.jar"):
        (lib / jar.name).symlink_to(jar)
    (lib / cpflink.jar_path().name).symlink_to(cpflink.jar_path())
    rest_port = _free_port()
    entries = cpflink.configuration(out, analyze=False)
    entries.pop("pipeline.jars")  # the cluster loads the reporter from lib/
    settings = {
        "env.java.opts.all": _java_opts(home / "conf" / "config.yaml"),
        "jobmanager.rpc.address": "127.0.0.1",
        "jobmanager.bind-host": "127.0.0.1",
        "jobmanager.rpc.port": str(_free_port()),
        "jobmanager.memory.process.size": "1024m",
        "taskmanager.host": "127.0.0.1",
        "taskmanager.bind-host": "127.0.0.1",
        "taskmanager.numberOfTaskSlots": "1",
        "taskmanager.memory.process.size": "1024m",
        "rest.address": "127.0.0.1",
        "rest.bind-address": "127.0.0.1",
        "rest.port": str(rest_port),
        **entries,
    }
    (conf / "config.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in settings.items()))
    for name in ("log4j.properties", "log4j-console.properties"):
        (conf / name).write_text((home / "conf" / name).read_text())
    env = {
        **os.environ,
        "FLINK_CONF_DIR": str(conf),
        "FLINK_LIB_DIR": str(lib),
        "FLINK_LOG_DIR": str(log),
        "FLINK_PID_DIR": str(pids),
    }
    bin_dir = home / "bin"
    started = [["jobmanager.sh", "start"], ["taskmanager.sh", "start"], ["taskmanager.sh", "start"]]
    try:
        for command in started:
            subprocess.run(
                ["bash", str(bin_dir / command[0]), *command[1:]],
                env=env,
                check=True,
                timeout=60,
                capture_output=True,
            )
        deadline = time.monotonic() + 60
        while not _rest_ready(rest_port, 2):
            assert time.monotonic() < deadline, "the standalone cluster did not come up: " + _logs(log)
            time.sleep(0.5)
        yield rest_port, out
    finally:
        for script in ("taskmanager.sh", "jobmanager.sh"):
            subprocess.run(
                ["bash", str(bin_dir / script), "stop-all"],
                env=env,
                timeout=60,
                capture_output=True,
                check=False,
            )
        for pid_file in pids.glob("*.pid"):  # whatever the scripts did not stop
            for pid in pid_file.read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass


def _java_opts(wheel_config: Path) -> str:
    lines = wheel_config.read_text().splitlines()
    return next(line.split("all:", 1)[1].strip() for line in lines if line.strip().startswith("all: --add"))


def _logs(log: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(log.glob("*.log")))


def test_cluster_job_yields_one_merged_report(cluster: tuple[int, Path], tmp_path: Path) -> None:
    from pyflink.common import Configuration

    rest_port, out = cluster
    config = Configuration()
    config.set_string("execution.target", "remote")
    config.set_string("rest.address", "127.0.0.1")
    config.set_string("rest.port", str(rest_port))
    env = batch_table_env(config, parallelism=2)
    create_keyed_tables(env, 50000, keys=100)
    statement = "INSERT INTO snk SELECT k, SUM(SQRT(v * v + 1)) FROM src GROUP BY k"
    cpflink.record_plan(env, out, statement)
    env.execute_sql(statement).wait()

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
    # the source chain ran one subtask on each TaskManager (one slot each), merged here; the adaptive
    # batch scheduler picks the aggregation's parallelism itself
    assert subtasks[0] == [0, 1] and subtasks[1]
    records = {c.name: c.metrics for op in trace.operations for c in op.children}
    assert max(m["records_out"] for m in records.values()) >= 50000
    assert trace.samples is not None and sum(trace.samples.count) > 0
    cpflink.finish(parts[-1], tmp_path)
    report = json.loads((tmp_path / "crystalperf-report.json").read_text())
    assert {op["id"] for op in report["operations"]} >= {"chain0", "chain1"}
    assert len(list(tmp_path.glob("crystalperf-report.json"))) == 1
    assert plumbing_top_functions(report) == []
