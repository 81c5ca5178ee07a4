"""A Spark standalone cluster whose two workers are hosts of their own: each in a network namespace, on a veth
link shaped to 50 Mbit/s (bench.cluster). The driver and the master run in this namespace. A shuffle-heavy
join moves tens of MB between the executors; the executor plugins on both hosts ship their samples to the
driver over Spark's RPC (across the links), and the trace lists both hosts and the link each had."""

from __future__ import annotations

import gzip
import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cluster import Link, Network, SparkCluster, leftovers, unavailable
from bench.cluster.spark import LINKS_PROPERTY
from crystalperf.core.trace import load_trace
from crystalperf.integrations.spark import read_event_log
from tests.integrations.spark.reports import assert_no_plumbing_top_functions

pytestmark = pytest.mark.slow

RATE_MBIT = 50
ROWS = 60_000  # per side of the join: few, wide rows, so that the bytes cost the link more than the CPU
WIDTH = 1600  # bytes in each of 3 payload columns: about 580 MB of shuffle in all, half of it remote (23 s each way at 50 Mbit)

APP = '''
import sys, time
from pyspark.sql import SparkSession
from crystalperf.integrations import spark as cpspark
conf = {conf!r}
builder = SparkSession.builder.appName("crystalperf-netns-shuffle")
for key, value in conf.items():
    builder = builder.config(key, value)
t0 = time.time()
spark = cpspark.configure(builder).getOrCreate()
print("SESSION_S", time.time() - t0, flush=True)
deadline = time.time() + 90
while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.time() < deadline:
    time.sleep(0.5)
print("EXECUTORS_S", time.time() - t0, flush=True)
# Shuffle compression is off (see the test's configuration): a padded id is as many bytes on the link as in the
# row, and costs next to no CPU to make.
def side(name):
    return spark.range(0, {rows}, numPartitions=4).selectExpr(
        "id AS k", *[f"lpad(cast(id * {{s}} AS string), {width}, 'x') AS p{{s}}" for s in (3, 5, 7)]).alias(name)
joined = side("a").join(side("b"), "k")
# every payload column in the result, so that none is pruned before the shuffle
total = " + ".join(f"length({{side}}.p{{s}})" for side in "ab" for s in (3, 5, 7))
started = time.time()
print("ROWS", joined.selectExpr(f"sum({{total}})").collect()[0][0], flush=True)
print("JOB_S", time.time() - started, flush=True)
spark.stop()
print("STOP_S", time.time() - t0, flush=True)
'''


REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def namespaces() -> None:
    reason = unavailable()
    if reason:
        pytest.skip(f"no network namespaces here: {reason}")


@pytest.fixture(scope="module")
def cluster(namespaces: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    workdir = tmp_path_factory.mktemp("netns-spark")
    with Network(["w0", "w1"], link=Link(rate_mbit=RATE_MBIT)) as net, SparkCluster(net, workdir) as spark:
        yield spark
    assert leftovers(net.prefix) == []


def test_shuffle_over_shaped_links(cluster: SparkCluster, tmp_path: Path) -> None:
    out = tmp_path / "report"
    conf = {
        **cluster.driver_conf(),
        "spark.ui.enabled": "false",
        "spark.executor.memory": "512m",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.autoBroadcastJoinThreshold": "-1",  # a shuffle join: both sides cross the links
        "spark.sql.adaptive.enabled": "false",  # AQE would coalesce the reduce side or switch the join
        "spark.shuffle.compress": "false",
        "spark.crystalperf.outputDir": str(out),
        "spark.crystalperf.waitForAnalysisS": "600",
    }
    script = tmp_path / "app.py"
    script.write_text(APP.format(conf=conf, rows=ROWS, width=WIDTH))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=cluster.driver_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + cluster.logs()
    print(done.stdout)
    assert f"ROWS {ROWS * 6 * WIDTH}" in done.stdout

    trace = load_trace(out / "crystalperf-trace.json.gz")
    env = trace.environment
    # Both executors, each on its worker's host; the driver runs no tasks and is not listed.
    assert sorted(e.host or "" for e in env.executors) == sorted(cluster.hosts)
    assert sorted(env.hosts) == sorted(cluster.hosts)
    assert env.properties[LINKS_PROPERTY] == cluster.network.links()
    assert f"rate={RATE_MBIT}mbit" in env.properties[LINKS_PROPERTY]

    # Samples of task threads from the executors on both hosts reached the driver.
    host_of = {e.id: e.host for e in env.executors}
    tasks = [t for op in trace.iter_operations() for t in op.tasks]
    executor_of_task = {t.id: t.executor for t in tasks}
    sampled = {host_of.get(executor_of_task.get(k.task) or "") for k in trace.samples.keys if k.thread == "task"}
    assert set(cluster.hosts) <= sampled, sampled

    # The reduce side fetched tens of MB from the other host over the links.
    reading = {op.id for op in trace.iter_operations()
               if sum(t.metrics.get("shuffle_remote_read_bytes", 0.0) for t in op.tasks) > 1e6}
    reading_tasks = [t for op in trace.iter_operations() if op.id in reading for t in op.tasks]
    remote = sum(t.metrics.get("shuffle_remote_read_bytes", 0.0) for t in reading_tasks)
    fetch_wait = sum(t.metrics.get("network_wait_s", 0.0) for t in reading_tasks)
    run_queue = sum(t.metrics.get("cpu_wait_s", 0.0) for t in reading_tasks)
    assert remote > 60e6, remote

    report = json.loads((out / "crystalperf-report.json").read_text())
    assert_no_plumbing_top_functions(report)
    bottleneck = report["bottleneck"]
    path_share = {op["id"]: op["share_of_critical_path"] for op in report["operations"]}
    summary = (f"bottleneck {bottleneck['resource']} {bottleneck['seconds']}; shuffle-reading {sorted(reading)}: "
               f"{remote / 1e6:.1f} MB remote, fetch wait {fetch_wait:.2f} s, run-queue wait {run_queue:.2f} s; "
               f"critical-path shares {path_share}")
    print(summary)
    assert bottleneck["seconds"]["network"] > 0, summary
    assert any(path_share.get(op_id, 0.0) > 0 for op_id in reading), summary
    # The verdict holds when the reducers had their cores: on a machine busy with other work (a run queue the
    # tasks waited in longer than for their blocks) the analysis rightly counts the wait for a core as CPU.
    if run_queue < fetch_wait:
        assert bottleneck["resource"] == "network", summary


def test_fleet_spark_engine_on_two_workers(cluster: SparkCluster, tmp_path: Path) -> None:
    """``crystalperf fleet --engine spark`` submitted to the cluster: the executors on both hosts analyse the logs
    (real event logs recorded in tests/data, copied under new application ids to a fleet of 12) and the driver
    writes the table the local engine writes for them."""
    pq = pytest.importorskip("pyarrow.parquet")
    data = REPO / "tests" / "data"
    logs = tmp_path / "spark-events"
    shutil.copytree(data / "spark-fleet", logs)
    for i in range(9):  # the golden log under other application ids, as other runs of its job
        text = gzip.decompress((data / "spark-eventlog.json.gz").read_bytes())
        (logs / f"local-17955508406{i:02d}.gz").write_bytes(
            gzip.compress(text.replace(b"local-1795550840668", f"local-17955508406{i:02d}".encode()), mtime=0))
    fleet = [sys.executable, "-m", "crystalperf", "fleet", str(logs), "-q"]
    local = subprocess.run([*fleet, "--out", str(tmp_path / "local")], cwd=tmp_path, capture_output=True,
                           text=True, timeout=600)
    assert local.returncode == 0, local.stderr[-3000:]
    events = tmp_path / "fleet-events"
    events.mkdir()
    conf = {**cluster.driver_conf(), "spark.ui.enabled": "false", "spark.executor.memory": "512m",
            "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events)}
    master = conf.pop("spark.master")
    conf_args = [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]
    done = subprocess.run([*fleet, "--out", str(tmp_path / "spark"), "--engine", "spark", "--master", master,
                           *conf_args], cwd=tmp_path, env=cluster.driver_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:] + cluster.logs()
    table = pq.read_table(tmp_path / "spark" / "crystalperf-fleet.parquet")
    assert table.num_rows == 12 and table.column("error").null_count == 12
    assert table.equals(pq.read_table(tmp_path / "local" / "crystalperf-fleet.parquet"))
    # both workers' executors ran analyses: the fleet job's own event log says where its tasks ran
    (log,) = [p for p in events.iterdir() if not p.name.startswith(".")]
    job = read_event_log(log)
    hosts = {t.host for op in job.iter_operations() for t in op.tasks}
    assert hosts == set(cluster.hosts), hosts


# A network whose processes try to outlive it: a child in its own session (out of the process group), in a
# host's namespace and in this one.
STARTS = [["sh", "-c", "setsid sleep 301 & sleep 300"]]


def _start_processes(net: Network) -> None:
    for command in STARTS:
        net.popen(command, host=net.hosts[0])
        net.popen(command)
    deadline = time.monotonic() + 10
    while len(net.processes()) < 4 * len(STARTS) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(net.processes()) >= 4 * len(STARTS), net.processes()


def test_nothing_outlives_an_exception_in_the_with_block(namespaces: None) -> None:
    with pytest.raises(RuntimeError, match="inside"):
        with Network(["a", "b"], link=Link(rate_mbit=100)) as net:
            _start_processes(net)
            assert any(item.startswith("namespace") for item in leftovers(net.prefix))
            raise RuntimeError("inside")
    assert leftovers(net.prefix) == []


HARNESS = textwrap.dedent('''
    import sys, time
    from bench.cluster import Link, Network
    from tests.integrations.spark.test_spark_netns_cluster import _start_processes
    net = Network(["a", "b"], link=Link(rate_mbit=100)).__enter__()
    _start_processes(net)
    print(net.prefix, flush=True)
    time.sleep(600)
''')


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_nothing_outlives_a_killed_harness(namespaces: None, sig: signal.Signals) -> None:
    """SIGTERM: the harness cleans up before it exits. SIGKILL: nothing can run in the harness; its direct
    children die with it (PR_SET_PDEATHSIG), and the next network to start removes the rest."""
    harness = subprocess.Popen([sys.executable, "-c", HARNESS], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert harness.stdout is not None
    prefix = harness.stdout.readline().strip()
    assert prefix.startswith("cpf") and leftovers(prefix)
    harness.send_signal(sig)
    harness.wait(timeout=60)
    if sig == signal.SIGKILL:
        assert leftovers(prefix), "nothing was left to clean up: the test shows nothing"
        with Network(["a"]):
            pass
    deadline = time.monotonic() + 10
    while leftovers(prefix) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(prefix) == []
