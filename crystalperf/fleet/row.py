"""One application's row of the fleet table: its schema, and the row of one analysis.

Every column is documented here once (:data:`COLUMNS`); ``docs/fleet.md`` shows the same table and a unit test
keeps the two in step. A row is a plain dict of JSON values (times as epoch seconds), so that it travels through
a pipe, a cache file or a Spark job unchanged; :mod:`.table` gives it its Arrow types.

Machine-hours are the cores the application held times its runtime: the task slots of the traced run (Spark:
executors x cores, or the N of ``local[N]``; Flink: its slots; TensorFlow: its threads), from the trace's
environment. The advice is the report's first settings suggestion (``settings_advice[0]``: the cheapest setting
predicted within a few percent of the fastest); ``machine_hours_saved`` is what it saves over the traced run: the
traced cores x runtime less the suggested cores x predicted runtime, negative when the setting buys its speed with
more machine-hours than it saves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

ROW_VERSION = "1"  # bumped when a column is added or computed otherwise: cached rows of another version are redone


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # string, int64, float64, bool, timestamp (UTC, from epoch seconds), list<string>
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("source", "string", "the log or trace analysed: its path (a rolling event log: its directory)"),
    Column("format", "string", "how it was read: trace (a crystalperf trace) or a trace reader (spark-eventlog)"),
    Column("size_bytes", "int64", "the log's size on disk (a rolling log: all its files)"),
    Column("modified", "timestamp", "the log's last modification"),
    Column("content_hash", "string", "BLAKE2b-128 of the log's bytes, as analysed"),
    Column("error", "string", "why the log could not be analysed (every column below it is then null)"),
    Column("app_id", "string", "the application's id (Spark: application id; Flink: job id)"),
    Column("app_name", "string", "the application's name"),
    Column("framework", "string", "spark, flink, tensorflow or other"),
    Column("framework_version", "string", "the framework's version, where the log says"),
    Column("status", "string", "succeeded, failed, cancelled or unknown"),
    Column("partial", "bool", "the trace covers only part of the run (a hook that wrote before the end)"),
    Column("start", "timestamp", "the application's start"),
    Column("end", "timestamp", "the application's end (a log in progress: its last event)"),
    Column("runtime_s", "float64", "the application's runtime, seconds"),
    Column("cores", "int64", "task slots the application held (executors x cores, local[N], Flink slots, threads)"),
    Column("machine_hours", "float64", "cores x runtime, hours"),
    Column("tasks", "int64", "tasks the application ran (all of them, also where the log keeps a sample)"),
    Column("bottleneck", "string", "the resource that bounds the critical path: cpu, disk, network or waiting"),
    Column("bottleneck_share", "float64", "the bottleneck's share of the critical path's time, 0-1"),
    Column("cpu_s", "float64", "seconds of CPU on the critical path"),
    Column("disk_s", "float64", "seconds of disk on the critical path"),
    Column("network_s", "float64", "seconds of network on the critical path"),
    Column("waiting_s", "float64", "seconds of waiting on the critical path"),
    Column("advice", "string", "the best setting as typed (--conf k=v ...); null when no setting is predicted to help"),
    Column("advice_changes", "string", "the what-if changes the setting makes (cores=4, executors=8 ...)"),
    Column("advice_runtime_s", "float64", "the runtime predicted with the setting, seconds"),
    Column("advice_speedup", "float64", "traced runtime / predicted runtime"),
    Column("advice_cores", "int64", "task slots with the setting"),
    Column("advice_machine_hours", "float64", "advice_cores x advice_runtime_s, hours"),
    Column("machine_hours_saved", "float64",
           "machine_hours - advice_machine_hours (0 without advice; negative: faster at more machine-hours)"),
    Column("skewed_operations", "int64", "operations whose task times are skewed"),
    Column("skew", "list<string>",
           "each skewed operation (the first 20): its name, the cause (data, straggler, time), seconds saved"),
    Column("skew_saved_s", "float64", "the most runtime balancing one skewed operation is predicted to save"),
    Column("warnings", "list<string>", "the analysis's warnings, the first 20 (a log in progress, events skipped, ...)"),
)

NAMES = tuple(c.name for c in COLUMNS)
_RESOURCES = ("cpu", "disk", "network", "waiting")
# A row stays small whatever the application: its lists are cut (their counts are in other columns).
MAX_LISTED = 20
MAX_TEXT = 500


@dataclass(frozen=True)
class Source:
    """What is known of a log before it is read (from the directory listing) and after (its content hash)."""

    path: str
    format: str
    size: int
    mtime_ns: int
    content_hash: str | None = None


def _base(source: Source) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(NAMES)
    row.update(source=source.path, format=source.format, size_bytes=source.size,
               modified=source.mtime_ns / 1e9, content_hash=source.content_hash)
    return row


def error_row(source: Source, error: str) -> dict[str, Any]:
    """The row of a log that could not be analysed: what is known of the file, and why."""
    row = _base(source)
    row["error"] = error
    return row


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _cores_with(changes: dict[str, Any], baseline: dict[str, Any], cores: int) -> int:
    """The task slots a suggested setting holds, from its what-if changes and the traced run's baseline."""
    for key in ("parallelism", "slots"):
        if isinstance(changes.get(key), (int, float)):
            return max(1, round(changes[key]))
    executors = _number(baseline.get("executors")) or 1.0
    per = _number(baseline.get("cores_per_executor")) or 1.0
    new_executors = _number(changes.get("executors")) or executors
    new_per = _number(changes.get("cores")) or per
    return max(1, round(cores * (new_executors * new_per) / (executors * per)))


def report_row(source: Source, report: dict[str, Any], tasks: int) -> dict[str, Any]:
    """The row of one analysis, from its report document (``crystalperf-report.json``'s content) and the number
    of tasks the trace ran."""
    row = _base(source)
    app = report.get("application") or {}
    bottleneck = report.get("bottleneck") or {}
    baseline = report.get("baseline") or {}
    runtime = float(report.get("total_runtime_s") or 0.0)
    cores = max(1, int(baseline.get("slots") or 1))
    machine_hours = cores * runtime / 3600.0
    resource = bottleneck.get("resource")
    seconds = bottleneck.get("seconds") or {}
    row.update(
        app_id=app.get("id"), app_name=app.get("name"), framework=app.get("framework"),
        framework_version=app.get("framework_version"), status=app.get("status"),
        partial=bool(report.get("partial")), start=_number(app.get("start")), end=_number(app.get("end")),
        runtime_s=runtime, cores=cores, machine_hours=machine_hours, tasks=tasks,
        bottleneck=resource, bottleneck_share=_number((bottleneck.get("share") or {}).get(resource)),
        machine_hours_saved=0.0,
        **{f"{r}_s": float(seconds.get(r) or 0.0) for r in _RESOURCES},
    )
    advice = (report.get("settings_advice") or [None])[0]
    if isinstance(advice, dict) and _number(advice.get("runtime_s")) is not None:
        changes = advice.get("changes") or {}
        advice_cores = _cores_with(changes, baseline, cores)
        predicted = float(advice["runtime_s"])
        advice_hours = advice_cores * predicted / 3600.0
        row.update(advice=" ".join(advice.get("typed") or []) or None, advice_changes=advice.get("description"),
                   advice_runtime_s=predicted, advice_speedup=_number(advice.get("speedup")),
                   advice_cores=advice_cores, advice_machine_hours=advice_hours,
                   machine_hours_saved=machine_hours - advice_hours)
    skewed = [s for s in report.get("skew") or [] if isinstance(s, dict)]
    row.update(skewed_operations=len(skewed),
               skew=[f"{s.get('name')}: {s.get('cause')}, saves {float(s.get('job_saved_s') or 0.0):.2f} s"[:MAX_TEXT]
                     for s in skewed[:MAX_LISTED]],
               skew_saved_s=max((float(s.get("job_saved_s") or 0.0) for s in skewed), default=0.0),
               warnings=[str(w)[:MAX_TEXT] for w in (report.get("warnings") or [])[:MAX_LISTED]])
    # a figure no JSON can carry (an infinite speed-up) is unknown in the table
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
