"""Flink integration: a metrics reporter (Java, ``crystalperf-flink.jar``) plus its Python side.

The reporter writes ``crystalperf-flink-<job_id>.json`` (final metric values per task/operator/subtask)
when a job ends; :func:`read_metrics` turns that file into a crystalperf trace and :func:`finish` writes
the trace and the report next to it. PyFlink is only needed to run jobs, not to read their files.
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from crystalperf.core import trace as t
from crystalperf.core.errors import BadInputError

log = logging.getLogger(__name__)

REPORTER_NAME = "crystalperf"
FACTORY_CLASS = "org.crystalperf.flink.CrystalPerfReporterFactory"
FORMAT = "crystalperf-flink-metrics"


def jar_path() -> Path:
    """The bundled reporter jar."""
    return Path(__file__).resolve().parent / "crystalperf-flink.jar"


def configuration(output_dir: str | Path | None = None) -> dict[str, str]:
    """The configuration entries that load the reporter (the jar included in ``pipeline.jars``)."""
    entries = {
        f"metrics.reporter.{REPORTER_NAME}.factory.class": FACTORY_CLASS,
        "pipeline.jars": jar_path().as_uri(),
    }
    if output_dir is not None:
        entries[f"metrics.reporter.{REPORTER_NAME}.output.dir"] = str(Path(output_dir).resolve())
    return entries


def configure(config: Any, output_dir: str | Path | None = None) -> Any:
    """Set the reporter's entries on a PyFlink ``Configuration`` (keeping jars already listed) and return it."""
    for key, value in configuration(output_dir).items():
        if key == "pipeline.jars":
            existing = [j for j in (config.get_string(key, "") or "").split(";") if j]
            value = ";".join([*existing, value]) if value not in existing else ";".join(existing)
        config.set_string(key, value)
    return config


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _chain_position(task_name: str, operator_name: str) -> int:
    # Flink registers a chain's operators tail first; the task name lists them head first.
    position = task_name.find(operator_name)
    return position if position >= 0 else len(task_name)


def read_metrics(path: Path) -> t.Trace:
    """Turn the reporter's ``crystalperf-flink-<job_id>.json`` into a trace (one operation per operator chain)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(
            f"not a readable crystalperf Flink metrics file ({exc.__class__.__name__})", path
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadInputError(f"not a crystalperf Flink metrics file (expected format {FORMAT!r})", path)
    try:
        scopes: list[dict[str, str]] = doc["scopes"]
        start, end = float(doc["start"]), float(doc["end"])
        per_scope: dict[int, dict[str, float]] = defaultdict(dict)
        for scope_index, name, value in doc["metrics"]:
            number = _number(value)
            if number is not None:
                per_scope[int(scope_index)][str(name)] = number
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(f"malformed crystalperf Flink metrics file ({exc})", path) from None

    duration = max(end - start, 0.0)
    chains: dict[str, dict[str, Any]] = {}
    for index, scope in enumerate(scopes):
        task_name = scope.get("task_name", "")
        if not task_name:
            continue  # JobManager-side job metrics (uptime, restarts) belong to no operator chain
        chain = chains.setdefault(task_name, {"tasks": {}, "operators": {}})
        subtask = scope.get("subtask_index", "0")
        values = per_scope.get(index, {})
        if scope.get("operator_name"):
            op = chain["operators"].setdefault(scope["operator_name"], defaultdict(float))
            op["records_in"] += values.get("numRecordsIn", 0.0)
            op["records_out"] += values.get("numRecordsOut", 0.0)
            op["subtasks"] = max(op["subtasks"], int(subtask) + 1)
        else:
            chain["tasks"][subtask] = values

    operations: list[t.Operation] = []
    for chain_index, (task_name, chain) in enumerate(chains.items()):
        tasks = []
        for subtask, values in sorted(chain["tasks"].items(), key=lambda kv: int(kv[0] or 0)):
            busy = values.get("accumulateBusyTimeMs")
            backpressured = values.get("accumulateBackPressuredTimeMs", 0.0) / 1000.0
            run_time = busy / 1000.0 + backpressured if busy is not None else duration
            metrics = {t.METRIC_RUN_TIME: run_time, t.METRIC_NETWORK_WAIT: backpressured}
            if "numBytesIn" in values:
                metrics[t.METRIC_NETWORK_BYTES] = values["numBytesIn"] + values.get("numBytesOut", 0.0)
            tasks.append(
                t.Task(
                    id=f"{task_name}#{subtask}",
                    index=int(subtask or 0),
                    start=start,
                    end=end,
                    metrics=metrics,
                )
            )
        children = [
            t.Operation(
                id=f"chain{chain_index}/op{i}",
                name=name,
                kind="operator",
                start=start,
                end=end,
                parallelism=int(op["subtasks"]) or None,
                metrics={t.METRIC_RECORDS_IN: op["records_in"], t.METRIC_RECORDS_OUT: op["records_out"]},
            )
            for i, (name, op) in enumerate(
                sorted(chain["operators"].items(), key=lambda kv: _chain_position(task_name, kv[0]))
            )
        ]
        parents = [operations[-1].id] if operations else []
        operations.append(
            t.Operation(
                id=f"chain{chain_index}",
                name=task_name,
                kind="task",
                parents=parents,
                start=start,
                end=end,
                tasks=tasks,
                children=children,
                parallelism=len(tasks) or None,
            )
        )
    sinks_out = (
        sum(c.metrics.get(t.METRIC_RECORDS_IN, 0.0) for c in operations[-1].children) if operations else 0.0
    )
    sources_out = (
        sum(c.metrics.get(t.METRIC_RECORDS_OUT, 0.0) for c in operations[0].children) if operations else 0.0
    )
    streaming = t.Streaming(
        latency_s=duration or None,
        input_rate=sources_out / duration if duration else None,
        throughput=sinks_out / duration if duration else None,
    )
    # The reporter does not record the job graph yet: chains are linked in the order they registered.
    warnings = [
        "edges between operator chains are assumed linear (the reporter does not record the job graph yet)"
    ]
    if doc.get("dropped_metrics"):
        warnings.append(f"{doc['dropped_metrics']} metrics were not kept (memory bound reached)")
    samples = _samples(doc, {name: f"chain{i}" for i, name in enumerate(chains)}, start, path)
    if doc.get("dropped_samples"):
        warnings.append(f"{doc['dropped_samples']} stack samples were not kept (memory bound reached)")
    return t.Trace(
        samples=samples,
        producer=t.Producer(hook="flink-reporter"),
        application=t.Application(
            framework="flink",
            id=str(doc.get("job_id", "")),
            name=str(doc.get("job_name", "")),
            start=start,
            end=end,
            output_dir=str(path.parent),
        ),
        operations=operations,
        streaming=streaming,
        warnings=warnings,
    )


def wait_for_metrics(out_dir: str | Path, job_id: str | None = None, timeout_s: float = 30.0) -> list[Path]:
    """The reporter's files in out_dir, waiting for them: Flink removes a job's metrics shortly after it ends."""
    import time

    pattern = f"crystalperf-flink-{job_id or '*'}.json"
    deadline = time.monotonic() + timeout_s
    while True:
        found = sorted(Path(out_dir).glob(pattern))
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def _samples(
    doc: dict[str, Any], chain_ids: dict[str, str], start: float, path: Path
) -> t.StackSamples | None:
    """Task-thread stacks the reporter aggregated per (chain, subtask, bucket); top frame first."""
    from crystalperf.core.sampling import SampleTable

    rows = doc.get("samples") or []
    if not rows:
        return None
    try:
        origin = float(doc.get("sample_origin", start))
        bucket_s = float(doc.get("sample_bucket_s", 1.0))
        table = SampleTable(origin, bucket_s, float(doc.get("sample_interval_s", 0.1)))
        for task_name, subtask, bucket, stack_text, count in rows:
            chain = chain_ids.get(task_name)
            if chain is None:
                continue
            frame_ids = []
            for line in str(stack_text).splitlines():
                name, file, number = (line.split("\t") + ["", ""])[:3]
                frame_ids.append(
                    table.frame_id(
                        name,
                        file or None,
                        int(number) if number.lstrip("-").isdigit() and int(number) > 0 else None,
                        language="java",
                    )
                )
            key = t.SampleKey(operation=chain, task=f"{task_name}#{subtask}")
            table.add(key, table.stack_id(frame_ids), origin + (int(bucket) + 0.5) * bucket_s, int(count))
    except (TypeError, ValueError) as exc:
        raise BadInputError(
            f"malformed stack samples in a crystalperf Flink metrics file ({exc})", path
        ) from None
    return table.to_samples()


def finish(metrics_path: Path, out_dir: Path | None = None) -> Path:
    """Convert the reporter's file into a trace and run the analysis; returns the trace path."""
    from crystalperf.core.hooks import finish_job

    metrics_path = Path(metrics_path)
    out = Path(out_dir) if out_dir is not None else metrics_path.parent
    finish_job(read_metrics(metrics_path), out)
    return out / "crystalperf-trace.json.gz"
