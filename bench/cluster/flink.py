"""A standalone Flink cluster from the apache-flink wheel's scripts (``pyflink/bin``, ``pyflink/lib``): the
JobManager in the root namespace on the network's gateway address, one TaskManager per host in the host's
namespace, each started in the foreground (``start-foreground``) so that the harness owns the JVM.

    with Network(["t0", "t1"], link=Link(rate_mbit=50)) as net, FlinkCluster(net, workdir, out) as flink:
        config = Configuration()
        for key, value in flink.client_config().items():
            config.set_string(key, value)

With ``reporter=True`` the crystalperf reporter is in every process's ``lib/`` and configured cluster-wide
(``crystalperf.integrations.flink.configuration(out)``): each process writes its part of a job to ``out``.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from .netns import Network, free_port, host_cpus, pinned

# In every process's configuration: the links, readable through the REST API (/jobmanager/config,
# /taskmanagers/<id>/...); the reporter records no configuration, so they do not reach the trace.
LINKS_KEY = "crystalperf.cluster.links"


def _flink_home() -> Path:
    import pyflink

    return Path(pyflink.__file__).parent


def wheel_java_opts(home: Path) -> str:
    """The ``env.java.opts.all`` of the wheel's own config.yaml (the --add-opens Flink needs on Java 17)."""
    lines = (home / "conf" / "config.yaml").read_text().splitlines()
    return next(line.split("all:", 1)[1].strip() for line in lines if line.strip().startswith("all: --add"))


class FlinkCluster:
    """A JobManager and one TaskManager (``slots`` slots) per host of ``network``; files under ``workdir``.
    ``out``: where the reporter writes (None: no reporter). ``config``: more configuration for every process.
    Starting waits until every TaskManager has registered. ``pin``: each TaskManager runs on ``slots`` CPUs of its
    own (``host_cpus``); the JobManager and the client are not pinned. ``cpu_quota``: each TaskManager may use that
    many CPUs' worth of time (a cgroup CPU quota per host, ``Network.cpu_quota_group``), as on a host of that many
    cores."""

    def __init__(self, network: Network, workdir: Path, out: Path | None = None, *, slots: int = 1,
                 memory: str = "1024m", config: Mapping[str, str] | None = None, start_timeout_s: float = 240,
                 pin: bool = False, cpu_quota: float | None = None) -> None:
        self.network = network
        self.workdir = Path(workdir)
        self.out = out
        self.slots = slots
        self.memory = memory
        self.extra = dict(config or {})
        self.start_timeout_s = start_timeout_s
        self.cpus: list[str | None] = [*host_cpus(len(network.hosts), slots)] if pin else [None] * len(network.hosts)
        self.cpu_quota = cpu_quota
        self.rest_port = 0

    def __enter__(self) -> FlinkCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def hosts(self) -> list[str]:
        """The TaskManagers' addresses (their ``taskmanager.host``)."""
        return [h.address for h in self.network.hosts]

    def _lib(self, home: Path) -> Path:
        """The wheel's jars plus the reporter's, as a user puts the reporter in a cluster's lib/."""
        from crystalperf.integrations import flink as cpflink

        lib = self.workdir / "lib"
        lib.mkdir(parents=True, exist_ok=True)
        jars = list((home / "lib").glob("*.jar")) + ([cpflink.jar_path()] if self.out is not None else [])
        for jar in jars:
            if not (lib / jar.name).exists():
                (lib / jar.name).symlink_to(jar)
        return lib

    def _settings(self, home: Path, rpc_port: int) -> dict[str, str]:
        from crystalperf.integrations import flink as cpflink

        gateway = self.network.gateway
        settings = {
            "env.java.opts.all": f"{wheel_java_opts(home)} -Dcrystalperf.cluster={self.network.prefix}",
            "jobmanager.rpc.address": gateway,
            "jobmanager.bind-host": gateway,
            "jobmanager.rpc.port": str(rpc_port),
            "jobmanager.memory.process.size": self.memory,
            "taskmanager.numberOfTaskSlots": str(self.slots),
            "taskmanager.memory.process.size": self.memory,
            "rest.address": gateway,
            "rest.bind-address": gateway,
            "rest.port": str(self.rest_port),
            LINKS_KEY: self.network.links(),
        }
        if self.out is not None:
            # the cluster loads the reporter, and the job status listener, from lib/
            entries = cpflink.configuration(self.out, analyze=False, job_status=True)
            entries.pop("pipeline.jars")
            settings.update(entries)
        settings.update(self.extra)
        return settings

    def _conf_dir(self, name: str, home: Path, settings: Mapping[str, str]) -> Path:
        conf = self.workdir / f"conf-{name}"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "config.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in settings.items()))
        for file in ("log4j.properties", "log4j-console.properties"):
            (conf / file).write_text((home / "conf" / file).read_text())
        return conf

    def _env(self, conf: Path, lib: Path, name: str) -> dict[str, str]:
        log, pids = self.workdir / "log" / name, self.workdir / "pids" / name
        log.mkdir(parents=True, exist_ok=True)
        pids.mkdir(parents=True, exist_ok=True)
        return dict(os.environ, FLINK_CONF_DIR=str(conf), FLINK_LIB_DIR=str(lib), FLINK_LOG_DIR=str(log),
                    FLINK_PID_DIR=str(pids))

    def start(self) -> None:
        home = _flink_home()
        lib = self._lib(home)
        gateway = self.network.gateway
        self.rest_port = free_port(gateway)
        settings = self._settings(home, free_port(gateway))
        jm_conf = self._conf_dir("jobmanager", home, settings)
        self.network.popen(["bash", str(home / "bin" / "jobmanager.sh"), "start-foreground"],
                           env=self._env(jm_conf, lib, "jobmanager"), log=self.workdir / "log" / "jobmanager.out")
        for host, cpus in zip(self.network.hosts, self.cpus, strict=True):
            tm_settings = {**settings, "taskmanager.host": host.address, "taskmanager.bind-host": host.address}
            conf = self._conf_dir(f"taskmanager-{host.name}", home, tm_settings)
            self.network.popen(pinned(["bash", str(home / "bin" / "taskmanager.sh"), "start-foreground"], cpus),
                               host=host if host.namespace else None,
                               env=self._env(conf, lib, f"taskmanager-{host.name}"),
                               log=self.workdir / "log" / f"taskmanager-{host.name}.out",
                               cgroups=[self.network.cpu_quota_group(host, self.cpu_quota)] if self.cpu_quota else [])
        deadline = time.monotonic() + self.start_timeout_s
        while len(self.taskmanagers()) < len(self.network.hosts):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(self.taskmanagers())} of {len(self.network.hosts)} TaskManagers "
                                   f"registered in {self.start_timeout_s:g} s:\n{self.logs()}")
            time.sleep(0.5)

    def taskmanagers(self) -> list[dict]:
        """The registered TaskManagers, as the REST API lists them (``id``, ``path`` with the host's address...)."""
        try:
            with urllib.request.urlopen(f"http://{self.network.gateway}:{self.rest_port}/taskmanagers",
                                        timeout=2) as response:
                return list(json.load(response)["taskmanagers"])
        except (OSError, ValueError, KeyError):
            return []

    def logs(self, tail: int = 2000) -> str:
        """The last ``tail`` characters of each process's logs, for failure messages."""
        return "\n".join(f"== {p.relative_to(self.workdir)}\n{p.read_text(errors='replace')[-tail:]}"
                         for p in sorted((self.workdir / "log").rglob("*")) if p.is_file())

    def client_config(self) -> dict[str, str]:
        """What a PyFlink client in the root namespace sets to submit to this cluster."""
        return {"execution.target": "remote", "rest.address": self.network.gateway, "rest.port": str(self.rest_port)}

    def stop(self) -> None:
        """Stop the JobManager and the TaskManagers (the network's processes); the network stays."""
        self.network.stop_processes()
