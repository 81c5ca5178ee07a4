"""Spark workloads of the what-if benchmark (paper Table 3): TPC-H Q6 (short) and Q9 (long) on data
generated once by ``crystalperf demo``'s generator, each run a fresh local Spark application.

The runtime is the application's span as the trace defines it: from the SparkContext's start to the
end of the query (``spark.stop()`` excluded, in every run). Runs use the Spark environment:
``$CRYSTALPERF_SPARK_PYTHON``, else this interpreter when it has pyspark, else the nox ``spark``
session's. Real variations: cores (``local[2]`` -> ``local[1]``), CPU share (cgroup CPU quota),
memory (driver memory small enough to spill -> enough), storage bandwidth (a cgroup read limit on the
data's device, with the parquet files evicted from the page cache before every run).

"Up" cases (``up_workloads``) are traced on a throttled resource and predicted on a faster one, so that a
prediction must start from what the job saw rather than from assumed hardware: a text scan behind a 5 MB/s
cgroup read limit -> 20 MB/s (and from a cold start, its JVM's jars read through the limit too, -> 10 MB/s); tasks downloading from a server behind a 40 Mbit/s link
(``bench.whatif.shaped``) -> 100 Mbit/s; TPC-H Q6 at ``local[1]`` -> ``local[2]``. Their target kinds end in
``-up`` (``disk-up``, ``network-up``, ``cores-up``), which is how the results tell them from the others.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from bench.fidelity.machine import evict
from bench.whatif import machine, shaped
from bench.whatif.interpreters import spark_python
from bench.whatif.machine import cgroup
from bench.whatif.runner import Run, Target

JOB = textwrap.dedent('''
    import json, sys, time
    config = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession
    from crystalperf.integrations.spark.demo import Q6, Q9
    builder = (SparkSession.builder.appName("whatif-" + config["query"]).master(config["master"])
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "8").config("spark.sql.adaptive.enabled", "false")
               .config("spark.driver.memory", config["memory"]))
    if config.get("out"):
        from crystalperf.integrations.spark import configure
        builder = configure(builder, output_dir=config["out"]).config("spark.crystalperf.analysis", "false")
    spark = builder.getOrCreate()
    for name in ("lineitem", "orders", "part", "supplier", "partsupp", "nation"):
        spark.read.parquet(config["data"] + "/" + name).createOrReplaceTempView(name)
    # Resource limits apply to the query: the JVM's start-up reads hundreds of MB of jars, which a
    # read limit on the same device would turn into minutes of waiting. The driver JVM (where local
    # executors run) and this Python process join the limited cgroups.
    import os
    pids = [os.getpid(), spark.sparkContext._gateway.proc.pid]
    for group in config.get("cgroups", []):
        for pid in pids:
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(pid))
    rows = spark.sql({"q6": Q6, "q9": Q9}[config["query"]]).collect()
    end = time.time()
    print("RESULT", json.dumps({"runtime_s": end - spark.sparkContext.startTime / 1000, "rows": len(rows)}))
    spark.stop()
''')


NETWORK_NOT_WIRED = ("local mode shuffles inside one JVM: no link to shape; the network cases run on a two-worker "
                     "cluster in network namespaces (workloads shuffle-cluster-*)")


def ensure_data(folder: Path, python: str, scale: float) -> Path:
    """TPC-H-shaped parquet tables, generated once per scale."""
    data = folder / f"tpch-{scale:g}"
    if not (data / f"_scale_{scale}").exists():
        data.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, "-m", "crystalperf.integrations.spark.demo", str(data), str(scale)], check=True,
                       capture_output=True)
    return data


class TpchWorkload:
    """One TPC-H query as a Spark application."""

    framework = "spark"

    def __init__(self, query: str, data_dir: Path, *, scale: float = 8.0) -> None:
        self.name = f"tpch-{query}"
        self.query = query
        self.data_dir = data_dir
        self.scale = scale
        self.python = spark_python()
        # Q9's joins spill with a small driver heap: its baseline is the small heap, the target enough.
        memory = "1g" if query == "q9" else "2g"
        self.baseline: dict[str, Any] = {"query": query, "master": "local[2]", "memory": memory}
        self._data: Path | None = None

    def data(self) -> Path:
        if self._data is None:
            assert self.python is not None
            self._data = ensure_data(self.data_dir, self.python, self.scale)
        return self._data

    def targets(self, quick: bool) -> list[Target]:
        base = self.baseline
        no_spark = (lambda: None) if self.python else (lambda: "pyspark is not installed (set CRYSTALPERF_SPARK_PYTHON)")

        def needs(probe: Any) -> Any:
            return lambda: no_spark() or probe()

        targets = [
            Target("cores 2->1", "cores", {**base, "master": "local[1]"}, ["cores=1"], no_spark),
            Target("cpu share 50%", "cpu_share", {**base, "cpu_share": 0.5}, ["cpu_share=0.5"],
                   needs(machine.cpu_quota_unavailable)),
        ]
        if quick:
            return targets
        disk_probe = lambda: machine.disk_throttle_unavailable(self.data_dir)  # noqa: E731
        targets += [
            Target("cpu share 75%", "cpu_share", {**base, "cpu_share": 0.75}, ["cpu_share=0.75"],
                   needs(machine.cpu_quota_unavailable)),
            Target("disk 20 MB/s", "disk", {**base, "read_bps": 20_000_000}, ["disk=20MB/s"], needs(disk_probe)),
        ]
        # Local mode shuffles inside one JVM: there is no link to shape. The network cases run on a cluster in
        # network namespaces (bench.whatif.cluster); this one is listed so the report shows it as skipped.
        targets.append(Target("network 100 Mbit/s", "network", {**base, "network_bps": 12_500_000},
                              ["network=100mbit"], lambda: no_spark() or NETWORK_NOT_WIRED))
        if self.query == "q9":
            targets.append(Target("memory 1g->3g", "memory", {**base, "memory": "3g"}, ["memory=3g"], no_spark))
        else:
            # local[2] pinned to one CPU (the machine loses a core): still two task slots, which share
            # half the CPU the traced run had -- what crystalperf is asked.
            targets.append(Target("1 CPU (taskset), 2 slots", "cores", {**base, "taskset": 1}, ["cpu_share=0.5"],
                                  needs(machine.taskset_unavailable)))
        return targets

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        assert self.python is not None
        out_dir.mkdir(parents=True, exist_ok=True)
        traced = config is self.baseline
        job = {**config, "data": str(self.data()), "out": str(out_dir) if traced else None}
        command = [self.python, "-c", JOB, json.dumps(job)]
        if config.get("taskset"):
            command = ["taskset", "-c", ",".join(str(c) for c in range(config["taskset"]))] + command
        cpu_limits: dict[str, str] = {}
        if config.get("cpu_share"):
            period = 100_000
            cpu_limits = {"cpu.cfs_period_us": str(period),
                          "cpu.cfs_quota_us": str(int(config["cpu_share"] * (os.cpu_count() or 2) * period))}
        read_limits: dict[str, str] = {}
        if config.get("read_bps"):
            read_limits = {"blkio.throttle.read_bps_device": f"{machine.block_device(self.data())} {config['read_bps']}"}
        evict([table for table in self.data().iterdir() if table.is_dir()])
        with cgroup("cpu", cpu_limits) as cpu_group, cgroup("blkio", read_limits) as io_group:
            job["cgroups"] = [str(g) for g in (cpu_group, io_group) if g is not None]
            command = command[:-1] + [json.dumps(job)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} failed: {done.stderr[-2000:]}")
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        runtime = float(json.loads(line.split(" ", 1)[1])["runtime_s"])
        trace = out_dir / "crystalperf-trace.json.gz" if traced else None
        return Run(runtime, trace if trace is not None and trace.exists() else None, runtime)


def workloads(data_dir: Path, quick: bool) -> list[Any]:
    from bench.whatif.cluster import ShuffleClusterWorkload

    queries = ("q6",) if quick else ("q6", "q9")
    found: list[Any] = [TpchWorkload(q, data_dir) for q in queries]
    # traced on 1 Gbit/s links, predicted on slower ones and on one executor
    return found if quick else [*found, ShuffleClusterWorkload(data_dir, 1000, find_python=spark_python),
                                ShuffleClusterWorkload(data_dir, 1000, rtt=True, find_python=spark_python)]


# -- "up" cases: traced on a throttled resource, predicted on a faster one --------------------------------

UP_JOB = textwrap.dedent('''
    import json, os, sys, time
    config = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession
    builder = (SparkSession.builder.appName("whatif-" + config["case"]).master(config["master"])
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.sql.files.maxPartitionBytes", str(16 * 1024 * 1024)))
    if config.get("out"):
        from crystalperf.integrations.spark import configure
        builder = configure(builder, output_dir=config["out"]).config("spark.crystalperf.analysis", "false")
    # A cold start joins before the JVM starts (the JVM inherits the group) and reads its jars through the limit;
    # otherwise the limits are joined after start-up, as the TPC-H job does: the start-up reads hundreds of MB.
    joined = [os.getpid()] if config.get("cold_start") else []
    for group in config.get("cgroups", []) if joined else []:
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    for group in config.get("cgroups", []) if not joined else []:
        for pid in (os.getpid(), sc._gateway.proc.pid):
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(pid))
    if config["case"] == "scan":
        lines = spark.read.text(config["data"])
        result = lines.filter(lines.value.contains("ffff")).count()
    else:
        url = config["url"]

        def download(partition):
            import urllib.request
            received = 0
            with urllib.request.urlopen(url, timeout=120) as response:
                while True:
                    chunk = response.read(1 << 18)
                    if not chunk:
                        break
                    received += len(chunk)
            yield received

        result = sc.parallelize(range(config["tasks"]), config["tasks"]).mapPartitions(download).sum()
    end = time.time()
    print("RESULT", json.dumps({"runtime_s": end - sc.startTime / 1000, "result": result}))
    spark.stop()
''')

SCAN_FILES = 12
SCAN_FILE_BYTES = 8 * 1024 * 1024  # one task each (maxPartitionBytes 16 MB packs one 8 MB file per split)
DOWNLOAD_TASKS = 8
DOWNLOAD_TASK_BYTES = 12_500_000  # 100 MB in all: about 21 s at 40 Mbit/s


def ensure_text(folder: Path, files: int = SCAN_FILES, size: int = SCAN_FILE_BYTES) -> Path:
    """Text files of random hex lines: incompressible for the device, cheap for the CPU to scan."""
    data = folder / f"scan-text-{files}x{size}"
    marker = data / "_complete"
    if marker.exists():
        return data
    data.mkdir(parents=True, exist_ok=True)
    for part in range(files):
        with (data / f"part-{part:03d}.txt").open("wb") as f:
            while f.tell() < size:
                block = os.urandom(min(512 * 1024, (size - f.tell()) // 2 + 1)).hex().encode()
                f.write(b"\n".join(block[i:i + 127] for i in range(0, len(block), 127)) + b"\n")
            f.flush()
            os.fsync(f.fileno())
    marker.write_text("")
    return data


def _not_installed(python: str | None) -> Any:
    return (lambda: None) if python else (lambda: "pyspark is not installed (set CRYSTALPERF_SPARK_PYTHON)")


def _run_up_job(python: str, job: dict[str, Any], cgroups: list[Path]) -> float:
    job = {**job, "cgroups": [str(g) for g in cgroups]}
    done = subprocess.run([python, "-c", UP_JOB, json.dumps(job)], capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"spark {job['case']} job failed: {done.stderr[-2000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return float(json.loads(line.split(" ", 1)[1])["runtime_s"])


class ScanUpWorkload:
    """A text scan (~100 MB, evicted from the page cache before every run) traced behind a 5 MB/s cgroup
    read limit on the data's device, predicted and re-run at 20 MB/s."""

    framework = "spark"
    name = "scan-up"
    target_mb_s = 20  # the read limit of the re-runs, MB/s
    target_note = ""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.python = spark_python()
        self.baseline: dict[str, Any] = {"case": "scan", "master": "local[2]", "read_bps": 5_000_000}

    def targets(self, quick: bool) -> list[Target]:
        no_spark = _not_installed(self.python)
        mb_s = self.target_mb_s
        return [Target(f"disk 5->{mb_s} MB/s{self.target_note}", "disk-up",
                       {**self.baseline, "read_bps": mb_s * 1_000_000}, [f"disk={mb_s}MB/s"],
                       lambda: no_spark() or machine.disk_throttle_unavailable(self.data_dir))]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        assert self.python is not None
        out_dir.mkdir(parents=True, exist_ok=True)
        traced = config is self.baseline
        data = ensure_text(self.data_dir)
        job = {**config, "data": str(data), "out": str(out_dir) if traced else None}
        limits = {"blkio.throttle.read_bps_device": f"{machine.block_device(data)} {config['read_bps']}"}
        evict([data])
        with cgroup("blkio", limits) as group:
            runtime = _run_up_job(self.python, job, [group] if group is not None else [])
        trace = out_dir / "crystalperf-trace.json.gz"
        return Run(runtime, trace if traced and trace.exists() else None, runtime)


class ColdScanUpWorkload(ScanUpWorkload):
    """The text scan behind a 5 MB/s read limit from a cold start: the process joins the limit before its JVM starts,
    and the JVM's own files (Spark's jars, the JDK's modules) are evicted from the page cache with the data before
    every run, as on a machine whose disk is slow for everything. Predicted and re-run at 10 MB/s: the start-up
    reads after the application began (classes loaded for the first query) are in the runtime and on the device."""

    name = "scan-cold-up"
    target_mb_s = 10
    target_note = ", cold start"

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.baseline = {**self.baseline, "cold_start": True}

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        assert self.python is not None
        evict(jvm_files(self.python))
        return super().run(config, out_dir)


def jvm_files(python: str) -> list[Path]:
    """What a local Spark's JVM reads as it starts: pyspark's jars and the JDK's class modules."""
    found = subprocess.run([python, "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
                           capture_output=True, text=True, timeout=120)
    paths = [Path(found.stdout.strip()) / "jars"] if found.returncode == 0 and found.stdout.strip() else []
    java = shutil.which("java")
    if java:
        home = Path(os.path.realpath(java)).parent.parent
        paths += [p for p in (home / "lib" / "modules", home / "lib" / "server") if p.exists()]
    return [p for p in paths if p.exists()]


class DownloadUpWorkload:
    """Tasks that each download 12.5 MB from a server behind a shaped link: traced at 40 Mbit/s, predicted
    and re-run at 100 Mbit/s. The server lives in its own network namespace for the run; the job's processes
    stay in this one, so their interface counters see the link's traffic."""

    framework = "spark"
    name = "download-up"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.python = spark_python()
        self.baseline: dict[str, Any] = {"case": "download", "master": "local[2]", "tasks": DOWNLOAD_TASKS,
                                         "task_bytes": DOWNLOAD_TASK_BYTES, "rate_mbit": 40}

    def targets(self, quick: bool) -> list[Target]:
        no_spark = _not_installed(self.python)
        return [Target("network 40->100 Mbit/s", "network-up", {**self.baseline, "rate_mbit": 100},
                       ["network=100mbit"], lambda: no_spark() or shaped.unavailable())]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        assert self.python is not None
        out_dir.mkdir(parents=True, exist_ok=True)
        traced = config is self.baseline
        with shaped.ShapedServer(rate_mbit=config["rate_mbit"]) as server:
            job = {**config, "url": server.url(config["task_bytes"]), "out": str(out_dir) if traced else None}
            runtime = _run_up_job(self.python, job, [])
        trace = out_dir / "crystalperf-trace.json.gz"
        return Run(runtime, trace if traced and trace.exists() else None, runtime)


class TpchCoresUpWorkload(TpchWorkload):
    """TPC-H Q6 traced at ``local[1]``, predicted and re-run at ``local[2]``."""

    def __init__(self, data_dir: Path, *, scale: float = 8.0) -> None:
        super().__init__("q6", data_dir, scale=scale)
        self.name = "tpch-q6-up"
        self.baseline = {**self.baseline, "master": "local[1]"}

    def targets(self, quick: bool) -> list[Target]:
        return [Target("cores 1->2", "cores-up", {**self.baseline, "master": "local[2]"}, ["cores=2"],
                       _not_installed(self.python))]


def up_workloads(data_dir: Path, quick: bool) -> list[Any]:
    """The "up" cases (none in quick mode: each traces a deliberately slow run)."""
    if quick:
        return []
    from bench.whatif.cluster import ShuffleClusterWorkload

    return [ScanUpWorkload(data_dir), ColdScanUpWorkload(data_dir), DownloadUpWorkload(data_dir),
            TpchCoresUpWorkload(data_dir),
            ShuffleClusterWorkload(data_dir, 50, find_python=spark_python)]
