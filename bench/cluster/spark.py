"""A Spark standalone cluster from the pip-installed pyspark: the master in the root namespace on the network's
gateway address, one worker per host in the host's namespace.

    with Network(["w0", "w1"], link=Link(rate_mbit=50)) as net, SparkCluster(net, logs) as spark:
        builder = SparkSession.builder
        for key, value in spark.driver_conf().items():
            builder = builder.config(key, value)
        # run the driver with spark.driver_env() in its environment (the root namespace)

Workers launch their executors in their own namespace (an executor inherits the worker's namespace and
environment), so executors talk to each other, to the driver and to the master over the shaped links.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from .netns import Network, free_port, host_cpus, pinned

# The key under which the links reach the trace: the listener records every Spark property
# (environment.properties), so the analysis of a trace can tell which link each executor host had.
LINKS_PROPERTY = "spark.crystalperf.cluster.links"


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class SparkCluster:
    """A master and one worker per host of ``network`` (``cores`` and ``memory`` each), logs in ``workdir``.
    Starting waits until every worker has registered with the master.

    ``pin``: each worker (and the executors it launches) runs on ``cores`` CPUs of its own (``host_cpus``); the
    master and the driver are not pinned. ``cpu_quota``: each worker and its executors may use that many CPUs'
    worth of time (a cgroup CPU quota per host, ``Network.cpu_quota_group``), as on a host of that many cores."""

    def __init__(self, network: Network, workdir: Path, *, cores: int = 1, memory: str = "1g",
                 start_timeout_s: float = 240, pin: bool = False, cpu_quota: float | None = None) -> None:
        self.network = network
        self.workdir = Path(workdir)
        self.cores = cores
        self.memory = memory
        self.start_timeout_s = start_timeout_s
        self.cpus: list[str | None] = [*host_cpus(len(network.hosts), cores)] if pin else [None] * len(network.hosts)
        self.cpu_quota = cpu_quota
        self.master_url = ""
        self.webui_port = 0
        self.master_pid = 0
        self.worker_pids: list[int] = []

    def __enter__(self) -> SparkCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def hosts(self) -> list[str]:
        """The workers' addresses, as executors report their host."""
        return [h.address for h in self.network.hosts]

    def _env(self, local_ip: str) -> dict[str, str]:
        home = _spark_home()
        return dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP=local_ip, PYSPARK_PYTHON=sys.executable,
                    SPARK_WORKER_DIR=str(self.workdir / "work"),
                    # names the JVMs in ps; the network's tag in their environment is what cleanup goes by
                    SPARK_DAEMON_JAVA_OPTS=f"-Dcrystalperf.cluster={self.network.prefix}")

    def start(self) -> None:
        spark_class = str(_spark_home() / "bin" / "spark-class")
        gateway = self.network.gateway
        port, self.webui_port = free_port(gateway), free_port(gateway)
        self.master_url = f"spark://{gateway}:{port}"
        logs = self.workdir / "logs"
        master = self.network.popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", gateway, "--port", str(port),
             "--webui-port", str(self.webui_port)], env=self._env(gateway), log=logs / "master.log")
        self.master_pid = master.pid
        for i, host in enumerate(self.network.hosts):
            # a namespace has its own ports; on loopback the workers share this one's
            ui = 8081 if host.namespace else free_port(gateway)
            worker = self.network.popen(
                pinned([spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", host.address,
                        "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(ui),
                        "--work-dir", str(self.workdir / f"work{i}")], self.cpus[i]),
                host=host if host.namespace else None, env=self._env(host.address), log=logs / f"worker-{host.name}.log",
                cgroups=[self.network.cpu_quota_group(host, self.cpu_quota)] if self.cpu_quota else [])
            self.worker_pids.append(worker.pid)
        self._wait_for_workers()

    def _alive_workers(self) -> list[dict]:
        url = f"http://{self.network.gateway}:{self.webui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                state = json.load(response)
        except (OSError, ValueError):
            return []
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while len(self._alive_workers()) < len(self.network.hosts):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(self._alive_workers())} of {len(self.network.hosts)} workers registered "
                                   f"in {self.start_timeout_s:g} s:\n{self.logs()}")
            time.sleep(0.5)

    def logs(self, tail: int = 2000) -> str:
        """The last ``tail`` characters of each process's log, for failure messages."""
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-tail:]}"
                         for p in sorted((self.workdir / "logs").glob("*.log")))

    def driver_conf(self) -> dict[str, str]:
        """What a driver in the root namespace sets: the master, the address executors reach it at (the gateway;
        the machine's host name would resolve to an address the namespaces cannot reach), one executor per
        worker, and the links (recorded in the trace's environment.properties)."""
        gateway = self.network.gateway
        return {
            "spark.master": self.master_url,
            "spark.driver.host": gateway,
            "spark.driver.bindAddress": gateway,
            "spark.executor.cores": str(self.cores),
            "spark.cores.max": str(self.cores * len(self.network.hosts)),
            LINKS_PROPERTY: self.network.links(),
        }

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver process: this one's plus the address Spark binds to and the Python the
        executors run (the same interpreter)."""
        return dict(os.environ, SPARK_LOCAL_IP=self.network.gateway, PYSPARK_PYTHON=sys.executable)

    def executors(self, app_id: str) -> list[int]:
        """The pids of the executor JVMs of application ``app_id``."""
        return [pid for pid, cmd in self.network.processes().items()
                if "CoarseGrainedExecutorBackend" in cmd and app_id in cmd]

    def stop(self) -> None:
        """Stop the master, the workers and the executors (the network's processes); the network stays."""
        self.network.stop_processes()
