"""Spark's own event logs, as real Spark 4 writes them with nothing but ``spark.eventLog.enabled=true``
(zstd, rolling: ``eventlog_v2_<app>/events_1_<app>.zstd``) and with the other codecs (lz4, snappy, lzf),
complete and in progress, one application per directory and three in a History Server directory.

One Python process runs the five tiny applications one after the other (a session stopped, the next
started with another configuration), so the JVM starts once; no crystalperf listener is involved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crystalperf.core.cli import main
from crystalperf.core.trace import Trace, load_trace
from crystalperf.integrations.spark import read_event_log
from crystalperf.integrations.spark.reader import IN_PROGRESS_WARNING, list_applications

# No skip for zstandard and cramjam: the spark extra installs them, and this tier is what proves the codecs.

APPS = '''
import json, os, shutil, sys, time
from pathlib import Path
from pyspark.sql import SparkSession

root = Path(sys.argv[1])
written = {}

def run(name, log_dir, running_copy=None, **conf):
    log_dir.mkdir(parents=True, exist_ok=True)
    builder = (SparkSession.builder.master("local[1]").appName(name)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", str(log_dir)))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    app_id = spark.sparkContext.applicationId
    spark.range(2000).selectExpr("id % 7 as k").groupBy("k").count().collect()  # a job with a shuffle
    spark.sparkContext.parallelize(range(100), 2).map(lambda x: x * x).sum()  # a Python RDD job
    if running_copy is not None:
        time.sleep(2)  # the listener bus writes the jobs' events asynchronously
        # the log as it is while the application runs: a copy, taken before the session stops
        (log,) = [p for p in log_dir.iterdir() if app_id in p.name and not p.name.startswith(".")]
        target = running_copy / log.name
        running_copy.mkdir(parents=True, exist_ok=True)
        shutil.copytree(log, target) if log.is_dir() else shutil.copy(log, target)
    spark.stop()
    written[name] = app_id

run("only-enabled", root / "default", running_copy=root / "running-default")
run("codec-lz4", root / "history", **{"spark.eventLog.compression.codec": "lz4"})
run("codec-snappy", root / "history", running_copy=root / "running-snappy",
    **{"spark.eventLog.compression.codec": "snappy", "spark.eventLog.rolling.enabled": "false"})
run("codec-lzf", root / "history", **{"spark.eventLog.compression.codec": "lzf"})
print("APPS " + json.dumps(written))
'''


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The event-log directories the applications wrote, and each application's id by name."""
    root = tmp_path_factory.mktemp("eventlogs")
    script = root / "apps.py"
    script.write_text(textwrap.dedent(APPS))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, str(script), str(root)], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("APPS ")]
    return root, json.loads(line[5:])


def _tasks(trace: Trace) -> int:
    return sum(len(stage.tasks) for job in trace.operations for stage in job.children)


def _read_only_log(log_dir: Path) -> Trace:
    (log,) = log_dir.iterdir()
    return read_event_log(log)


def test_sparks_default_log_imports_and_analyzes(logs: tuple[Path, dict[str, str]], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root, apps = logs
    (written,) = (root / "default").iterdir()
    # Spark 4's defaults: a rolling log compressed with zstd
    assert written.name == f"eventlog_v2_{apps['only-enabled']}"
    assert [p.name for p in written.glob("events_*")] == [f"events_1_{apps['only-enabled']}.zstd"]
    out = tmp_path / "trace.json.gz"
    assert main(["import", "spark-eventlog", str(written), "--analyze", "--out", str(out)]) == 0
    assert (tmp_path / "crystalperf-report.json").is_file()
    trace = load_trace(out)
    assert trace.application.id == apps["only-enabled"] and trace.application.name == "only-enabled"
    assert len(trace.operations) == 2 and {j.status for j in trace.operations} == {"success"}
    assert _tasks(trace) >= 3 and trace.warnings == []
    assert "crystalperf: error" not in capsys.readouterr().err


@pytest.mark.parametrize("codec", ["lz4", "snappy", "lzf"])
def test_other_codecs_read_the_same_jobs(logs: tuple[Path, dict[str, str]], tmp_path: Path, codec: str) -> None:
    root, apps = logs
    app_id = apps[f"codec-{codec}"]
    logged = [p for p in (root / "history").iterdir() if app_id in p.name and not p.name.startswith(".")]
    (log,) = logged
    files = list(log.glob("events_*")) if log.is_dir() else [log]
    assert [f.suffix for f in files] == [f".{codec}"]
    out = tmp_path / "trace.json.gz"
    assert main(["import", "spark-eventlog", str(log), "--out", str(out)]) == 0
    trace = load_trace(out)
    reference = _read_only_log(root / "default")
    assert trace.application.name == f"codec-{codec}" and trace.warnings == []
    # the same two jobs as the zstd application: the codec changes nothing in what is read
    assert [len(j.children) for j in trace.operations] == [len(j.children) for j in reference.operations]
    assert _tasks(trace) == _tasks(reference)


def test_history_server_directory(logs: tuple[Path, dict[str, str]], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    root, apps = logs
    history = root / "history"
    assert main(["import", "spark-eventlog", str(history), "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    for codec in ("lz4", "snappy", "lzf"):
        (line,) = [x for x in lines if x.startswith(apps[f"codec-{codec}"] + "  ")]
        assert f"  codec-{codec}  " in line and "  complete  " in line and " UTC " in line

    assert main(["import", "spark-eventlog", str(history)]) == 2
    assert "--app" in capsys.readouterr().err

    one = tmp_path / "one.json.gz"
    assert main(["import", "spark-eventlog", str(history), "--app", apps["codec-snappy"], "--out", str(one)]) == 0
    assert load_trace(one).application.name == "codec-snappy"

    every = tmp_path / "all"
    assert main(["import", "spark-eventlog", str(history), "--all", "--out", str(every)]) == 0
    traces = {p.parent.name: load_trace(p) for p in every.glob("*/crystalperf-trace.json.gz")}
    assert {app: t.application.name for app, t in traces.items()} == {
        apps[f"codec-{c}"]: f"codec-{c}" for c in ("lz4", "snappy", "lzf")}


@pytest.mark.parametrize("copy", ["running-default", "running-snappy"])
def test_logs_in_progress(logs: tuple[Path, dict[str, str]], copy: str) -> None:
    root, apps = logs
    (log,) = (root / copy).iterdir()
    name = "only-enabled" if copy == "running-default" else "codec-snappy"
    if log.is_dir():
        assert (log / f"appstatus_{apps[name]}.inprogress").exists()
    else:
        assert log.name == f"{apps[name]}.snappy.inprogress"
    trace = read_event_log(log)
    assert IN_PROGRESS_WARNING in trace.warnings and trace.application.name == name
    assert len(trace.operations) >= 1 and not any("damaged" in w or "truncated" in w for w in trace.warnings)
    (app,) = list_applications(log)
    assert app.status == "in progress"
