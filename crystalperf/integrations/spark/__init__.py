"""Spark integration: a SparkListener (DAG, task metrics) and an executor plugin (stack samples of task
threads), bundled as ``crystalperf-spark.jar``, plus a sampler in the PySpark Python workers.

Use it from PySpark with :func:`configure`, or from ``spark-submit`` with the ``--conf`` lines that
``crystalperf spark-conf`` prints. When the application ends, ``crystalperf-trace.json.gz`` and the
report appear next to the application's output (or in ``spark.crystalperf.outputDir``).
A past run's event log becomes a trace with :func:`read_event_log`.
"""

from __future__ import annotations

from crystalperf.integrations.spark.config import (
    INTEGRATION,
    LISTENER,
    PLUGIN,
    PYTHON_DAEMON,
    SPOOL_ENV,
    SparkSetupError,
    check_installation,
    configure,
    spark_conf,
    spark_version,
)
from crystalperf.integrations.spark.reader import read_event_log

__all__ = [
    "INTEGRATION",
    "LISTENER",
    "PLUGIN",
    "PYTHON_DAEMON",
    "SPOOL_ENV",
    "SparkSetupError",
    "check_installation",
    "configure",
    "read_event_log",
    "spark_conf",
    "spark_version",
]
