"""Flink workloads of the what-if benchmark (paper Table 3, scaled to a 2-core machine), as Flink SQL
on PyFlink's local mini cluster, streaming mode, bounded sources:

- ``yahoo``: the Yahoo streaming benchmark's shape — ad events, keep the views, map each ad to its
  campaign, count per campaign in 10 s event-time tumbling windows;
- ``wordcount``: Dhalion's word count — a stream of words counted per word.

The job script also runs the scale cases' jobs (``bench.whatif.scale.flink``): a CSV scan and a CSV
``GROUP BY``, in batch mode when the config says ``batch``.

The runtime is the job's net runtime as Flink reports it (the trace's streaming latency: a bounded
job's end-to-end latency is its whole run). Runs use the Flink environment: ``$CRYSTALPERF_FLINK_PYTHON``, else this
interpreter when it has PyFlink, else ``/work/venvs/flink`` or the nox ``flink`` session's. Real
variations: parallelism (``parallelism.default``) and CPU share (cgroup CPU quota; the whole job
process joins it, the mini cluster runs inside it).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from bench.fidelity.machine import evict, in_cgroups, warm
from bench.whatif import machine, shaped
from bench.whatif.interpreters import flink_python
from bench.whatif.machine import cgroup
from bench.whatif.runner import Run, Target

CSV_FILES = 8
CSV_BYTES = 100_000_000

JOB = textwrap.dedent('''
    import json, sys, time
    config = json.loads(sys.argv[1])
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment
    conf = Configuration()
    if config.get("out"):
        from crystalperf.integrations import flink as cpflink
        conf = cpflink.configure(conf, config["out"], analyze=False)
    conf.set_string("parallelism.default", str(config["parallelism"]))
    # Python UDFs run in workers of this interpreter (its environment has PyFlink)
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    mode = EnvironmentSettings.new_instance()
    mode = mode.in_batch_mode() if config.get("batch") else mode.in_streaming_mode()
    settings = mode.with_configuration(conf).build()
    env = TableEnvironment.create(settings)
    rows = config["rows"]
    # datagen's default of 10,000 rows/s would make every run last rows/10,000 s whatever its resources
    UNTHROTTLED = 1_000_000_000
    if config["job"] == "yahoo":
        env.execute_sql(f"""CREATE TABLE events (
            id BIGINT, user_id BIGINT, ad_id INT, event_type INT,
            ts AS TO_TIMESTAMP_LTZ(id * 2, 3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
        ) WITH ('connector' = 'datagen', 'fields.id.kind' = 'sequence', 'fields.id.start' = '1',
                'fields.id.end' = '{rows}', 'rows-per-second' = '{UNTHROTTLED}', 'fields.ad_id.min' = '0', 'fields.ad_id.max' = '999',
                'fields.event_type.min' = '0', 'fields.event_type.max' = '2')""")
        env.execute_sql("CREATE TABLE sink (campaign INT, window_start TIMESTAMP(3), view_count BIGINT) "
                        "WITH ('connector' = 'blackhole')")
        query = """INSERT INTO sink
            SELECT MOD(ad_id * 7919, 100) AS campaign, window_start, COUNT(*) AS view_count
            FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '10' SECOND))
            WHERE event_type = 0
            GROUP BY MOD(ad_id * 7919, 100), window_start, window_end"""
    elif config["job"] == "csv-scan":
        env.execute_sql(f"""CREATE TABLE src (id BIGINT, k INT, v DOUBLE, s STRING) WITH (
            'connector' = 'filesystem', 'path' = 'file://{config["csv"]}', 'format' = 'csv')""")
        env.execute_sql("CREATE TABLE sink (id BIGINT, k INT, v DOUBLE) WITH ('connector' = 'blackhole')")
        # a cheap filter: the job is its scan (reading and parsing the files)
        query = "INSERT INTO sink SELECT id, k, v FROM src WHERE s LIKE '%zzzz%' OR v < 0.0001"
    elif config["job"] == "csv-groupby":
        env.execute_sql(f"""CREATE TABLE src (id BIGINT, k INT, v DOUBLE, s STRING) WITH (
            'connector' = 'filesystem', 'path' = 'file://{config["csv"]}', 'format' = 'csv')""")
        env.execute_sql("CREATE TABLE sink (k INT, n BIGINT, total DOUBLE) WITH ('connector' = 'blackhole')")
        query = "INSERT INTO sink SELECT k, COUNT(*), SUM(v) FROM src GROUP BY k"
    elif config["job"] == "download":
        import urllib.request
        from pyflink.table.udf import udf
        url = config["url"]
        def pull(i):
            total = 0
            with urllib.request.urlopen(url) as answer:
                while block := answer.read(1 << 16):
                    total += len(block)
            return total
        env.create_temporary_function("pull", udf(pull, result_type="BIGINT"))
        env.execute_sql(f"""CREATE TABLE requests (id BIGINT) WITH ('connector' = 'datagen',
            'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '{config["requests"]}')""")
        env.execute_sql("CREATE TABLE sink (n BIGINT) WITH ('connector' = 'blackhole')")
        query = "INSERT INTO sink SELECT pull(id) FROM requests"
    else:
        env.execute_sql(f"""CREATE TABLE lines (id BIGINT) WITH ('connector' = 'datagen',
            'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '{rows}',
            'rows-per-second' = '{UNTHROTTLED}')""")
        env.execute_sql("CREATE TABLE sink (word STRING, n BIGINT) WITH ('connector' = 'blackhole')")
        query = """INSERT INTO sink
            SELECT word, COUNT(*) FROM (
              SELECT CONCAT('w', CAST(MOD(id * 7919, 20000) AS STRING), SUBSTRING(MD5(CAST(id AS STRING)), 1, 2))
                     AS word FROM lines)
            GROUP BY word"""
    if config.get("out"):
        cpflink.record_plan(env, config["out"], query)
    result = env.execute_sql(query)
    result.wait()
    # The job's own net runtime: what the trace calls its latency, without submission and planning.
    runtime = result.get_job_client().get_job_execution_result().result().get_net_runtime() / 1000
    if config.get("out"):
        from crystalperf.core.trace import save_trace
        from crystalperf.integrations import flink as cpflink
        found = cpflink.wait_for_metrics(config["out"])
        save_trace(cpflink.read_metrics(found[0]), config["out"] + "/crystalperf-trace.json.gz")
    print("RESULT", json.dumps({"runtime_s": runtime}))
''')


class FlinkSqlWorkload:
    """A bounded streaming SQL job on the local mini cluster."""

    framework = "flink"
    trace_every_run = False  # else only the baseline's runs are traced

    def __init__(self, job: str, *, rows: int = 0, parallelism: int = 2) -> None:
        self.name = job
        self.python = flink_python()
        self.baseline: dict[str, Any] = {"job": job, "rows": rows, "parallelism": parallelism}

    def no_flink(self) -> str | None:
        return None if self.python else "PyFlink is not installed (set CRYSTALPERF_FLINK_PYTHON)"

    def targets(self, quick: bool) -> list[Target]:
        base = self.baseline
        no_flink = (lambda: None) if self.python else (lambda: "PyFlink is not installed (set CRYSTALPERF_FLINK_PYTHON)")

        def needs(probe: Any) -> Any:
            return lambda: no_flink() or probe()

        targets = [
            Target("parallelism 2->1", "parallelism", {**base, "parallelism": 1}, ["parallelism=1"], no_flink),
            Target("cpu share 50%", "cpu_share", {**base, "cpu_share": 0.5}, ["cpu_share=0.5"],
                   needs(machine.cpu_quota_unavailable)),
        ]
        if quick:
            return targets
        return targets + [
            Target("cpu share 75%", "cpu_share", {**base, "cpu_share": 0.75}, ["cpu_share=0.75"],
                   needs(machine.cpu_quota_unavailable)),
            Target("parallelism 2->1, cpu share 75%", "parallelism", {**base, "parallelism": 1, "cpu_share": 0.75},
                   ["parallelism=1", "cpu_share=0.75"], needs(machine.cpu_quota_unavailable)),
            # Parallelism 2 pinned to one CPU (the machine loses a core): the subtasks share half the CPU.
            Target("1 CPU (taskset), parallelism 2", "cores", {**base, "taskset": 1}, ["cpu_share=0.5"],
                   needs(machine.taskset_unavailable)),
        ]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        assert self.python is not None
        out_dir.mkdir(parents=True, exist_ok=True)
        traced = self.trace_every_run or config is self.baseline
        job = {**config, "out": str(out_dir) if traced else None}
        command = [self.python, "-c", JOB, json.dumps(job)]
        if config.get("taskset"):
            command = ["taskset", "-c", ",".join(str(c) for c in range(config["taskset"]))] + command
        limits: dict[str, str] = {}
        if config.get("cpu_share"):
            period = 100_000
            limits = {"cpu.cfs_period_us": str(period),
                      "cpu.cfs_quota_us": str(int(config["cpu_share"] * (os.cpu_count() or 2) * period))}
        read_limits: dict[str, str] = {}
        if config.get("read_bps"):
            read_limits = {"blkio.throttle.read_bps_device":
                           f"{machine.block_device(Path(config['csv']))} {config['read_bps']}"}
        if config.get("csv"):
            # warm: every run reads the files from the page cache; else from the device
            (warm if config.get("warm") else evict)([Path(config["csv"])])
        with cgroup("cpu", limits) as group, cgroup("blkio", read_limits) as io_group:
            # Before the JVM starts, every process of the job is in the groups. Its start-up reads jars that the
            # page cache holds (only the input is evicted), and the runtime measured is the job's own, after it.
            done = self._run_job(command, job, config, [group, io_group])
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} failed: {done.stderr[-2000:]}")
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        runtime = float(json.loads(line.split(" ", 1)[1])["runtime_s"])
        trace = out_dir / "crystalperf-trace.json.gz" if traced else None
        return Run(runtime, trace if trace is not None and trace.exists() else None, runtime)

    def _run_job(self, command: list[str], job: dict[str, Any], config: dict[str, Any],
                 groups: list[Path | None]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(in_cgroups(command[:-1] + [json.dumps(job)], groups), capture_output=True, text=True,
                              timeout=1800)


class ParallelismUpWorkload(FlinkSqlWorkload):
    """The "up" direction for parallelism: a workload traced at parallelism 1, predicted and run at 2."""

    def __init__(self, job: str, *, rows: int) -> None:
        super().__init__(job, rows=rows, parallelism=1)
        self.name = f"{job}-p1"

    def targets(self, quick: bool) -> list[Target]:
        return [Target("parallelism 1->2", "parallelism-up", {**self.baseline, "parallelism": 2}, ["parallelism=2"],
                       self.no_flink)]


def ensure_csv(folder: Path, files: int = CSV_FILES, total_bytes: int = CSV_BYTES) -> Path:
    """``files`` CSV files of ``id,k,v,s`` rows (random values: nothing compresses), ``total_bytes`` in all,
    written once."""
    if folder.is_dir() and len(list(folder.glob("part-*.csv"))) >= files:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    row_id = 0
    for i in range(files):
        partial = folder / f".part-{i:02d}.csv.tmp"
        with open(partial, "w") as f:
            written = 0
            while written < total_bytes // files:
                lines = []
                for _ in range(10_000):
                    row_id += 1
                    lines.append(f"{row_id},{rng.randrange(1000)},{rng.random():.6f},{rng.getrandbits(64):016x}\n")
                chunk = "".join(lines)
                f.write(chunk)
                written += len(chunk)
        partial.rename(folder / f"part-{i:02d}.csv")  # a half-written file never counts as data
    return folder


class CsvScanUpWorkload(FlinkSqlWorkload):
    """The "up" direction for storage: a Flink SQL scan of ≈100 MB of CSV files (filesystem source, evicted from
    the page cache before every run) traced behind a 5 MB/s read limit on their device, predicted and run at
    20 MB/s."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__("csv-scan", parallelism=2)
        self.name = "csv-scan"
        self.data_dir = data_dir
        self.baseline.update(csv=str((data_dir / "flink-csv").resolve()), read_bps=5_000_000)

    def targets(self, quick: bool) -> list[Target]:
        def unavailable() -> str | None:
            return self.no_flink() or machine.disk_throttle_unavailable(self.data_dir)

        return [Target("disk 5->20 MB/s", "disk-up", {**self.baseline, "read_bps": 20_000_000}, ["disk=20MB/s"],
                       unavailable)]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        ensure_csv(Path(config["csv"]))
        return super().run(config, out_dir)


class DownloadUpWorkload(FlinkSqlWorkload):
    """The "up" direction for the network: a PyFlink Python UDF downloading from an HTTP server behind a
    shaped link (``bench.whatif.shaped``): 8 requests of 12.5 MB over two subtasks, traced at 40 Mbit/s
    (≈20 s of transfer), predicted and run at 100 Mbit/s."""

    def __init__(self, *, requests: int = 8, request_bytes: int = 12_500_000) -> None:
        super().__init__("download", parallelism=2)
        self.name = "download"
        self.baseline.update(rate_mbit=40, requests=requests, request_bytes=request_bytes)

    def targets(self, quick: bool) -> list[Target]:
        return [Target("network 40->100 Mbit/s", "network-up", {**self.baseline, "rate_mbit": 100},
                       ["network=100mbit"], lambda: self.no_flink() or shaped.unavailable())]

    def _run_job(self, command: list[str], job: dict[str, Any], config: dict[str, Any],
                 groups: list[Path | None]) -> subprocess.CompletedProcess[str]:
        with shaped.ShapedServer(rate_mbit=config["rate_mbit"], prefix="cpf") as server:
            job = {**job, "url": server.url(config["request_bytes"])}
            return super()._run_job(command, job, config, groups)


def workloads(data_dir: Path, quick: bool) -> list[Any]:
    from bench.whatif.flink_cluster import WindowClusterWorkload

    jobs: list[Any] = [FlinkSqlWorkload("yahoo", rows=25_000_000)]
    if not quick:
        # traced on 1 Gbit/s links between two TaskManagers in network namespaces, predicted on slower ones
        jobs += [FlinkSqlWorkload("wordcount", rows=8_000_000), WindowClusterWorkload(1000, find_python=flink_python),
                 WindowClusterWorkload(1000, rtt=True, find_python=flink_python)]
    return jobs


def up_workloads(data_dir: Path, quick: bool) -> list[Any]:
    """The "up" cases (none in quick mode: each traces a deliberately slow run)."""
    if quick:
        return []
    from bench.whatif.flink_cluster import WindowClusterWorkload

    return [ParallelismUpWorkload("yahoo", rows=25_000_000), ParallelismUpWorkload("wordcount", rows=8_000_000),
            CsvScanUpWorkload(data_dir), DownloadUpWorkload(), WindowClusterWorkload(50, find_python=flink_python),
            WindowClusterWorkload(1000, parallelism=1, find_python=flink_python)]
