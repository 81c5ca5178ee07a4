"""Turning the Flink reporter on: the configuration entries that load it, and the recorded job graph.

``configure()`` sets the entries on a PyFlink ``Configuration`` in this process, so it checks that the
installed PyFlink is one the reporter supports. ``configuration()`` (and ``crystalperf flink-conf``) also
serves a cluster elsewhere: it checks the version only when PyFlink is installed here; when it is not,
the entries are printed as they are and the cluster that loads them must run the supported range
(:data:`INTEGRATION` ``.supported``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from crystalperf.integrations.base import Integration
from crystalperf.integrations.flink.reader import PLAN_FORMAT, PLAN_PREFIX

INTEGRATION = Integration(
    name="flink",
    module="pyflink",
    distributions=("apache-flink",),
    minimum=(2, 0),
    below=(2, 4),
    jar="crystalperf-flink.jar",
    # subtasks of a streaming job run side by side for the whole job: parallelism is what resizes it
    scaling=("parallelism",),
)

REPORTER_NAME = "crystalperf"
FACTORY_CLASS = "org.crystalperf.flink.CrystalPerfReporterFactory"
SAMPLE_INTERVAL_KEY = f"metrics.reporter.{REPORTER_NAME}.sample.interval.ms"
CPU_BUDGET_KEY = f"metrics.reporter.{REPORTER_NAME}.cpu.budget"
# Flink's listeners of job status changes (FLINK-33212): ours keeps how each job ended for the reporter's part.
JOB_STATUS_KEY = "execution.job-status-changed-listeners"
JOB_STATUS_CLASS = "org.crystalperf.flink.JobStatusRecorder"


def jar_path() -> Path:
    """The bundled reporter jar (checked to exist and to match its Java sources)."""
    return INTEGRATION.jar_path()


def configuration(output_dir: str | Path | None = None, *, analyze: bool = True,
                  sample_interval_ms: int | None = None, cpu_budget: float | None = None,
                  job_status: bool = False) -> dict[str, str]:
    """The configuration entries that load the reporter (the jar included in ``pipeline.jars``).

    With ``analyze``, the reporter starts ``<this python> -m crystalperf.integrations.flink.finish <part>``
    when a job ends, which writes the trace and the report into the output directory; without it, call
    :func:`crystalperf.integrations.flink.finish` yourself. ``sample_interval_ms`` (default 100) and
    ``cpu_budget`` (a share in [0, 1] of the cores each process may use, default 0.01; 0 keeps the interval
    whatever it costs) set the reporter's stack sampling. With ``job_status``, Flink also tells the jar's
    listener how each job ended (finished, failed, cancelled), which the trace's ``application.status`` then says:
    off by default here, because the JobManager loads that listener from its own class path and the job's, so a
    cluster whose jar is in ``plugins/`` rather than ``lib/`` would fail every job. Raises
    ``UnsupportedFrameworkVersionError`` when an unsupported PyFlink is installed here; without PyFlink the entries
    are for a cluster elsewhere.
    """
    if INTEGRATION.version() is not None:
        INTEGRATION.check()
    entries = {
        f"metrics.reporter.{REPORTER_NAME}.factory.class": FACTORY_CLASS,
        "pipeline.jars": jar_path().as_uri(),
    }
    if output_dir is not None:
        entries[f"metrics.reporter.{REPORTER_NAME}.output.dir"] = str(Path(output_dir).resolve())
    if analyze:
        # both for processes on this machine, like this Python: where the reporter's sampler of Python functions run
        # in thread mode imports crystalperf from, inside the interpreter pemja embeds in the TaskManager (which
        # starts from the base installation's paths)
        entries[f"metrics.reporter.{REPORTER_NAME}.analyze.python"] = sys.executable
        entries[f"metrics.reporter.{REPORTER_NAME}.python.path"] = str(Path(__file__).resolve().parents[3])
    if sample_interval_ms:
        entries[SAMPLE_INTERVAL_KEY] = str(int(sample_interval_ms))
    if cpu_budget is not None:
        entries[CPU_BUDGET_KEY] = str(float(cpu_budget))
    if job_status:
        entries[JOB_STATUS_KEY] = JOB_STATUS_CLASS
    return entries


def configure(config: Any, output_dir: str | Path | None = None, *, analyze: bool = True,
              sample_interval_ms: int | None = None, cpu_budget: float | None = None) -> Any:
    """Set the reporter's entries on a PyFlink ``Configuration`` (keeping jars already listed) and return it.

    The sampler of this process's loopback Python workers takes the reporter's interval and budget, from the
    arguments or from entries the configuration already had. Raises ``FrameworkNotInstalledError`` /
    ``UnsupportedFrameworkVersionError`` (naming the fix) when PyFlink is missing or outside the supported
    versions. The job's status comes along (``configuration``'s ``job_status``): the jar is in ``pipeline.jars``,
    where the mini cluster's JobManager finds the listener; listeners already configured stay.
    """
    INTEGRATION.check()
    entries = configuration(output_dir, analyze=analyze, sample_interval_ms=sample_interval_ms,
                            cpu_budget=cpu_budget, job_status=True)
    for key, value in entries.items():
        if key in ("pipeline.jars", JOB_STATUS_KEY):  # lists: the user's entries stay
            existing = [j for j in (config.get_string(key, "") or "").split(";") if j]
            value = ";".join([*existing, value]) if value not in existing else ";".join(existing)
        config.set_string(key, value)
    from crystalperf.core.record.hooks import guard

    with guard("flink: keep py4j's deletes off the job's connection"):
        # our sampler's thread must not make the job's SQL calls move to a Java thread without a planner
        from crystalperf.integrations.flink.gateway import isolate_deletes

        isolate_deletes()
    # the interval and budget read as the reporter reads them: a value that is not a number leaves the default
    interval_ms = _number(config.get_string(SAMPLE_INTERVAL_KEY, ""))
    if output_dir is not None and (interval_ms is None or interval_ms > 0):
        # A local job's Python functions run in this process (PyFlink's loopback mode): sample them here.
        from crystalperf.integrations.flink.pyworkers import start_worker_sampler

        start_worker_sampler(output_dir, interval_s=interval_ms / 1000 if interval_ms else 0.1,
                             share=_number(config.get_string(CPU_BUDGET_KEY, "")))
    return config


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def record_plan(env: Any, output_dir: str | Path, statement: str | None = None) -> Path | None:
    """Save the operator-level job graph next to the reporter's files; call it before executing the job.

    ``env`` is a ``StreamExecutionEnvironment`` (its ``get_execution_plan()``) or, with ``statement``, a
    ``TableEnvironment`` (``explain_sql(statement, JSON_EXECUTION_PLAN)``). The reader links operator
    chains by this graph; without it chains are assumed linear. Never raises (returns None on failure).
    """
    from crystalperf.core.record.hooks import guard

    with guard("flink: record the execution plan"):
        if statement is None:
            text = env.get_execution_plan()
        else:
            from pyflink.table import ExplainDetail

            explained = str(env.explain_sql(statement, ExplainDetail.JSON_EXECUTION_PLAN))
            text = explained[explained.index("{", explained.index("== Physical Execution Plan ==")) :]
        plan = json.JSONDecoder().raw_decode(text)[0]
        body = json.dumps({"format": PLAN_FORMAT, "plan": plan}, sort_keys=True)
        digest = hashlib.sha256(body.encode()).hexdigest()[:16]
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        target = out / f"{PLAN_PREFIX}{digest}.json"
        target.write_text(body, encoding="utf-8")
        return target
    return None
