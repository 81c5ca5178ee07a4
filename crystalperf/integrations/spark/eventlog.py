"""``crystalperf import spark-eventlog PATH``: a past run's Spark event log (the History Server's
input) as a trace. Event logs have no stacks, so the resource vectors come from the task metrics.

The log is streamed line by line (logs of long applications are gigabytes); event types we do not use,
and lines that are not JSON (a log cut off by a crash), are skipped.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from crystalperf.core import trace as tr
from crystalperf.core.errors import BadInputError

_SECRET = re.compile(r"(?i)secret|password|token|credential|\.key$|keystore|auth")


def _open(path: Path) -> IO[str]:
    with path.open("rb") as raw:
        magic = raw.read(4)
    if magic[:2] == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    if magic == b"\x28\xb5\x2f\xfd" or path.suffix == ".zstd":
        try:
            import zstandard
        except ImportError:
            raise BadInputError("zstd-compressed event log: pip install zstandard to read it "
                                "(or write logs with spark.eventLog.compress=false)", path) from None
        return io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(path.open("rb")), encoding="utf-8",
                                errors="replace")
    if path.suffix in (".lz4", ".snappy", ".lzf"):
        raise BadInputError(f"{path.suffix[1:]}-compressed event logs are not supported: decompress it first, "
                            "or write logs with spark.eventLog.compress=false", path)
    return path.open(encoding="utf-8", errors="replace")


def _files(path: Path) -> list[Path]:
    if path.is_dir():  # rolling event log: eventlog_v2_<app>/events_<n>_<app>...
        files = [p for p in path.iterdir() if p.is_file() and p.name.startswith("events_")]
        if not files:
            raise BadInputError("directory holds no Spark event log files (events_*)", path)
        return sorted(files, key=lambda p: int(re.match(r"events_(\d+)", p.name).group(1)))  # type: ignore[union-attr]
    return [path]


def _events(path: Path) -> Iterator[dict[str, Any]]:
    for file in _files(path):
        with _open(file) as lines:
            for line in lines:
                line = line.strip()
                if not line:
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(event, dict):
                    yield event


def _s(ms: Any) -> float | None:
    return ms / 1000.0 if isinstance(ms, (int, float)) and ms > 0 else None


def task_metrics(m: dict[str, Any]) -> dict[str, float]:
    """A task's metrics under the core's well-known names and Spark's own."""
    sr = m.get("Shuffle Read Metrics") or {}
    sw = m.get("Shuffle Write Metrics") or {}
    inp = m.get("Input Metrics") or {}
    out = m.get("Output Metrics") or {}

    def g(d: dict[str, Any], k: str) -> float:
        v = d.get(k, 0)
        return float(v) if isinstance(v, (int, float)) else 0.0

    remote, local = g(sr, "Remote Bytes Read"), g(sr, "Local Bytes Read")
    metrics = {
        tr.METRIC_RUN_TIME: g(m, "Executor Run Time") / 1000.0,
        tr.METRIC_CPU_TIME: g(m, "Executor CPU Time") / 1e9,
        tr.METRIC_GC_TIME: g(m, "JVM GC Time") / 1000.0,
        tr.METRIC_NETWORK_WAIT: g(sr, "Fetch Wait Time") / 1000.0,
        tr.METRIC_DISK_TIME: g(sw, "Shuffle Write Time") / 1e9,
        tr.METRIC_INPUT_BYTES: g(inp, "Bytes Read"),
        tr.METRIC_OUTPUT_BYTES: g(out, "Bytes Written"),
        tr.METRIC_SHUFFLE_READ_BYTES: remote + local,
        tr.METRIC_SHUFFLE_REMOTE_READ_BYTES: remote,
        tr.METRIC_SHUFFLE_WRITE_BYTES: g(sw, "Shuffle Bytes Written"),
        tr.METRIC_SPILL_DISK_BYTES: g(m, "Disk Bytes Spilled"),
        tr.METRIC_SPILL_MEMORY_BYTES: g(m, "Memory Bytes Spilled"),
        tr.METRIC_PEAK_MEMORY_BYTES: g(m, "Peak Execution Memory"),
        tr.METRIC_RECORDS_IN: g(inp, "Records Read") + g(sr, "Total Records Read"),
        tr.METRIC_RECORDS_OUT: g(out, "Records Written") + g(sw, "Shuffle Records Written"),
    }
    for key, value in m.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            metrics[key] = float(value)
    return metrics


def read_event_log(path: Path) -> tr.Trace:
    """Read a Spark event log (plain, gzip or zstd; a file or a rolling-log directory) into a trace."""
    path = Path(path)
    app: dict[str, Any] = {}
    jobs: dict[int, dict[str, Any]] = {}
    stage_info: dict[int, dict[str, Any]] = {}
    stages: dict[int, dict[str, Any]] = {}
    tasks: dict[int, list[dict[str, Any]]] = {}
    executors: dict[str, dict[str, Any]] = {}
    properties: dict[str, str] = {}
    classpath: list[str] = []
    first = last = None
    seen = 0
    for event in _events(path):
        seen += 1
        kind = event.get("Event")
        stamp = _s(event.get("Timestamp") or event.get("Submission Time") or event.get("Completion Time"))
        if stamp is not None:
            first = stamp if first is None else min(first, stamp)
            last = stamp if last is None else max(last, stamp)
        if kind == "SparkListenerApplicationStart":
            app.update(id=event.get("App ID", "unknown"), name=event.get("App Name", ""),
                       user=event.get("User"), start=_s(event.get("Timestamp")), attempt=event.get("App Attempt ID"))
        elif kind == "SparkListenerApplicationEnd":
            app["end"] = _s(event.get("Timestamp"))
        elif kind == "SparkListenerLogStart":
            app["version"] = event.get("Spark Version")
        elif kind == "SparkListenerEnvironmentUpdate":
            props = event.get("Spark Properties") or {}
            items = props.items() if isinstance(props, dict) else (p for p in props if isinstance(p, list) and len(p) == 2)
            properties.update({str(k): str(v) for k, v in items if not _SECRET.search(str(k))})
            cp = event.get("Classpath Entries") or {}
            entries = cp.keys() if isinstance(cp, dict) else (p[0] for p in cp if isinstance(p, list) and p)
            classpath.extend(str(e) for e in entries if "://" not in str(e))
        elif kind == "SparkListenerExecutorAdded":
            info = event.get("Executor Info") or {}
            ex = executors.setdefault(str(event.get("Executor ID")), {"id": str(event.get("Executor ID"))})
            ex.update(host=info.get("Host"), cores=info.get("Total Cores") or None, added=_s(event.get("Timestamp")))
        elif kind == "SparkListenerExecutorRemoved":
            ex = executors.get(str(event.get("Executor ID")))
            if ex is not None:
                ex["removed"] = _s(event.get("Timestamp"))
        elif kind == "SparkListenerBlockManagerAdded":
            bm = event.get("Block Manager ID") or {}
            ex = executors.setdefault(str(bm.get("Executor ID")), {"id": str(bm.get("Executor ID"))})
            ex.setdefault("host", bm.get("Host"))
            ex["memory_bytes"] = event.get("Maximum Memory")
        elif kind == "SparkListenerJobStart":
            ids = sorted(int(s) for s in event.get("Stage IDs", []))
            props = event.get("Properties") or {}
            jobs[int(event["Job ID"])] = {"start": _s(event.get("Submission Time")), "stages": ids, "props": props}
            for info in event.get("Stage Infos", []):
                stage_info.setdefault(int(info["Stage ID"]), info)
        elif kind == "SparkListenerJobEnd":
            job = jobs.get(int(event.get("Job ID", -1)))
            if job is not None:
                job["end"] = _s(event.get("Completion Time"))
                result = (event.get("Job Result") or {}).get("Result", "")
                job["status"] = "success" if result == "JobSucceeded" else "failed"
        elif kind in ("SparkListenerStageSubmitted", "SparkListenerStageCompleted"):
            info = event.get("Stage Info") or {}
            sid = int(info.get("Stage ID", -1))
            stage_info[sid] = info
            st = stages.setdefault(sid, {})
            if _s(info.get("Submission Time")) is not None:
                st.setdefault("start", _s(info.get("Submission Time")))
            if kind == "SparkListenerStageCompleted":
                st["end"] = _s(info.get("Completion Time")) or st.get("start")
                st["status"] = "failed" if info.get("Failure Reason") else "success"
        elif kind == "SparkListenerTaskEnd":
            info = event.get("Task Info") or {}
            start = _s(info.get("Launch Time"))
            if start is None:
                continue
            end = max(start, _s(info.get("Finish Time")) or start)
            status = "failed" if info.get("Failed") else "killed" if info.get("Killed") else "success"
            tasks.setdefault(int(event.get("Stage ID", -1)), []).append({
                "id": str(info.get("Task ID")), "index": info.get("Index"), "attempt": info.get("Attempt", 0),
                "executor": info.get("Executor ID"), "host": info.get("Host"), "start": start, "end": end,
                "status": status, "metrics": task_metrics(event.get("Task Metrics") or {}),
            })
    if not seen:
        raise BadInputError("not a Spark event log (no JSON events)", path)
    if not app and not jobs:
        raise BadInputError("not a Spark event log (no application or job events)", path)
    start = app.get("start") or first or 0.0
    end = app.get("end") or last or start
    return _build(path, app, start, max(start, end), jobs, stage_info, stages, tasks, executors, properties, classpath)


def _build(path: Path, app: dict[str, Any], start: float, end: float, jobs: dict[int, dict[str, Any]],
           stage_info: dict[int, dict[str, Any]], stages: dict[int, dict[str, Any]],
           tasks: dict[int, list[dict[str, Any]]], executors: dict[str, dict[str, Any]],
           properties: dict[str, str], classpath: list[str]) -> tr.Trace:
    owner: dict[int, int] = {}
    for jid, job in sorted(jobs.items()):
        for sid in job["stages"]:
            st = stages.get(sid)
            if st and "start" in st and sid not in owner and (job["start"] or 0) - 0.001 <= st["start"]:
                owner[sid] = jid

    def sid_name(sid: int, jid: int) -> str:
        return f"stage-{sid}" if owner.get(sid) == jid else f"stage-{sid}-skipped-in-job-{jid}"

    ops: list[dict[str, Any]] = []
    totals: dict[str, float] = {}
    for jid, job in sorted(jobs.items()):
        jstart = job["start"] or start
        jend = max(jstart, job.get("end") or end)
        children = []
        for sid in job["stages"]:
            info = stage_info.get(sid, {})
            ran = owner.get(sid) == jid
            op: dict[str, Any] = {
                "id": sid_name(sid, jid), "name": f"stage {sid}: {info.get('Stage Name', '')}", "kind": "stage",
                "parents": [sid_name(p, jid) for p in info.get("Parent IDs", []) if p in job["stages"]],
                "parallelism": max(1, int(info.get("Number of Tasks", 1) or 1)),
                "attributes": {"call_site": str(info.get("Details", "")).split("\n", 1)[0].strip()},
            }
            if ran:
                st = stages[sid]
                op.update(start=st["start"], end=max(st["start"], st.get("end") or jend),
                          status=st.get("status", "running"), tasks=tasks.get(sid, []))
                for t in op["tasks"]:
                    for k in (tr.METRIC_SPILL_DISK_BYTES, tr.METRIC_SPILL_MEMORY_BYTES, tr.METRIC_SHUFFLE_WRITE_BYTES,
                              tr.METRIC_SHUFFLE_READ_BYTES, tr.METRIC_INPUT_BYTES, tr.METRIC_OUTPUT_BYTES):
                        totals[k] = totals.get(k, 0.0) + t["metrics"].get(k, 0.0)
            else:
                op.update(start=jstart, end=jstart, status="skipped")
            children.append(op)
        props = job["props"] if isinstance(job["props"], dict) else {}
        attrs = {k: str(props[p]) for k, p in (("call_site", "callSite.short"), ("description", "spark.job.description"),
                                                ("sql_execution_id", "spark.sql.execution.id")) if props.get(p)}
        name = attrs.get("description") or attrs.get("call_site") or f"job {jid}"
        ops.append({"id": f"job-{jid}", "name": f"job {jid}: {name}", "kind": "job", "start": jstart, "end": jend,
                    "status": job.get("status", "running"), "children": children, "attributes": attrs})
    workers = [e for e in executors.values() if e["id"] != "driver"] or list(executors.values())
    for ex in workers:
        if not ex.get("cores") and properties.get("spark.master", "").startswith("local["):
            cores = properties["spark.master"][6:-1]
            ex["cores"] = int(cores) if cores.isdigit() else None
    slots = sum(e.get("cores") or 0 for e in workers)
    memory = sum(e.get("memory_bytes") or 0 for e in workers)
    doc = {
        "schema_version": tr.SCHEMA_VERSION,
        "producer": {"name": "crystalperf", "hook": "spark-eventlog"},
        "application": {"framework": "spark", "framework_version": app.get("version"), "id": app.get("id", path.name),
                        "name": app.get("name", ""), "attempt": app.get("attempt"), "start": start, "end": end,
                        "status": "failed" if any(j.get("status") == "failed" for j in jobs.values()) else "succeeded",
                        "user": app.get("user")},
        "environment": {"executors": [{k: v for k, v in e.items() if v is not None} for e in workers],
                        "hosts": sorted({e["host"] for e in workers if e.get("host")}),
                        "total_slots": slots or None, "memory_bytes": memory or None,
                        "classpath": classpath, "properties": properties},
        "operations": ops,
        "metrics": totals,
        "warnings": [] if "end" in app else ["the event log has no application end (a running or crashed app)"],
    }
    doc["application"] = {k: v for k, v in doc["application"].items() if v is not None}
    doc["environment"] = {k: v for k, v in doc["environment"].items() if v is not None}
    return tr.parse_trace(doc, path)
