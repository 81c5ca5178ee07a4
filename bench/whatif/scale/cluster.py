"""Scale cases on the namespace cluster (``bench.cluster``): two hosts, each in a network namespace of its own on a
``tc``-shaped link, each with a CPU quota of one core (a cgroup v1 ``cpu.cfs_quota_us`` per host; its workers or
TaskManager and everything they start are in it) instead of CPUs of its own. Every run is traced.

- Spark ``cluster-sha``: the CPU-bound SHA-256 SQL of ``bench.whatif.scale.spark``, executors 1 -> 2 (one core
  each, one per host): the second executor brings its host's core.
- Spark ``cluster-shuffle-link``: the wide-row shuffle join of ``bench.whatif.cluster`` on 50 Mbit/s links, workers
  of two cores, executors 2 -> 4 (two per host, one core each): the bytes that cross the links are the same, and
  the quota gives no host more CPU; the link is the ceiling.
- Flink ``cluster-sha``: a streaming job hashing a bounded datagen sequence (``SHA512(SHA256(...))``, 3.2 M rows:
  about 10 s at parallelism 1), one slot per TaskManager, parallelism 1 -> 2: the second subtask runs on the other
  host's core. The sequence source keeps its subtask's values in memory, so at parallelism 1 the TaskManager's heap
  (about 150 MB of a 1 GB process) is two thirds full of live data and its collector takes half its CPU.
- Flink ``cluster-heap``: the same job at parallelism 1, TaskManagers of 1 GB -> 1.5 GB (a heap of about 150 ->
  400 MB): the heap is the ceiling the change lifts. A cluster per size, started again when the size changes.

One cluster per case, started before its first run, warmed up with untraced runs and removed after the case.
The runtime is the application's span (Spark) or the job's net runtime (Flink).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.whatif import machine
from bench.whatif.cluster import JOB as SHUFFLE_JOB
from bench.whatif.flink_cluster import collect_trace
from bench.whatif.interpreters import flink_python, spark_python
from bench.whatif.runner import Run, Target
from bench.whatif.scale.spark import SHA_ROWS, run_job
from bench.whatif.shared_cluster import SharedCluster

HOST_CORES = 1.0  # each host's CPU quota
LINK_MBIT = 50
SHUFFLE_ROWS = 40_000
SHUFFLE_WIDTH = 1600
WARM_UP = 1  # untraced applications or jobs before the first measured run on a fresh cluster
FLINK_ROWS = 3_200_000
TM_MEMORY = "1024m"  # taskmanager.memory.process.size: a heap of about 150 MB

FLINK_JOB = textwrap.dedent('''
    import json, sys
    config = json.loads(sys.argv[1])
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment
    conf = Configuration()
    for key, value in config["conf"].items():
        conf.set_string(key, value)
    env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build())
    env.execute_sql(f"""CREATE TABLE gen (id BIGINT) WITH ('connector' = 'datagen', 'fields.id.kind' = 'sequence',
        'fields.id.start' = '1', 'fields.id.end' = '{config["rows"]}', 'rows-per-second' = '1000000000')""")
    env.execute_sql("CREATE TABLE sink (h STRING) WITH ('connector' = 'blackhole')")
    query = "INSERT INTO sink SELECT SHA512(SHA512(SHA512(SHA256(CAST(id AS STRING))))) FROM gen"
    if config.get("out"):
        from crystalperf.integrations import flink as cpflink
        cpflink.record_plan(env, config["out"], query)
    result = env.execute_sql(query)
    result.wait()
    client = result.get_job_client()
    runtime = client.get_job_execution_result().result().get_net_runtime() / 1000
    print("RESULT", json.dumps({"runtime_s": runtime, "job_id": str(client.get_job_id())}))
''')


def _unavailable(python: str | None, framework: str) -> str | None:
    from bench.cluster import unavailable

    if python is None:
        return f"{framework} is not installed (set CRYSTALPERF_{framework.upper()}_PYTHON)"
    return unavailable() or machine.cpu_quota_unavailable()


class SparkClusterCase:
    """A Spark application on two namespaced workers with a one-core quota each, traced at ``executors`` and re-run
    at ``target`` executors."""

    framework = "spark"
    where = "cluster"
    workers = ("w0", "w1")

    def __init__(self, name: str, job: str, *, executors: int, target: int, worker_cores: int, rate_mbit: int,
                 ceiling: str | None = None) -> None:
        self.name, self.job, self.ceiling = name, job, ceiling
        self.python = spark_python()
        self.baseline: dict[str, Any] = {"executors": executors, "rate_mbit": rate_mbit}
        self.target = target
        self.worker_cores = worker_cores
        # the master spreads the executors over the workers: beyond one each, they share the workers' hosts, which
        # the what-if says with ``hosts`` (it keeps the traced executors per host otherwise)
        from crystalperf.core.profile.machine import scaled_hosts

        self.hosts = min(target, len(self.workers))
        shared = self.hosts != scaled_hosts(min(executors, len(self.workers)), executors, target)
        self.expect = ("executors", "hosts") if shared else ("executors",)

        def start(net: Any) -> Any:
            from bench.cluster import SparkCluster

            return SparkCluster(net, Path(tempfile.mkdtemp(prefix="scale-cluster-")), cores=worker_cores,
                                cpu_quota=HOST_CORES)

        self.cluster = SharedCluster(list(self.workers), start)

    def targets(self, quick: bool) -> list[Target]:
        e, q = self.baseline["executors"], self.target
        link = f", {self.baseline['rate_mbit']} Mbit/s links" if self.baseline["rate_mbit"] < 1000 else ""
        return [Target(f"executors {e} -> {q}{link}", "executors-up" if q > e else "executors",
                       {**self.baseline, "executors": q},
                       [f"executors={q}"] + ([f"hosts={self.hosts}"] if "hosts" in self.expect else []),
                       lambda: _unavailable(self.python, "spark"))]

    def _job(self, cluster: Any, config: dict[str, Any], out: Path | None) -> tuple[str, dict[str, Any]]:
        conf = {**cluster.driver_conf(), "spark.ui.enabled": "false", "spark.executor.memory": "512m",
                "spark.executor.cores": "1", "spark.cores.max": str(config["executors"])}
        if self.job == "shuffle":
            conf.update({"spark.sql.shuffle.partitions": "4", "spark.sql.autoBroadcastJoinThreshold": "-1",
                         "spark.sql.adaptive.enabled": "false", "spark.shuffle.compress": "false"})
            job = {"conf": conf, "executors": config["executors"], "rows": SHUFFLE_ROWS, "width": SHUFFLE_WIDTH}
            return SHUFFLE_JOB, {**job, "out": str(out) if out else None}
        from bench.whatif.scale.spark import JOB

        return JOB, {"case": "sha", "rows": SHA_ROWS, "conf": conf, "executors": config["executors"],
                     "out": str(out) if out else None}

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        assert self.python is not None
        cluster = self.cluster.get(config["rate_mbit"])
        if self.cluster.fresh:
            for _ in range(WARM_UP):
                self._submit(cluster, *self._job(cluster, config, None))
            self.cluster.fresh = False
        runtime = self._submit(cluster, *self._job(cluster, config, out_dir))
        trace = out_dir / "crystalperf-trace.json.gz"
        return Run(runtime, trace if trace.exists() else None, runtime)

    def _submit(self, cluster: Any, script: str, job: dict[str, Any]) -> float:
        assert self.python is not None
        if script is SHUFFLE_JOB:
            done = subprocess.run([self.python, "-c", script, json.dumps(job)], env=cluster.driver_env(),
                                  capture_output=True, text=True, timeout=1800)
            if done.returncode != 0:
                raise RuntimeError(f"{self.name} failed: {done.stderr[-2000:]}")
            line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
            return float(json.loads(line.split(" ", 1)[1])["runtime_s"])
        return run_job(self.python, job, env=cluster.driver_env())

    def close(self) -> None:
        self.cluster.close()


class FlinkClusterCase:
    """The hashing job on two namespaced TaskManagers of one slot and a one-core quota each: parallelism 1 -> 2, or
    (``memory``) the TaskManagers' process size at parallelism 1."""

    framework = "flink"
    where = "cluster"
    ceiling: str | None = None

    def __init__(self, name: str = "cluster-sha", memory: tuple[str, str] | None = None) -> None:
        self.python = flink_python()
        self.name = name
        self.memory = memory
        self.expect = ("memory",) if memory else ("parallelism",)
        self.baseline: dict[str, Any] = {"parallelism": 1, "rate_mbit": 1000, "memory": memory[0] if memory else TM_MEMORY}
        self.clusters: dict[str, SharedCluster] = {}

    def _cluster(self, memory: str) -> SharedCluster:
        """The cluster of TaskManagers of ``memory``; another size's is stopped first (they share the hosts)."""
        for size, other in self.clusters.items():
            if size != memory:
                other.close()
        if memory not in self.clusters:
            def start(net: Any) -> Any:
                from bench.cluster import FlinkCluster

                workdir = Path(tempfile.mkdtemp(prefix="scale-flink-cluster-"))
                return FlinkCluster(net, workdir, out=workdir / "reports", cpu_quota=HOST_CORES, memory=memory)

            self.clusters[memory] = SharedCluster(["t0", "t1"], start)
        return self.clusters[memory]

    def targets(self, quick: bool) -> list[Target]:
        if self.memory:
            return [Target(f"TaskManagers {self.memory[0]} -> {self.memory[1]}", "memory-up",
                           {**self.baseline, "memory": self.memory[1]}, [], lambda: _unavailable(self.python, "flink"))]
        return [Target("parallelism 1 -> 2", "parallelism-up", {**self.baseline, "parallelism": 2},
                       ["parallelism=2"], lambda: _unavailable(self.python, "flink"))]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        shared = self._cluster(config["memory"])
        cluster = shared.get(config["rate_mbit"])
        conf = {**cluster.client_config(), "parallelism.default": str(config["parallelism"]),
                "pipeline.name": f"scale-{self.name}"}
        job = {"conf": conf, "rows": FLINK_ROWS, "out": str(cluster.out)}
        if shared.fresh:
            for _ in range(WARM_UP + 1):  # the TaskManagers' JVMs are cold: a job longer than the Spark warm-up
                self._submit({**job, "out": None})
            shared.fresh = False
        started = time.perf_counter()
        result = self._submit(job)
        wall = time.perf_counter() - started
        trace = collect_trace(cluster.out, result["job_id"], config["parallelism"], out_dir / "crystalperf-trace.json.gz")
        return Run(float(result["runtime_s"]), trace, wall)

    def _submit(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.python is not None
        done = subprocess.run([self.python, "-c", FLINK_JOB, json.dumps(job)], capture_output=True, text=True,
                              timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"flink {self.name} failed: {done.stderr[-2000:]}")
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        result: dict[str, Any] = json.loads(line.split(" ", 1)[1])
        return result

    def close(self) -> None:
        for cluster in self.clusters.values():
            cluster.close()


def cases(data_dir: Path) -> list[Any]:
    return [
        SparkClusterCase("cluster-sha", "sha", executors=1, target=2, worker_cores=1, rate_mbit=1000),
        SparkClusterCase("cluster-shuffle-link", "shuffle", executors=2, target=4, worker_cores=2,
                         rate_mbit=LINK_MBIT, ceiling="link"),
        FlinkClusterCase(),
        FlinkClusterCase("cluster-heap", memory=(TM_MEMORY, "1536m")),
    ]
