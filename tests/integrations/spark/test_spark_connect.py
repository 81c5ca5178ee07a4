"""A Spark Connect client on a local master (``SparkSession.builder.remote("local[2]")``): PySpark starts the Connect
server in the program's process from the builder's settings, and the jobs run there."""

from __future__ import annotations

from pathlib import Path

import pytest

from crystalperf.core.cli import main
from crystalperf.core.trace import load_trace

pytest.importorskip("grpc")  # pyspark[connect], which the nox session installs


def test_a_connect_client_on_a_local_master_is_traced_and_named_after_its_requests(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    events = tmp_path / "events"
    events.mkdir()
    result = run_app(f'''
        import hashlib
        from pyspark.sql import functions as F

        builder = (SparkSession.builder.remote("local[2]").appName("connect-test").config("spark.ui.enabled", "false")
                   .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", "{events}"))
        spark = configure(builder, output_dir="{out}").getOrCreate()
        assert type(spark).__module__.startswith("pyspark.sql.connect")

        def hash_in_python(x):
            v = str(x).encode()
            for _ in range(200):
                v = hashlib.sha256(v).digest()
            return v.hex()[:2]

        hashed = F.udf(hash_in_python, "string")
        print("GROUPS", spark.range(0, 40_000, numPartitions=4).select(hashed("id").alias("k")).groupBy("k").count().count())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    # PySpark's warnings that the server's settings cannot be set again on the session are not said of ours
    assert "Failed to set spark.plugins" not in result.stderr, result.stderr[-3000:]
    lines = (tmp_path / "app.py").read_text().splitlines()
    action = "app.py:" + str(next(n for n, line in enumerate(lines, 1) if 'print("GROUPS"' in line))
    trace = load_trace(out / "crystalperf-trace.json.gz")
    jobs = [op for op in trace.operations if op.kind == "job"]
    assert jobs
    # named after the request's relations and the program's line, not a page of the request's text
    assert all(job.name.split(": ", 1)[1].startswith("Spark Connect: range → project") and "\n" not in job.name
               and job.name.endswith(action) for job in jobs), [job.name for job in jobs]
    # the Python workers of the Connect server were sampled, and the UDF named
    assert any(k.thread == "python-worker" for k in trace.samples.keys)
    report = result.report(out)
    udf_stage = max((o for o in report["operations"] if o["kind"] == "stage"), key=lambda o: o["runtime_s"])
    assert any("hash_in_python" in f["name"] for f in udf_stage["top_functions"]), udf_stage["top_functions"]
    # the client's waits for the server (the session's settings, its release) are calls into Spark, not the driver's
    # own Python on the network
    python = [f["name"] for f in (report["bottleneck"]["driver_work"] or {}).get("functions", [])
              if f.get("runtime") == "python"]
    assert not any(name.startswith("grpc.") for name in python), python
    # Spark's own event log of the same run names its jobs after the requests too
    (log,) = events.iterdir()
    logged = tmp_path / "logged.json.gz"
    assert main(["import", "spark-eventlog", str(log), "--out", str(logged)]) == 0
    assert [job.name.split(": ", 1)[1] for job in load_trace(logged).operations if job.kind == "job"] == [
        job.name.split(": ", 1)[1].rsplit(" at ", 1)[0] for job in jobs]
