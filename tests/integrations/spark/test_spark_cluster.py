"""A Spark standalone cluster (master + 2 workers on 127.0.0.1, from the pip-installed pyspark, started by
bench.cluster without namespaces): the executor plugins of both executors ship their samples to the driver,
and they reach the trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cluster import Network, SparkCluster
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.trace import load_trace
from tests.integrations.spark.reports import assert_no_plumbing_top_functions

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    workdir = tmp_path_factory.mktemp("cluster")
    with Network(["w0", "w1"], isolated=False) as net, SparkCluster(net, workdir) as cluster:
        yield cluster


def _builder(cluster: SparkCluster, app: str, out: Path) -> str:
    """The script lines that build the session of a driver on ``cluster``."""
    conf = {**cluster.driver_conf(), "spark.ui.enabled": "false", "spark.executor.memory": "512m",
            "spark.crystalperf.outputDir": str(out), "spark.crystalperf.waitForAnalysisS": "600"}
    return (f"builder = SparkSession.builder.appName({app!r})\n"
            f"for key, value in {conf!r}.items():\n    builder = builder.config(key, value)\n")


def test_samples_from_both_executors_reach_the_trace(standalone_cluster: SparkCluster, tmp_path: Path) -> None:
    out = tmp_path / "report"
    script = tmp_path / "app.py"
    script.write_text(f'''
from pyspark.sql import SparkSession
from crystalperf.integrations.spark import configure
{_builder(standalone_cluster, "crystalperf-cluster-test", out)}spark = configure(builder).getOrCreate()
deadline = __import__("time").time() + 60
while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3 and __import__("time").time() < deadline:
    __import__("time").sleep(0.5)
df = spark.range(0, 6_000_000, numPartitions=8).selectExpr("id % 1009 AS k", "sha2(cast(id AS string), 256) AS h")
print("GROUPS", df.groupBy("k").agg({{"h": "max"}}).count())
spark.stop()
''')
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=standalone_cluster.driver_env(),
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "GROUPS 1009" in done.stdout
    trace = load_trace(out / "crystalperf-trace.json.gz")
    executor_of_task = {t.id: t.executor for op in trace.iter_operations() for t in op.tasks}
    assert {e.id for e in trace.environment.executors} >= {"0", "1"}
    sampled = {executor_of_task.get(k.task) for k in trace.samples.keys if k.thread == "task"}
    assert {"0", "1"} <= sampled, sampled
    if Path("/proc/thread-self/schedstat").exists():
        # The measured tasks' run-queue delay came over the RPC, the last stage's too (sent as an executor goes
        # idle): a task thread's first task is measured, on both executors.
        tasks = [t for op in trace.iter_operations() for t in op.tasks]
        last = max((op for op in trace.iter_operations() if op.tasks), key=lambda op: op.end)
        assert any("cpu_wait_s" in t.metrics for t in last.tasks)
        assert {t.executor for t in tasks if "cpu_wait_s" in t.metrics} >= {"0", "1"}
    # each executor's hook cost came with its samples
    assert trace.hook is not None
    assert {p.source for p in trace.hook.processes} >= {"driver", "executor:0", "executor:1"}
    executors = [p for p in trace.hook.processes if p.source.startswith("executor:")]
    assert all(p.cpu_s > 0 for p in executors)
    # each executor's JVM start-up, measured by its plugin, which starts once the executor has registered
    assert all(p.startup_cpu_s and p.startup_cpu_s > 0.1 for p in executors), executors
    assert all(p.process_start and p.process_start < trace.application.end for p in executors), executors
    # each executor's CPU by thread kind: its tasks, its compilers, its netty event loops (the driver's RPC, the
    # blocks of the other executor). The partitions split unevenly between them, so only the sum has a floor.
    for executor in trace.environment.executors:
        kinds = executor.thread_cpu
        assert kinds is not None and kinds.task > 0 and kinds.jit > 0 and kinds.network > 0, executor
        # each executor's own process's faults and kernel time, shipped with its hook's report
        assert kinds.minor_faults and kinds.minor_faults > 0 and kinds.kernel is not None, executor
    assert sum(e.thread_cpu.task for e in trace.environment.executors if e.thread_cpu) > 0.5
    # the executors started on the driver's machine before the first job: one more would start there too
    profile = build_profile(trace, KeywordClassifier())
    prediction = Predictor(profile).predict(Changes({"executors": 3}), band=False)
    assert any(note.startswith("start-up: the traced 2 executor JVMs") for note in prediction.notes), prediction.notes
    assert_no_plumbing_top_functions(json.loads((out / "crystalperf-report.json").read_text()))


def test_executor_lost_mid_job_leaves_the_application_alone(standalone_cluster: SparkCluster, tmp_path: Path) -> None:
    import signal

    out = tmp_path / "report"
    script = tmp_path / "app.py"
    script.write_text(f'''
import sys, time
from pyspark.sql import SparkSession
from crystalperf.integrations.spark import configure
{_builder(standalone_cluster, "crystalperf-executor-lost", out)}spark = configure(builder).getOrCreate()
deadline = time.time() + 60
while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.time() < deadline:
    time.sleep(0.5)
print("RUNNING", spark.sparkContext.applicationId, flush=True)
def slow(x):
    time.sleep(0.05)
    return x
print("SUM", spark.sparkContext.parallelize(range(400), 8).map(slow).sum(), flush=True)
spark.stop()
''')
    app = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=standalone_cluster.driver_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    app_id = ""
    for line in app.stdout:
        if line.startswith("RUNNING"):
            app_id = line.split()[1]
            break
    time.sleep(4)
    # The module's cluster ran other applications before: their executors may still be shutting down under
    # the same workers, and killing one of those would leave this application untouched.
    executors = standalone_cluster.executors(app_id) if app_id else []
    assert executors, f"no executor of {app_id} found under the workers"
    os.kill(executors[0], signal.SIGKILL)
    rest, _ = app.communicate(timeout=300)
    assert app.returncode == 0
    assert "SUM 79800" in rest
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert any("removed" in w for w in trace.warnings)
    assert trace.application.status == "succeeded"
