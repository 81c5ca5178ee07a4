"""``crystalperf fleet`` on the event logs of real local Spark applications, as Spark 4 writes them with nothing
but ``spark.eventLog.enabled=true``, run as a user runs it (``python -m crystalperf fleet``): the local engine,
then the Spark engine on a ``local[2]`` master, which must write the identical table.

One Python process runs the applications one after the other (a session stopped, the next started), so the JVM
starts once; no crystalperf listener is involved (the fleet reads what a platform's History Server has)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.slow

APPS = '''
import sys
from pyspark.sql import SparkSession

logs = sys.argv[1]

def session(name, **conf):
    builder = (SparkSession.builder.master("local[2]").appName(name)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", logs))
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()

def burn(x):
    total = 0
    for i in range(3000):
        total = (total + i * x) % 1000003
    return total

spark = session("fleet-shuffle")
spark.range(20000).selectExpr("id % 97 AS k", "id AS v").groupBy("k").sum("v").collect()
spark.stop()

spark = session("fleet-python", **{"spark.eventLog.compression.codec": "lz4"})
spark.sparkContext.parallelize(range(2000), 4).map(burn).sum()
spark.stop()

spark = session("fleet-skewed")
# key 0 holds 90 % of the values: its task must outlast the seven others together by far, so the skew's saving
# stays well above the finding's thresholds (10 % of the stage) on a slow or busy machine
pairs = spark.sparkContext.parallelize(range(12000), 4).map(lambda x: (0 if x % 10 else x % 8, x))
pairs.groupByKey(8).mapValues(lambda values: sum(burn(v) for v in values)).count()
spark.stop()

spark = session("fleet-failed")
try:
    spark.sparkContext.parallelize(range(10), 2).map(lambda x: 1 // 0).count()
except Exception:
    pass
spark.stop()
'''
NAMES = {"fleet-shuffle", "fleet-python", "fleet-skewed", "fleet-failed"}


def _fleet(*args: str, env: dict[str, str] | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crystalperf", "fleet", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=env or dict(os.environ, PYSPARK_PYTHON=sys.executable))


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet")
    logs = root / "spark-events"
    logs.mkdir()
    script = root / "apps.py"
    script.write_text(textwrap.dedent(APPS))
    done = subprocess.run([sys.executable, str(script), str(logs)], cwd=root, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    assert done.returncode == 0, done.stderr[-3000:]
    assert len([p for p in logs.iterdir() if not p.name.startswith(".")]) == len(NAMES)
    return logs


@pytest.fixture(scope="module")
def local_table(history: Path) -> Path:
    out = history.parent / "local"
    done = _fleet(str(history), "--out", str(out), cwd=history.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 to analyse (local engine)" in done.stderr
    assert "crystalperf fleet: 4 applications (4 analysed, 0 could not be" in done.stdout, done.stdout
    return out / "crystalperf-fleet.parquet"


def test_a_history_server_directory_is_one_row_per_application(history: Path, local_table: Path) -> None:
    rows = {r["app_name"]: r for r in pq.read_table(local_table).to_pylist()}
    assert set(rows) == NAMES
    assert all(r["error"] is None and r["framework"] == "spark" and r["cores"] == 2 for r in rows.values())
    assert rows["fleet-failed"]["status"] == "failed"
    assert {r["status"] for n, r in rows.items() if n != "fleet-failed"} == {"succeeded"}
    assert rows["fleet-skewed"]["skewed_operations"] >= 1, rows["fleet-skewed"]
    assert rows["fleet-python"]["source"].endswith(".lz4") or any(
        p.name.endswith(".lz4") for p in Path(rows["fleet-python"]["source"]).iterdir())
    for row in rows.values():
        assert row["machine_hours"] == pytest.approx(row["cores"] * row["runtime_s"] / 3600)
        assert row["bottleneck"] in {"cpu", "disk", "network", "waiting"} and 0 < row["bottleneck_share"] <= 1
    page = (local_table.parent / "crystalperf-fleet.html").read_text()
    assert all(name in page for name in NAMES)


def test_a_second_run_analyses_nothing(history: Path, local_table: Path) -> None:
    before = pq.read_table(local_table)
    done = _fleet(str(history), "--out", str(local_table.parent), cwd=history.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 unchanged since they were analysed, 0 to analyse" in done.stderr
    assert pq.read_table(local_table).equals(before)


def test_the_spark_engine_writes_the_identical_table(history: Path, local_table: Path) -> None:
    out = history.parent / "spark-engine"
    events = history.parent / "fleet-job-events"
    events.mkdir()
    done = _fleet(str(history), "--out", str(out), "--engine", "spark", "--master", "local[2]",
                  "--conf", "spark.ui.enabled=false", "--conf", "spark.eventLog.enabled=true",
                  "--conf", f"spark.eventLog.dir={events}", cwd=history.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 to analyse (spark engine)" in done.stderr
    assert pq.read_table(out / "crystalperf-fleet.parquet").equals(pq.read_table(local_table))
    # the analyses ran as the tasks of a Spark job: its own event log says so
    (log,) = [p for p in events.iterdir() if not p.name.startswith(".")]
    from crystalperf.integrations.spark import read_event_log

    job = read_event_log(log)
    assert job.application.name == "crystalperf-fleet"
    assert sum(len(stage.tasks) for op in job.operations for stage in op.children) >= 2
    print(json.dumps({"fleet job": job.application.id, "runtime_s": job.application.duration}))
