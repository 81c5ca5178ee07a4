"""Flink integration: a metrics reporter (Java, ``crystalperf-flink.jar``) plus its Python side.

The reporter writes ``crystalperf-flink-<job_id>.<pid>.json`` (final metric values per task/operator/subtask,
stack samples) in every process where a job ran; :func:`read_metrics` turns a job's parts into a crystalperf
trace and :func:`finish` writes the trace and the report next to them. PyFlink is only needed to run jobs,
not to read their files.

Modules: ``config`` (the entries that turn the reporter on, :data:`INTEGRATION`), ``reader`` (parts and
plans), ``assemble`` (parts -> trace), ``finish`` (job end), ``cli`` (``crystalperf flink-conf`` /
``flink-finish``), ``java/`` (the reporter).
"""

from crystalperf.integrations.flink.assemble import PUSH_TO_OPERATOR, PYTHON_OPERATOR, read_metrics
from crystalperf.integrations.flink.config import (
    FACTORY_CLASS,
    INTEGRATION,
    REPORTER_NAME,
    configuration,
    configure,
    jar_path,
    record_plan,
)
from crystalperf.integrations.flink.finish import finish, finish_when_complete
from crystalperf.integrations.flink.reader import FORMAT, PLAN_FORMAT, wait_for_metrics

__all__ = [
    "FACTORY_CLASS",
    "FORMAT",
    "INTEGRATION",
    "PLAN_FORMAT",
    "PUSH_TO_OPERATOR",
    "PYTHON_OPERATOR",
    "REPORTER_NAME",
    "configuration",
    "configure",
    "finish",
    "finish_when_complete",
    "jar_path",
    "read_metrics",
    "record_plan",
    "wait_for_metrics",
]
