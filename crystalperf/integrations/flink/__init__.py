"""Flink integration: a metrics reporter (Java, ``crystalperf-flink.jar``) plus its Python side.

The reporter writes ``crystalperf-flink-<job_id>.json`` (final metric values per task/operator/subtask)
when a job ends; :func:`read_metrics` turns that file into a crystalperf trace and :func:`finish` writes
the trace and the report next to it. PyFlink is only needed to run jobs, not to read their files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import re
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crystalperf.core import trace as t
from crystalperf.core.errors import BadInputError

log = logging.getLogger(__name__)

REPORTER_NAME = "crystalperf"
FACTORY_CLASS = "org.crystalperf.flink.CrystalPerfReporterFactory"
FORMAT = "crystalperf-flink-metrics"
PLAN_FORMAT = "crystalperf-flink-plan"
PUSH_TO_OPERATOR = "ChainingOutput.pushToOperator"
# Frames of the Java side of PyFlink's Python operators (process mode: the UDFs run in worker processes)
PYTHON_OPERATOR = "org.apache.flink.streaming.api.operators.python."


def jar_path() -> Path:
    """The bundled reporter jar."""
    return Path(__file__).resolve().parent / "crystalperf-flink.jar"


def configuration(output_dir: str | Path | None = None, *, analyze: bool = True) -> dict[str, str]:
    """The configuration entries that load the reporter (the jar included in ``pipeline.jars``).

    With ``analyze``, the reporter starts ``<this python> -m crystalperf flink-finish`` when a job ends, which
    writes the trace and the report into the output directory; without it, call :func:`finish` yourself.
    """
    entries = {
        f"metrics.reporter.{REPORTER_NAME}.factory.class": FACTORY_CLASS,
        "pipeline.jars": jar_path().as_uri(),
    }
    if output_dir is not None:
        entries[f"metrics.reporter.{REPORTER_NAME}.output.dir"] = str(Path(output_dir).resolve())
    if analyze:
        entries[f"metrics.reporter.{REPORTER_NAME}.analyze.python"] = sys.executable
    return entries


def configure(config: Any, output_dir: str | Path | None = None, *, analyze: bool = True) -> Any:
    """Set the reporter's entries on a PyFlink ``Configuration`` (keeping jars already listed) and return it."""
    for key, value in configuration(output_dir, analyze=analyze).items():
        if key == "pipeline.jars":
            existing = [j for j in (config.get_string(key, "") or "").split(";") if j]
            value = ";".join([*existing, value]) if value not in existing else ";".join(existing)
        config.set_string(key, value)
    return config


def record_plan(env: Any, output_dir: str | Path, statement: str | None = None) -> Path | None:
    """Save the operator-level job graph next to the reporter's files; call it before executing the job.

    ``env`` is a ``StreamExecutionEnvironment`` (its ``get_execution_plan()``) or, with ``statement``, a
    ``TableEnvironment`` (``explain_sql(statement, JSON_EXECUTION_PLAN)``). The reader links operator
    chains by this graph; without it chains are assumed linear. Never raises (returns None on failure).
    """
    from crystalperf.core.hooks import guard

    with guard("flink: record the execution plan"):
        if statement is None:
            text = env.get_execution_plan()
        else:
            from pyflink.table import ExplainDetail

            explained = env.explain_sql(statement, ExplainDetail.JSON_EXECUTION_PLAN)
            text = explained[explained.index("{", explained.index("== Physical Execution Plan ==")) :]
        plan = json.JSONDecoder().raw_decode(text)[0]
        body = json.dumps({"format": PLAN_FORMAT, "plan": plan}, sort_keys=True)
        digest = hashlib.sha256(body.encode()).hexdigest()[:16]
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        target = out / f"crystalperf-flink-plan-{digest}.json"
        target.write_text(body, encoding="utf-8")
        return target
    return None


_PLANNER_ID = re.compile(r"\[(\d+)\]")


def _relative_ids(names: set[str]) -> dict[str, str]:
    """Name -> name with the SQL planner's ``[n]`` operator ids made relative to the smallest one.

    The planner numbers operators with a counter that keeps running across translations, so the plan
    recorded by ``explain_sql`` says ``Calc[8]`` where the job that runs later says ``Calc[14]``.
    """
    ids = [int(m) for name in names for m in _PLANNER_ID.findall(name)]
    base = min(ids, default=0)
    return {name: _PLANNER_ID.sub(lambda m: f"[{int(m.group(1)) - base}]", name) for name in names}


def _find_plan(directory: Path, operator_names: set[str]) -> list[dict[str, Any]] | None:
    """The nodes of a recorded plan in directory naming every operator of the job (renamed to the job's names)."""
    wanted = {relative: name for name, relative in _relative_ids(operator_names).items()}
    for candidate in sorted(
        directory.glob("crystalperf-flink-plan-*.json"), key=lambda p: -p.stat().st_mtime
    ):
        try:
            doc = json.loads(candidate.read_text(encoding="utf-8"))
            nodes = doc["plan"]["nodes"] if doc.get("format") == PLAN_FORMAT else None
            renamed = _relative_ids({str(n["type"]) for n in nodes or []})
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("crystalperf: ignoring unreadable Flink plan %s", candidate)
            continue
        if nodes and set(wanted) <= set(renamed.values()):
            return [{**n, "type": wanted.get(renamed[str(n["type"])], str(n["type"]))} for n in nodes]
    return None


def _plan_order(
    chains: dict[str, dict[str, Any]], nodes: list[dict[str, Any]]
) -> tuple[list[str], dict[str, list[str]], dict[str, dict[str, str]], dict[str, list[str]]]:
    """From the plan: chains in topological order, chain -> parent chains, chain -> {parent: ship strategy},
    and operator -> operators it follows inside its chain; operators in each chain are reordered in place."""
    chain_of = {name: task for task, chain in chains.items() for name in chain["operators"]}
    name_of = {n["id"]: str(n["type"]) for n in nodes}
    chain_parents: dict[str, list[str]] = {task: [] for task in chains}
    strategies: dict[str, dict[str, str]] = {task: {} for task in chains}
    op_parents: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        me = name_of[node["id"]]
        for pred in node.get("predecessors") or []:
            parent = name_of.get(pred.get("id"))
            if parent is None or me not in chain_of or parent not in chain_of:
                continue
            mine, theirs = chain_of[me], chain_of[parent]
            if mine == theirs:
                op_parents[me].append(parent)
            elif theirs not in chain_parents[mine]:
                chain_parents[mine].append(theirs)
                strategies[mine][theirs] = str(pred.get("ship_strategy", ""))

    def topo(items: list[str], parents_of: dict[str, list[str]]) -> list[str]:
        done: list[str] = []
        seen: set[str] = set()

        def visit(item: str, path: frozenset[str]) -> None:
            if item in seen or item in path:
                return
            for parent in parents_of.get(item, []):
                if parent in items:
                    visit(parent, path | {item})
            seen.add(item)
            done.append(item)

        for item in items:
            visit(item, frozenset())
        return done

    for chain in chains.values():
        ordered = topo(list(chain["operators"]), op_parents)
        chain["operators"] = {name: chain["operators"][name] for name in ordered}
    return topo(list(chains), chain_parents), chain_parents, strategies, op_parents


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _chain_position(task_name: str, operator_name: str) -> int:
    # Flink registers a chain's operators tail first; the task name lists them head first.
    position = task_name.find(operator_name)
    return position if position >= 0 else len(task_name)


def _load_part(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(
            f"not a readable crystalperf Flink metrics file ({exc.__class__.__name__})", path
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadInputError(f"not a crystalperf Flink metrics file (expected format {FORMAT!r})", path)
    return doc


def _merge_parts(path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """Join the parts that the JobManager and each TaskManager wrote for the same job into one document."""
    job_id = str(doc.get("job_id", ""))
    siblings = (
        sorted(
            p for p in path.parent.glob(f"crystalperf-flink-{job_id}.*.json") if p.resolve() != path.resolve()
        )
        if job_id
        else []
    )
    if not siblings:
        return doc

    def samples_with_origin(part: dict[str, Any]) -> list[list[Any]]:
        # each process buckets its samples from its own origin
        origin = float(part.get("sample_origin", part["start"]))
        return [[*row[:5], origin] for row in part.get("samples") or []]

    current = path
    try:
        merged = {**doc, "scopes": list(doc["scopes"]), "metrics": list(doc["metrics"]),
                  "samples": samples_with_origin(doc)}
        for current in siblings:
            part = _load_part(current)
            offset = len(merged["scopes"])
            merged["scopes"].extend(part["scopes"])
            merged["metrics"].extend([int(i) + offset, n, v] for i, n, v in part["metrics"])
            merged["start"] = min(float(merged["start"]), float(part["start"]))
            merged["end"] = max(float(merged["end"]), float(part["end"]))
            for counter in ("dropped_metrics", "dropped_samples"):
                merged[counter] = int(merged.get(counter) or 0) + int(part.get(counter) or 0)
            merged["thread_cpu"] = [*(merged.get("thread_cpu") or []), *(part.get("thread_cpu") or [])]
            if "process_cpu_s" in part:
                merged["process_cpu_s"] = float(merged.get("process_cpu_s") or 0) + float(part["process_cpu_s"])
            # processes of one job see the same machine in local and single-host setups
            merged["cpu_count"] = max(int(merged.get("cpu_count") or 0), int(part.get("cpu_count") or 0))
            merged["samples"].extend(samples_with_origin(part))
        merged["parts"] = 1 + len(siblings)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(f"malformed crystalperf Flink metrics file ({exc})", current) from None
    return merged


def read_metrics(path: Path) -> t.Trace:
    """Turn the reporter's ``crystalperf-flink-<job_id>.<process>.json`` into a trace (one operation per
    operator chain), merged with the other parts of the same job in that directory (one per cluster process)."""
    path = Path(path)
    doc = _merge_parts(path, _load_part(path))
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
    try:
        # CPU seconds of each subtask's thread as the sampler last saw it (absent without sampling)
        thread_cpu = {(str(name), str(sub)): float(sec) for name, sub, sec in doc.get("thread_cpu") or []}
        process_cpu = _number(doc.get("process_cpu_s"))
        cpu_count = int(doc.get("cpu_count") or 0) or None
    except (TypeError, ValueError) as exc:
        raise BadInputError(f"malformed CPU times in a crystalperf Flink metrics file ({exc})", path) from None
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

    operator_names = {name for chain in chains.values() for name in chain["operators"]}
    nodes = _find_plan(path.parent, operator_names) if operator_names else None
    chain_parents: dict[str, list[str]] = {}
    strategies: dict[str, dict[str, str]] = {}
    op_parents: dict[str, list[str]] = {}
    if nodes is not None:
        order, chain_parents, strategies, op_parents = _plan_order(chains, nodes)
        chains = {name: chains[name] for name in order}
    else:
        for task_name, chain in chains.items():
            chain["operators"] = dict(
                sorted(chain["operators"].items(), key=lambda kv, tn=task_name: _chain_position(tn, kv[0]))
            )
    chain_ids = {name: f"chain{i}" for i, name in enumerate(chains)}

    operations: list[t.Operation] = []
    for chain_index, (task_name, chain) in enumerate(chains.items()):
        tasks = []
        for subtask, values in sorted(chain["tasks"].items(), key=lambda kv: int(kv[0] or 0)):
            busy = values.get("accumulateBusyTimeMs")
            backpressured = values.get("accumulateBackPressuredTimeMs", 0.0) / 1000.0
            cpu = thread_cpu.get((task_name, str(subtask)))
            if busy is not None:
                run_time = busy / 1000.0 + backpressured
            else:
                # Legacy sources report no busy time: their thread's CPU time is the best lower bound.
                run_time = min(cpu, duration) if cpu is not None else duration
            metrics = {t.METRIC_RUN_TIME: run_time, t.METRIC_NETWORK_WAIT: backpressured}
            if "numBytesIn" in values:
                metrics[t.METRIC_NETWORK_BYTES] = values["numBytesIn"] + values.get("numBytesOut", 0.0)
            if cpu is not None:
                metrics[t.METRIC_CPU_TIME] = cpu
            tasks.append(
                t.Task(
                    id=f"{task_name}#{subtask}",
                    index=int(subtask or 0),
                    start=start,
                    end=end,
                    metrics=metrics,
                )
            )
        op_ids = {name: f"chain{chain_index}/op{i}" for i, name in enumerate(chain["operators"])}
        children = []
        for name, op in chain["operators"].items():
            if nodes is not None:
                inner = [op_ids[p] for p in op_parents.get(name, []) if p in op_ids]
            else:
                inner = [children[-1].id] if children else []
            children.append(
                t.Operation(
                    id=op_ids[name],
                    name=name,
                    kind="operator",
                    parents=inner,
                    start=start,
                    end=end,
                    parallelism=int(op["subtasks"]) or None,
                    metrics={t.METRIC_RECORDS_IN: op["records_in"], t.METRIC_RECORDS_OUT: op["records_out"]},
                )
            )
        attributes: dict[str, str] = {}
        if nodes is not None:
            parents = [chain_ids[p] for p in chain_parents.get(task_name, [])]
            if strategies.get(task_name):
                attributes["ship_strategy"] = ", ".join(
                    f"{chain_ids[p]}: {how}" for p, how in strategies[task_name].items()
                )
        else:
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
                attributes=attributes,
            )
        )
    has_children = {p for op in operations for p in op.parents}
    sinks_out = sum(
        c.metrics.get(t.METRIC_RECORDS_IN, 0.0)
        for op in operations
        if op.id not in has_children
        for c in op.children[-1:]
    )
    sources_out = sum(
        c.metrics.get(t.METRIC_RECORDS_OUT, 0.0)
        for op in operations
        if not op.parents
        for c in op.children[:1]
    )
    streaming = t.Streaming(
        latency_s=duration or None,
        input_rate=sources_out / duration if duration else None,
        throughput=sinks_out / duration if duration else None,
    )
    warnings = []
    if nodes is None:
        warnings.append(
            "no recorded execution plan (crystalperf.integrations.flink.record_plan) matches this job: "
            "edges between operator chains are assumed linear"
        )
    if doc.get("dropped_metrics"):
        warnings.append(f"{doc['dropped_metrics']} metrics were not kept (memory bound reached)")
    operator_ids = {op.id: [c.id for c in op.children] for op in operations}
    samples = _samples(doc, chain_ids, operator_ids, start, path)
    _split_chain_busy_time(operations, samples)
    if samples is not None and any(PYTHON_OPERATOR in frame.name for frame in samples.frames):
        warnings.append(
            "the job runs Python functions in separate Python worker processes, which are not sampled: "
            "the time task threads wait on them (Python compute) shows as waiting, not as CPU"
        )
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
        environment=t.Environment(cpu_count=cpu_count),
        metrics={"cpu_utilization": process_cpu / duration} if process_cpu and duration else {},
        warnings=warnings,
    )


def _split_chain_busy_time(operations: list[t.Operation], samples: t.StackSamples | None) -> None:
    """Give each chained operator its share of the chain's busy time, by the samples taken inside it (evenly
    without samples): chained operators run on the chain's one thread, so their times add up to the chain's,
    and a path through them must not count the chain's whole span once per operator."""
    counts: dict[str, int] = defaultdict(int)
    if samples is not None:
        for key_index, count in zip(samples.key, samples.count, strict=True):
            key = samples.keys[key_index]
            if key.thread == "operator":
                counts[key.operation] += count
    for chain in operations:
        if not chain.children or not chain.tasks:
            continue
        busy = max(task.metrics.get(t.METRIC_RUN_TIME, task.duration) for task in chain.tasks)
        sampled = sum(counts[c.id] for c in chain.children)
        for child in chain.children:
            share = counts[child.id] / sampled if sampled else 1 / len(chain.children)
            child.metrics[t.METRIC_RUN_TIME] = busy * share


def _parts_ready(found: list[Path]) -> bool:
    """Every job has a complete part (no metric of it left in that process: the job ended there) and each
    other part (a TaskManager's, flushed periodically) was written after that end, so it holds final values."""
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for part in found:
        try:
            doc = json.loads(part.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False  # being replaced right now
        by_job[str(doc.get("job_id", part.name))].append(doc)
    for docs in by_job.values():
        ends = [float(d.get("end", 0)) for d in docs if d.get("complete", True)]
        if not ends or any(
            float(d.get("written", 0)) < max(ends) for d in docs if not d.get("complete", True)
        ):
            return False
    return True


def wait_for_metrics(
    out_dir: str | Path,
    job_id: str | None = None,
    timeout_s: float = 30.0,
    parts: int = 1,
) -> list[Path]:
    """The reporter's files in out_dir (one per job and process), waiting until at least ``parts`` are
    there and hold the job's final values: the reporter writes a part when the job's metrics go away in
    its process, shortly after the job ends, and a TaskManager flushes its part every ``flush.interval.ms``."""
    import time

    pattern = f"crystalperf-flink-{job_id or '*'}.*.json"
    deadline = time.monotonic() + timeout_s
    while True:
        found = sorted(
            p for p in Path(out_dir).glob(pattern) if not p.name.startswith("crystalperf-flink-plan-")
        )
        if (len(found) >= parts and _parts_ready(found)) or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def _samples(
    doc: dict[str, Any],
    chain_ids: dict[str, str],
    operator_ids: dict[str, list[str]],
    start: float,
    path: Path,
) -> t.StackSamples | None:
    """Task-thread stacks the reporter aggregated per (chain, subtask, bucket); top frame first.

    Each row counts for its chain and, again, for the operator of the chain it was in: a record enters
    the n-th chained operator through n nested ``ChainingOutput.pushToOperator`` calls.
    """
    from crystalperf.core.sampling import SampleTable

    rows = doc.get("samples") or []
    if not rows:
        return None
    try:
        origin = float(doc.get("sample_origin", start))
        bucket_s = float(doc.get("sample_bucket_s", 1.0))
        origin = min([origin, *(float(row[5]) for row in rows if len(row) > 5)])
        table = SampleTable(origin, bucket_s, float(doc.get("sample_interval_s", 0.1)))
        for row in rows:
            task_name, subtask, bucket, stack_text, count = row[:5]
            row_origin = float(row[5]) if len(row) > 5 else origin
            chain = chain_ids.get(task_name)
            if chain is None:
                continue
            frame_ids = []
            depth = 0
            for line in str(stack_text).splitlines():
                name, file, number = (line.split("\t") + ["", ""])[:3]
                depth += name.endswith(PUSH_TO_OPERATOR)
                frame_ids.append(
                    table.frame_id(
                        name,
                        file or None,
                        int(number) if number.lstrip("-").isdigit() and int(number) > 0 else None,
                        language="java",
                    )
                )
            stack = table.stack_id(frame_ids)
            when = row_origin + (int(bucket) + 0.5) * bucket_s
            task = f"{task_name}#{subtask}"
            table.add(t.SampleKey(operation=chain, task=task), stack, when, int(count))
            members = operator_ids.get(chain) or []
            if len(members) > 1:
                operator = members[min(depth, len(members) - 1)]
                table.add(
                    t.SampleKey(operation=operator, task=task, thread="operator"), stack, when, int(count)
                )
    except (TypeError, ValueError) as exc:
        raise BadInputError(
            f"malformed stack samples in a crystalperf Flink metrics file ({exc})", path
        ) from None
    return table.to_samples()


def finish(metrics_path: Path, out_dir: Path | None = None) -> Path:
    """Convert the reporter's file (merged with the job's other parts) into a trace and run the analysis;
    returns the trace path."""
    from crystalperf.core.hooks import TRACE_NAME, finish_job

    metrics_path = Path(metrics_path)
    out = Path(out_dir) if out_dir is not None else metrics_path.parent
    with _job_lock(metrics_path):
        finish_job(read_metrics(metrics_path), out)
    return out / TRACE_NAME


@contextlib.contextmanager
def _job_lock(part: Path) -> Iterator[None]:
    """Serialises the analyses of one job: on a cluster every process that saw the job end starts one."""
    import fcntl

    job_id = part.name.removeprefix("crystalperf-flink-").split(".")[0]
    with open(part.parent / f"crystalperf-flink-{job_id}.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def finish_when_complete(part: Path, out_dir: Path | None = None, timeout_s: float = 60.0) -> Path | None:
    """What the reporter runs when a job ended in its process: wait until the job's parts hold final values
    (other processes flush theirs every few seconds), then write the trace and report unless an analysis
    of the same parts already did. Returns the trace path, or None when it was already current."""
    from crystalperf.core.hooks import TRACE_NAME

    part = Path(part)
    if not part.exists():
        raise BadInputError("no such crystalperf Flink metrics file", part)
    job_id = str(_load_part(part).get("job_id", ""))
    parts = wait_for_metrics(part.parent, job_id or None, timeout_s=timeout_s)
    out = Path(out_dir) if out_dir is not None else part.parent
    trace = out / TRACE_NAME
    with _job_lock(part):
        newest = max((p.stat().st_mtime for p in parts if p.exists()), default=0.0)
        if trace.exists() and trace.stat().st_mtime > newest and _trace_job(trace) == job_id:
            return None
    return finish(part, out)


def _trace_job(path: Path) -> str | None:
    try:
        from crystalperf.core.trace import load_trace

        return load_trace(path).application.id
    except Exception:  # an unreadable or foreign trace is simply not current
        return None
