"""The interpreter that runs each framework's jobs: the environment variable that names it, else this interpreter
when it has the framework, else the nox session's (Flink also looks in ``/work/venvs/flink``). None when the
framework is found nowhere: its cases are then listed as skipped with the reason."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def spark_python() -> str | None:
    """The interpreter that runs the Spark jobs (``$CRYSTALPERF_SPARK_PYTHON``), or None."""
    configured = os.environ.get("CRYSTALPERF_SPARK_PYTHON")
    if configured:
        return configured
    if importlib.util.find_spec("pyspark") is not None:
        return sys.executable
    nox = ROOT / ".nox" / "spark" / "bin" / "python"
    return str(nox) if nox.exists() else None


def flink_python() -> str | None:
    """The interpreter that runs the Flink jobs (``$CRYSTALPERF_FLINK_PYTHON``), or None."""
    configured = os.environ.get("CRYSTALPERF_FLINK_PYTHON")
    if configured:
        return configured
    if importlib.util.find_spec("pyflink") is not None:
        return sys.executable
    for candidate in (Path("/work/venvs/flink/bin/python"), ROOT / ".nox" / "flink" / "bin" / "python"):
        if candidate.exists():
            return str(candidate)
    return None


def tf_python() -> str | None:
    """The interpreter that runs the TensorFlow jobs (``$CRYSTALPERF_TF_PYTHON``), or None."""
    configured = os.environ.get("CRYSTALPERF_TF_PYTHON")
    if configured:
        return configured
    if importlib.util.find_spec("tensorflow") is not None:
        return sys.executable
    nox = ROOT / ".nox" / "tensorflow" / "bin" / "python"
    return str(nox) if nox.exists() else None
