"""The Spark integration's contract and the settings that turn it on.

:data:`INTEGRATION` says which pyspark the hooks support and where the bundled jar is;
:func:`spark_conf` / :func:`configure` give a Spark application the listener, the executor plugin and the
PySpark worker sampler, and say where the trace and report go.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, TypeVar

from crystalperf.core.errors import FrameworkNotInstalledError, IntegrationSetupError
from crystalperf.core.record.budget import SHARE_ENV as CPU_BUDGET_ENV
from crystalperf.core.trace import SCHEMA_VERSION
from crystalperf.integrations.base import Integration

log = logging.getLogger(__name__)

# The jar is built for Scala 2.13, i.e. Spark 4.x; the range is the ``spark`` extra's pin. A job is resized
# by its executors' cores and by the number of executors.
INTEGRATION = Integration(name="spark", module="pyspark", distributions=("pyspark",), minimum=(4, 0),
                          below=(4, 4), jar="crystalperf-spark.jar", scaling=("cores", "executors"))

LISTENER = "org.crystalperf.spark.CrystalPerfListener"
PLUGIN = "org.crystalperf.spark.CrystalPerfPlugin"
EXECUTOR_ENV = "spark.executorEnv."
# Plugins Spark loads besides those of spark.plugins (SparkConf's PLUGINS is prepended with this list).
DEFAULT_PLUGINS = "spark.plugins.defaultList"
PYTHON_DAEMON = "crystalperf.integrations.spark.pydaemon"
# Where the PySpark workers write their samples (set in the executors' environment).
SPOOL_ENV = "CRYSTALPERF_SPARK_SPOOL"
# One file per worker process in the spool; the finish step merges every one it finds.
SPOOL_FILE = "pyworker-{pid}.json"
# Beside it, the CPU seconds the worker process spent on each task (Spark's executorCpuTime counts only the
# JVM task thread, which mostly waits for the worker) and, where /proc says, the seconds its threads queued
# for a core: {"tasks": [{"operation", "task", "cpu_time_s", "cpu_wait_s"?}]}.
SPOOL_CPU_FILE = "pycpu-{pid}.json"

B = TypeVar("B")


class SparkSetupError(IntegrationSetupError):
    """The Spark hooks cannot be used in this process as it is; the message names the fix."""


def spark_version() -> str:
    """The installed pyspark's version; FrameworkNotInstalledError (naming the extra) when it is missing."""
    version = INTEGRATION.version()
    if version is None:
        raise FrameworkNotInstalledError(INTEGRATION.module, INTEGRATION.extra)
    return version


def check_installation() -> Path:
    """The bundled jar, after checking that pyspark is a supported version and that the jar exists and
    matches its Java sources."""
    INTEGRATION.check()
    return INTEGRATION.jar_path()


def _python_can_sample(python: str) -> bool:
    """Whether the Python that runs the workers can import our worker hook (else it would break them)."""
    try:
        done = subprocess.run([python, "-c", f"import {PYTHON_DAEMON}"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _check_no_plain_jvm() -> None:
    """A SparkContext created earlier in this process started the JVM without our jar; the listener
    could not be loaded into it, and Spark would fail the next session at start-up."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is None:
        return
    try:
        loadable = bool(jvm.org.apache.spark.util.Utils.classIsLoadable(LISTENER))
    except Exception:  # the gateway is gone: a new JVM will be started
        return
    if not loadable:
        raise SparkSetupError(
            "this Python process already started Spark without crystalperf's jar: call "
            "crystalperf.integrations.spark.configure() on the first SparkSession builder of the process")


def _append(existing: dict[str, str], key: str, value: str) -> str:
    """``existing[key]`` (a comma-separated list) with value added once."""
    items = [v for v in existing.get(key, "").split(",") if v]
    return ",".join(items if value in items else [*items, value])


def _worker_python(existing: dict[str, str], python_sampling: bool) -> str:
    """The Python the PySpark workers will run, pointing local workers at this one when nothing chose."""
    master = existing.get("spark.master", os.environ.get("MASTER", "local"))
    if (python_sampling and not os.environ.get("PYSPARK_PYTHON") and "spark.pyspark.python" not in existing
            and master.startswith("local")):
        # Local workers would otherwise run whatever ``python3`` is first on PATH, usually not this
        # environment (so not the user's packages either).
        os.environ["PYSPARK_PYTHON"] = sys.executable
        log.info("crystalperf: PYSPARK_PYTHON set to %s for the local Python workers", sys.executable)
    return existing.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or "python3"


def _python_sampling_conf(existing: dict[str, str], worker_python: str, spool_dir: str | None,
                          pin_worker_python: bool) -> dict[str, str]:
    """The settings that start our sampler in every PySpark worker; none when the workers' Python
    cannot import it (the job must run unchanged then)."""
    if not _python_can_sample(worker_python):
        log.warning("crystalperf: the PySpark workers' Python (%s) cannot import crystalperf; Python "
                    "functions will not be sampled (set PYSPARK_PYTHON to this Python: %s)",
                    worker_python, sys.executable)
        return {}
    spool = spool_dir or tempfile.mkdtemp(prefix="crystalperf-spool-")
    conf: dict[str, str] = {}
    if pin_worker_python and "spark.pyspark.python" not in existing:
        # spark-submit would otherwise start the workers with whatever Python its shell has,
        # which may not import our daemon module (and every Python task would fail).
        conf["spark.pyspark.python"] = worker_python
    conf["spark.python.daemon.module"] = PYTHON_DAEMON
    conf[f"spark.executorEnv.{SPOOL_ENV}"] = spool
    conf["spark.crystalperf.spoolDir"] = spool
    return conf


def spark_conf(existing: dict[str, str] | None = None, *, output_dir: str | None = None,
               sample_interval_ms: int | None = None, python_sampling: bool = True,
               spool_dir: str | None = None, pin_worker_python: bool = False,
               cpu_budget: float | None = None) -> dict[str, str]:
    """The Spark configuration that turns crystalperf on, merged with ``existing`` list-valued settings.

    ``pin_worker_python`` also sets ``spark.pyspark.python`` to the Python checked to import our worker
    hook (for ``spark-submit``, whose workers' Python is otherwise unknown here). ``cpu_budget`` is the hook's
    CPU budget, a share of the cores each process may use (``spark.crystalperf.cpuBudget``, default 0.01; 0:
    the samplers keep their intervals), in the JVMs and in the PySpark workers.
    """
    jar = str(check_installation())
    _check_no_plain_jvm()
    existing = dict(existing or {})
    conf = {
        "spark.jars": _append(existing, "spark.jars", jar),
        # the plugin starts the listener itself, on the queue of Spark's own status listener (a listener named
        # in spark.extraListeners would get a queue and a thread of its own: a thread woken for every event)
        "spark.plugins": _append(existing, "spark.plugins", PLUGIN),
        "spark.crystalperf.python": sys.executable,
        # The listener writes the trace in the schema version of the crystalperf that will read it.
        "spark.crystalperf.schemaVersion": SCHEMA_VERSION,
    }
    if output_dir:
        conf["spark.crystalperf.outputDir"] = str(output_dir)
    if sample_interval_ms:
        conf["spark.crystalperf.sampleIntervalMs"] = str(int(sample_interval_ms))
    if cpu_budget is not None:
        conf["spark.crystalperf.cpuBudget"] = str(float(cpu_budget))
        conf[f"spark.executorEnv.{CPU_BUDGET_ENV}"] = str(float(cpu_budget))
    worker_python = _worker_python(existing, python_sampling)
    if python_sampling and "spark.python.daemon.module" not in existing:
        conf.update(_python_sampling_conf(existing, worker_python, spool_dir, pin_worker_python))
    # What the user set explicitly wins over our defaults.
    return {k: v for k, v in conf.items() if not (k.startswith("spark.crystalperf.") and k in existing)}


def _connect_remote(existing: dict[str, str]) -> str | None:
    """Where a Spark Connect builder connects (``builder.remote(...)``, ``SPARK_REMOTE``, ``spark.api.mode``
    connect): an ``sc://`` server, or the master of the server PySpark starts in this process; None for a classic
    session."""
    remote = existing.get("spark.remote") or os.environ.get("SPARK_REMOTE")
    if remote is None and (existing.get("spark.api.mode") or os.environ.get("SPARK_API_MODE", "")).lower() == "connect":
        remote = existing.get("spark.master", os.environ.get("MASTER", "local"))
    return remote


def configure(builder: B, **options: Any) -> B:
    """Turn crystalperf on for a ``SparkSession.builder`` (or a ``SparkConf``); returns it. A Spark Connect builder
    whose server PySpark starts in this process (``builder.remote("local[4]")``, or ``spark.api.mode`` connect with
    any master) is turned on as well; one for a remote server (``sc://…``) is left as it is, with a warning: the
    hook belongs where that server starts.

    Options: ``output_dir``, ``sample_interval_ms``, ``python_sampling``, ``spool_dir``, ``cpu_budget`` (see
    :func:`spark_conf`). Where the Python workers are sampled, the jobs this process's Python starts are also named
    after its lines (:mod:`crystalperf.integrations.spark.pydriver`).
    """
    existing: dict[str, str] = {}
    raw = getattr(builder, "_options", None)
    if isinstance(raw, dict):
        existing = {str(k): str(v) for k, v in raw.items()}
    elif hasattr(builder, "getAll"):
        existing = dict(builder.getAll())
    remote = _connect_remote(existing)
    if remote is not None and remote.startswith("sc://"):
        log.warning("crystalperf: this builder connects to the Spark Connect server at %s, which runs the jobs: "
                    "crystalperf must be turned on where that server starts (start-connect-server.sh "
                    "$(crystalperf spark-conf)); nothing is set here", remote)
        return builder
    conf = spark_conf(existing, **options)
    if remote is not None:
        # PySpark starts a local Connect server from these settings, but sets spark.plugins to Connect's own
        # plugin alone: Spark also loads the plugins of spark.plugins.defaultList.
        conf[DEFAULT_PLUGINS] = _append(existing, DEFAULT_PLUGINS, PLUGIN)
        # Once the server runs, the Connect client sets the builder's settings again as the session's and warns for
        # each one only a server start can set ("Failed to set spark.plugins to Some(...) due to
        # [CANNOT_MODIFY_CONFIG]"): said of ours, that reads as if the hook were off. The server has them.
        warnings.filterwarnings("ignore", message=r"Failed to set spark\.[\w.]+ to Some\([^)]*crystalperf",
                                category=UserWarning)
        # A Connect server's Python functions carry no spark.executorEnv: the workers of a local master get the
        # variables from the server's JVM, which inherits this process's environment.
        for key, value in conf.items():
            if key.startswith(EXECUTOR_ENV) and remote.startswith("local"):
                os.environ.setdefault(key[len(EXECUTOR_ENV):], value)
    for key, value in conf.items():
        if hasattr(builder, "config"):
            builder = builder.config(key, value)
        else:
            builder.set(key, value)  # type: ignore[attr-defined]
    spool = conf.get("spark.crystalperf.spoolDir") or existing.get("spark.crystalperf.spoolDir")
    if spool:
        from crystalperf.core.record.hooks import guard
        from crystalperf.integrations.spark import pydriver

        with guard("recording the lines of the PySpark program that start jobs"):
            pydriver.install(spool, connect=remote is not None)
    return builder
