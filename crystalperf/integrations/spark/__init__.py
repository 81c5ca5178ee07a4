"""Spark integration: a SparkListener (DAG, task metrics) and an executor plugin (stack samples of task
threads), bundled as ``crystalperf-spark.jar``, plus a sampler in the PySpark Python workers.

Use it from PySpark with :func:`configure`, or from ``spark-submit`` with the ``--conf`` lines that
``crystalperf spark-conf`` prints. When the application ends, ``crystalperf-trace.json.gz`` and the
report appear next to the application's output (or in ``spark.crystalperf.outputDir``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, TypeVar

from crystalperf.core.errors import FrameworkNotInstalledError

log = logging.getLogger(__name__)

JAR = Path(__file__).resolve().parent / "crystalperf-spark.jar"
LISTENER = "org.crystalperf.spark.CrystalPerfListener"
PLUGIN = "org.crystalperf.spark.CrystalPerfPlugin"
PYTHON_DAEMON = "crystalperf.integrations.spark.pydaemon"
SPOOL_ENV = "CRYSTALPERF_SPARK_SPOOL"
SUPPORTED = ((4, 0), (4, 4))  # the jar is built for Scala 2.13, i.e. Spark 4.x

B = TypeVar("B")


class SparkSetupError(RuntimeError):
    """The Spark hooks cannot be used as installed; the message names the fix."""


def spark_version() -> str:
    """The installed pyspark's version; FrameworkNotInstalledError when pyspark is missing."""
    if importlib.util.find_spec("pyspark") is None:
        raise FrameworkNotInstalledError("spark", "spark")
    from pyspark.version import __version__

    return str(__version__)


def check_installation() -> Path:
    """The bundled jar, after checking it exists, matches its sources, and suits the Spark version."""
    version = spark_version()
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if not (SUPPORTED[0] <= parts < SUPPORTED[1]):
        raise SparkSetupError(
            f"crystalperf's Spark hooks support Spark 4.0 to 4.3 (Scala 2.13); pyspark {version} is installed: "
            f"install a supported one with pip install 'pyspark>=4.0,<4.4'")
    if not JAR.is_file():
        raise SparkSetupError(f"{JAR} is missing: reinstall crystalperf, or rebuild it with python hatch_build.py")
    try:
        with zipfile.ZipFile(JAR) as zf:
            built_from = zf.read("META-INF/crystalperf-sources.sha256").decode().strip()
    except (OSError, KeyError, zipfile.BadZipFile):
        raise SparkSetupError(f"{JAR} is damaged: reinstall crystalperf, or rebuild it with python hatch_build.py") from None
    current = _sources_hash()
    if current is not None and current != built_from:
        raise SparkSetupError(f"{JAR} does not match its Java sources: rebuild it with python hatch_build.py")
    return JAR


def _sources_hash() -> str | None:
    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("_crystalperf_hatch_build", root / "hatch_build.py")
    if spec is None or spec.loader is None or not (root / "hatch_build.py").is_file():
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    jar_spec = next(j for j in module.JARS if j.name == "spark")
    return str(module.sources_hash(jar_spec)) if module.source_files(jar_spec) else None


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


def spark_conf(existing: dict[str, str] | None = None, *, output_dir: str | None = None,
               sample_interval_ms: int | None = None, python_sampling: bool = True,
               spool_dir: str | None = None, pin_worker_python: bool = False) -> dict[str, str]:
    """The Spark configuration that turns crystalperf on, merged with ``existing`` list-valued settings.

    ``pin_worker_python`` also sets ``spark.pyspark.python`` to the Python checked to import our worker
    hook (for ``spark-submit``, whose workers' Python is otherwise unknown here).
    """
    jar = str(check_installation())
    _check_no_plain_jvm()
    existing = dict(existing or {})

    def append(key: str, value: str) -> str:
        old = existing.get(key, "")
        items = [v for v in old.split(",") if v]
        return ",".join(items if value in items else [*items, value])

    conf = {
        "spark.jars": append("spark.jars", jar),
        "spark.extraListeners": append("spark.extraListeners", LISTENER),
        "spark.plugins": append("spark.plugins", PLUGIN),
        "spark.crystalperf.python": sys.executable,
    }
    if output_dir:
        conf["spark.crystalperf.outputDir"] = str(output_dir)
    if sample_interval_ms:
        conf["spark.crystalperf.sampleIntervalMs"] = str(int(sample_interval_ms))
    master = existing.get("spark.master", os.environ.get("MASTER", "local"))
    if (python_sampling and not os.environ.get("PYSPARK_PYTHON") and "spark.pyspark.python" not in existing
            and master.startswith("local")):
        # Local workers would otherwise run whatever ``python3`` is first on PATH, usually not this
        # environment (so not the user's packages either).
        os.environ["PYSPARK_PYTHON"] = sys.executable
        log.info("crystalperf: PYSPARK_PYTHON set to %s for the local Python workers", sys.executable)
    worker_python = existing.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or "python3"
    if python_sampling and "spark.python.daemon.module" not in existing:
        if _python_can_sample(worker_python):
            spool = spool_dir or tempfile.mkdtemp(prefix="crystalperf-spool-")
            if pin_worker_python and "spark.pyspark.python" not in existing:
                # spark-submit would otherwise start the workers with whatever Python its shell has,
                # which may not import our daemon module (and every Python task would fail).
                conf["spark.pyspark.python"] = worker_python
            conf["spark.python.daemon.module"] = PYTHON_DAEMON
            conf[f"spark.executorEnv.{SPOOL_ENV}"] = spool
            conf["spark.crystalperf.spoolDir"] = spool
        else:
            log.warning("crystalperf: the PySpark workers' Python (%s) cannot import crystalperf; Python "
                        "functions will not be sampled (set PYSPARK_PYTHON to this Python: %s)",
                        worker_python, sys.executable)
    # What the user set explicitly wins over our defaults.
    return {k: v for k, v in conf.items() if not (k.startswith("spark.crystalperf.") and k in existing)}


def configure(builder: B, **options: Any) -> B:
    """Turn crystalperf on for a ``SparkSession.builder`` (or a ``SparkConf``); returns it.

    Options: ``output_dir``, ``sample_interval_ms``, ``python_sampling`` (see :func:`spark_conf`).
    """
    existing: dict[str, str] = {}
    raw = getattr(builder, "_options", None)
    if isinstance(raw, dict):
        existing = {str(k): str(v) for k, v in raw.items()}
    elif hasattr(builder, "getAll"):
        existing = dict(builder.getAll())  # type: ignore[attr-defined]
    for key, value in spark_conf(existing, **options).items():
        if hasattr(builder, "config"):
            builder = builder.config(key, value)  # type: ignore[attr-defined]
        else:
            builder.set(key, value)  # type: ignore[attr-defined]
    return builder
