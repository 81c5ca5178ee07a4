"""A Spark standalone cluster (master + 2 workers on 127.0.0.1, from the pip-installed pyspark): the
executor plugins of both executors ship their samples to the driver, and they reach the trace."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crystalperf.core.trace import load_trace
from tests.integrations.spark.reports import assert_no_plumbing_top_functions

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory):
    import pyspark

    tmp_path = tmp_path_factory.mktemp("cluster")

    home = Path(pyspark.__file__).parent
    spark_class = home / "bin" / "spark-class"
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_WORKER_DIR=str(tmp_path / "work"))
    port = _free_port()
    procs = []
    logs = tmp_path / "cluster-logs"
    logs.mkdir()
    try:
        procs.append(subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(_free_port())], env=env, stdout=(logs / "master.log").open("w"),
            stderr=subprocess.STDOUT))
        _wait_for_port(port)
        for i in range(2):
            procs.append(subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                 "--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port()),
                 "--work-dir", str(tmp_path / f"work{i}")], env=env, stdout=(logs / f"worker{i}.log").open("w"),
                stderr=subprocess.STDOUT))
        time.sleep(5)
        yield f"spark://127.0.0.1:{port}", procs[1:]
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_samples_from_both_executors_reach_the_trace(standalone_cluster: tuple, tmp_path: Path) -> None:
    master = standalone_cluster[0]
    out = tmp_path / "report"
    script = tmp_path / "app.py"
    script.write_text(f'''
from pyspark.sql import SparkSession
from crystalperf.integrations.spark import configure
builder = (SparkSession.builder.master("{master}").appName("crystalperf-cluster-test")
           .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
           .config("spark.executor.cores", "1").config("spark.cores.max", "2")
           .config("spark.crystalperf.outputDir", "{out}")
           .config("spark.crystalperf.waitForAnalysisS", "600"))
spark = configure(builder).getOrCreate()
deadline = __import__("time").time() + 60
while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3 and __import__("time").time() < deadline:
    __import__("time").sleep(0.5)
df = spark.range(0, 6_000_000, numPartitions=8).selectExpr("id % 1009 AS k", "sha2(cast(id AS string), 256) AS h")
print("GROUPS", df.groupBy("k").agg({{"h": "max"}}).count())
spark.stop()
''')
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "GROUPS 1009" in done.stdout
    trace = load_trace(out / "crystalperf-trace.json.gz")
    executor_of_task = {t.id: t.executor for op in trace.iter_operations() for t in op.tasks}
    assert {e.id for e in trace.environment.executors} >= {"0", "1"}
    sampled = {executor_of_task.get(k.task) for k in trace.samples.keys if k.thread == "task"}
    assert {"0", "1"} <= sampled, sampled
    if Path("/proc/thread-self/schedstat").exists():
        # Every task's run-queue delay came over the RPC, the last stage's too (sent as each task ends).
        tasks = [t for op in trace.iter_operations() for t in op.tasks]
        assert all("cpu_wait_s" in t.metrics for t in tasks), [t.id for t in tasks if "cpu_wait_s" not in t.metrics]
        assert {t.executor for t in tasks} >= {"0", "1"}
    assert_no_plumbing_top_functions(json.loads((out / "crystalperf-report.json").read_text()))


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_executor_lost_mid_job_leaves_the_application_alone(standalone_cluster: tuple, tmp_path: Path) -> None:
    import signal

    master, workers = standalone_cluster
    out = tmp_path / "report"
    script = tmp_path / "app.py"
    script.write_text(f'''
import sys, time
from pyspark.sql import SparkSession
from crystalperf.integrations.spark import configure
builder = (SparkSession.builder.master("{master}").appName("crystalperf-executor-lost")
           .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
           .config("spark.executor.cores", "1").config("spark.cores.max", "2")
           .config("spark.crystalperf.outputDir", "{out}")
           .config("spark.crystalperf.waitForAnalysisS", "600"))
spark = configure(builder).getOrCreate()
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
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    app = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    app_id = ""
    for line in app.stdout:
        if line.startswith("RUNNING"):
            app_id = line.split()[1]
            break
    time.sleep(4)
    # The module's cluster ran other applications before: their executors may still be shutting down under
    # the same workers, and killing one of those would leave this application untouched.
    executors = [c for w in workers for c in _children(w.pid) if app_id and app_id in _cmdline(c)]
    assert executors, f"no executor of {app_id} found under the workers"
    os.kill(executors[0], signal.SIGKILL)
    rest, _ = app.communicate(timeout=300)
    assert app.returncode == 0
    assert "SUM 79800" in rest
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert any("removed" in w for w in trace.warnings)
    assert trace.application.status == "succeeded"
