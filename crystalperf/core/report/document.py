"""The report document (``crystalperf-report.json``, which the HTML page and the terminal summary render): the
verdict, every operation's entry, the what-ifs, the advice in words and in settings, skew, SQL operators and
where the evidence came from — built from the results of the stages before it, computing nothing new."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crystalperf import __version__
from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import LOW_CONFIDENCE
from crystalperf.core.attribution.vectors import FunctionStat
from crystalperf.core.predict import Prediction, Predictor
from crystalperf.core.predict.settings import SettingsSearch
from crystalperf.core.profile.bottleneck import Bottleneck
from crystalperf.core.profile.dag import ExecutionProfile, OperationProfile, vector_dict
from crystalperf.core.profile.driver import driver_work
from crystalperf.core.profile.outside import outside_split, where_outside
from crystalperf.core.profile.skew import SkewFindings
from crystalperf.core.profile.sqlplan import operators_of
from crystalperf.core.report.machine import collector_cpu, machine_entry
from crystalperf.core.resources import CATEGORIES, RESOURCES, WAITING
from crystalperf.core.trace.totals import task_count
from crystalperf.core.units import format_duration, format_size

# The device's share of the time between the operations the advice names.
OUTSIDE_DISK_NOTED = 0.2

REPORT_VERSION = "1.0"
TOP_FUNCTIONS = 5
INPUT_BOUND_THRESHOLD = 0.20  # TensorBoard's "highly input-bound" line


def _op_entry(prof: OperationProfile, bottleneck: Bottleneck, on_path: set[str]) -> dict[str, Any]:
    op = prof.op
    critical = prof.path in on_path
    vector = prof.vector
    resource_seconds = prof.resource_seconds
    entry: dict[str, Any] = {
        "id": op.id,
        "path": prof.path,
        "parent": prof.parent_path,
        "name": op.name,
        "kind": op.kind,
        "status": op.status,
        "start": op.start,
        "end": op.end,
        "runtime_s": round(prof.runtime, 6),
        "vector": vector_dict(vector.vector),
        "vector_source": vector.source,
        # What of the operation's time was measured (by category) rather than inferred from its samples.
        "measured": {k: round(v, 6) for k, v in vector.measured.items()},
        "measured_share": round(vector.measured_share, 6),
        "samples": vector.samples,
        "resource_seconds": vector_dict(resource_seconds.values()),
        "work_seconds": vector_dict(prof.work_seconds.values()),
        "tasks": task_count(op),
        # fewer than the tasks when the hook kept a uniform sample of them (bounded memory)
        "tasks_recorded": len(op.tasks),
        "parents": list(op.parents),
        "children": [c.id for c in op.children],
        "on_critical_path": critical,
        "share_of_critical_path": round(bottleneck.operation_share(prof), 6) if critical else 0.0,
        "top_functions": [
            {
                "name": f.function.qualified_name,
                "origin": f.function.origin,
                "location": f.function.location,
                "language": f.function.language,
                "samples": f.samples,
                "share": round(f.samples / prof.vector.samples, 4) if prof.vector.samples else 0.0,
                "vector": vector_dict(f.vector),
                "classified": vector_dict(f.classified if f.classified is not None else f.vector),
                # the classifier's confidence in that class (None: it gives none, or the vector is not its);
                # under LOW_CONFIDENCE the class is a guess
                "confidence": round(f.confidence, 4) if f.confidence is not None else None,
                "low_confidence": f.low_confidence,
                # a runtime library's function (JDK, Python's standard library): the code outside the runtime that
                # called it most (None: not a runtime function, or nothing outside the runtime on its stacks)
                "called_from": f.called_from,
            }
            for f in prof.vector.functions[:TOP_FUNCTIONS]
        ],
    }
    if prof.vector.through is not None:
        # Fractions of the run time that waited on the work the operation stands for, given to that work's
        # resources (a training step's wait for a pipeline reading a slow disk is disk time on the path).
        entry["waited_for_work"] = {r: round(v, 6) for r, v in zip(RESOURCES, prof.vector.through, strict=False)}
    if prof.vector.vector.waiting > 0 and prof.vector.waiting_in:
        entry["waiting_in"] = [{"frame": name, "share": round(weight / prof.vector.samples, 4)}
                               for name, weight in prof.vector.waiting_in.most_common(3)] if prof.vector.samples else []
    if op.attributes:
        entry["attributes"] = dict(op.attributes)
    return entry


def _advice(bottleneck: Bottleneck, predictions: Sequence[Prediction], profile: ExecutionProfile,
            predictor: Predictor) -> list[str]:
    lines: list[str] = []
    if bottleneck.pace is None and (bottleneck.resource == WAITING or bottleneck.upstream_work is not None):
        waiter = bottleneck.waiting_op
        lines.append(
            "Most of the critical path waited" + (f" ({waiter.op.name}: {bottleneck.waiting_on})" if waiter else "")
            + ": look at what it waits for (a source's rate or its input, a slower stage downstream) before adding "
            "resources to the operations themselves."
        )
    resource = bottleneck.resource if bottleneck.resource != WAITING else bottleneck.busiest_resource
    useful = {
        "cpu": ("cores", "executors", "cpu_speed", "parallelism", "slots", "device"),
        "disk": ("disk", "memory"),
        "network": ("network",),
    }[resource]
    helpful = [p for p in predictions if any(k in p.changes for k in useful) and p.speedup > 1.0]
    if helpful:
        best = max(helpful, key=lambda p: p.speedup)
        # a device change moves the work to other hardware (at an assumed speed-up unless stated) rather than adding
        # more of the resource the job ran on
        action = "Move it to a GPU" if best.changes.get("device") == "gpu" else f"Add {resource}"
        lines.append(
            f"{action}: with {best.changes.describe()} the job is predicted to take "
            f"{format_duration(best.crystalperf.runtime_s)} instead of {format_duration(best.baseline_runtime_s)} "
            f"({best.speedup:.2f}x)."
        )
    slot_changes = [p for p in predictions if any(k in p.changes for k in ("cores", "executors", "parallelism"))]
    if slot_changes and all(p.speedup < 1.1 for p in slot_changes if p.speedup >= 1.0) and any(bottleneck.seconds.values()):
        lines.append("More cores or executors buy little here: the critical path is not limited by task slots.")
    operators_limit = bottleneck.pace is None or bottleneck.pace.limit != "link"  # a link's pace is no operator's
    heaviest = bottleneck.heaviest(resource) if bottleneck.seconds[resource] > 0 and operators_limit else None
    if heaviest is not None:
        name, seconds, profs = heaviest
        # the functions whose samples spent the most on that resource (the most sampled one may have waited)
        index = CATEGORIES.index(resource)
        spent: dict[str, float] = {}
        first: dict[str, FunctionStat] = {}
        for prof in profs:
            for f in prof.vector.functions:
                if f.vector[index] > 0:
                    key = f.function.qualified_name
                    spent[key] = spent.get(key, 0.0) + f.samples * f.vector[index]
                    first.setdefault(key, f)
        spending = [first[key] for key in sorted(spent, key=lambda k: -spent[k])]
        funcs = ", ".join(f.function.qualified_name + (f" (called from {f.called_from})" if f.called_from else "")
                          for f in spending[:2])
        runs = f" over {len(profs)} runs" if len(profs) > 1 else ""
        lines.append(
            f"Look at {name} first: it spends {format_duration(seconds)} on {resource} on the critical path{runs}"
            + (f", mostly in {funcs}." if funcs else ".")
            + _guessed([(spent[f.function.qualified_name], f.low_confidence) for f in spending], resource)
        )
    if bottleneck.total_runtime_s and bottleneck.unattributed_s / bottleneck.total_runtime_s > 0.3:
        outside = f"{format_duration(bottleneck.unattributed_s)} ({bottleneck.unattributed_s / bottleneck.total_runtime_s:.0%})"
        where = where_outside(outside_split(profile))
        triggers = (f" {format_duration(bottleneck.trigger_wait_s)} of it were streaming micro-batches waiting for their "
                    "trigger, which no resource shortens." if bottleneck.trigger_wait_s > 0 else "")
        reading = predictor.outside_disk_s()
        if reading is not None and predictor.outside is not None and reading >= OUTSIDE_DISK_NOTED * predictor.outside.seconds:
            lines.append(
                f"{outside} of the run was outside any traced operation ({where}), and the "
                f"storage device took about {format_duration(reading)} of the {format_duration(predictor.outside.seconds)} between the "
                f"operations ({format_size(predictor.outside.read_bytes)} read then, a JVM's classes from a cold "
                f"disk for one): the disk what-ifs scale that part, no other change touches it.{triggers}"
            )
        else:
            lines.append(f"{outside} of the run was outside any traced operation ({where}): no resource change "
                         f"above touches it.{triggers}")
        if (work := driver_work(profile)) is not None:
            lines.append(work.sentence())
    wait = profile.trace.metrics.get("input_wait_fraction")
    if wait is not None and wait >= INPUT_BOUND_THRESHOLD:
        lines.append(f"The input pipeline is the limit: {wait:.0%} of step time waits for input "
                     f"(TensorBoard calls >= 20 % highly input-bound).")
    return lines


def _guessed(weights: Sequence[tuple[float, bool]], resource: str) -> str:
    """A sentence where most of a resource's sampled time (each function's samples times its share, and whether
    the classifier guessed its class: ``low_confidence``) is in guessed functions; empty otherwise. Only the
    functions the report shows are rated: the others count as not guessed."""
    total = sum(w for w, _ in weights)
    guessed = sum(w for w, low in weights if low)
    if total <= 0 or guessed <= total / 2:
        return ""
    return (f" {guessed / total:.0%} of its sampled {resource} time is in functions the classifier is unsure of "
            f"(confidence under {LOW_CONFIDENCE:.0%}): check what they do before adding {resource}.")


def _storage_idle_warning(profile: ExecutionProfile) -> list[str]:
    if profile.storage_idle is None:
        return []
    read, written = profile.storage_idle
    return [f"the job's processes read {format_size(read)} from storage and wrote {format_size(written)} (OS "
            f"counters): no disk wait, so the disk share its sampled functions suggested is counted as cpu"]


def _network_idle_warning(profile: ExecutionProfile) -> list[str]:
    if not profile.network_idle:
        return []
    return ["the network counters of the job's processes saw no traffic (under 1 MiB each way, loopback aside): "
            "the network share of its running samples is counted as cpu (copies, not transfers); a thread blocked "
            "on a socket keeps its share (a slow peer's latency moves few bytes)"]


# A process whose collector took at least this share of its CPU time (and this many CPU-s) is flagged: its heap
# is under pressure, or its records allocate more than its work needs.
COLLECTOR_SHARE_TO_FLAG = 0.5
COLLECTOR_SECONDS_TO_FLAG = 2.0


def _collector_warning(trace: tr.Trace) -> list[str]:
    """One warning per process (executor, TaskManager) whose garbage collector used at least
    ``COLLECTOR_SHARE_TO_FLAG`` of its CPU time, where the hook split that time by thread kind."""
    warnings = []
    for executor in trace.environment.executors:
        kinds = executor.thread_cpu
        if kinds is None:
            continue
        # at least COLLECTOR_SECONDS_TO_FLAG of the collector's keeps the total above 0
        collector = collector_cpu(kinds)
        if collector >= COLLECTOR_SECONDS_TO_FLAG and collector >= COLLECTOR_SHARE_TO_FLAG * kinds.total:
            heap = executor.garbage_collector
            family = heap.family if heap is not None else None
            text = (f"the {family + ' ' if family else ''}garbage collector used {collector:.2f} of the "
                    f"{kinds.total:.2f} CPU-s of process {executor.id} ({collector / kinds.total:.0%}) against "
                    f"{kinds.task:.2f} in its task threads: ")
            if heap is not None and heap.live_bytes is not None and heap.heap_max_bytes:
                text += (f"its old generation was {heap.live_bytes / heap.heap_max_bytes:.0%} live after its "
                         f"collections ({format_size(heap.live_bytes)} of a {format_size(heap.heap_max_bytes)} heap), "
                         "so each collection freed little: more memory per process, fewer records held per task, or "
                         "more processes to share them would give that CPU back to the job (a parallelism what-if "
                         "that spreads the records over more processes counts it)")
            else:
                text += ("its heap is under pressure or its records allocate heavily; more memory per process, fewer "
                         "records held per task, or more processes to share them would give that CPU back to the "
                         "job, which the what-ifs here do not predict without the heap's live data")
            warnings.append(text)
    return warnings


@dataclass
class ReportParts:
    """What the report shows that no prediction changes (worked out while the predictions are: ``analyze``)."""

    operations: list[dict[str, Any]]
    queries: list[dict[str, Any]]
    skew: SkewFindings
    sources: dict[str, Any]
    edges: list[dict[str, Any]]


# The hook's part that is the job's threads stopped for its stack samples (a JVM safepoint), not its own threads' CPU.
PAUSES_PART = "pauses"


def hook_cost(hook: tr.HookCost | None, metrics: dict[str, float] | None = None) -> dict[str, Any] | None:
    """What the hook cost, as it measured itself (the report's ``hook_cost``): its CPU seconds, their share of the
    CPU time of the processes it ran in, where they went, whether its CPU budget thinned the samples, and where the
    trace timed steps both ways (Keras: ``profiled_step_median_s`` and ``later_step_median_s`` in ``metrics``), how
    much longer a profiled step took; None for a trace without the figures (an imported event log, a trace before
    schema 1.9)."""
    if hook is None or not hook.processes:
        return None
    cpu = hook.cpu_s
    known = [p.process_cpu_s for p in hook.processes if p.process_cpu_s is not None]
    job = sum(known) if len(known) == len(hook.processes) else None
    share = cpu / job if job else None
    parts: dict[str, float] = {}
    for process in hook.processes:
        for part, seconds in process.parts.items():
            parts[part] = parts.get(part, 0.0) + seconds
    taken = sum(p.samples_taken or 0 for p in hook.processes)
    planned = sum(p.samples_planned or 0 for p in hook.processes)
    over = sum(p.windows_over_budget or 0 for p in hook.processes)
    windows = sum(p.windows or 0 for p in hook.processes)
    budgets = sorted({(p.budget_share, p.cores) for p in hook.processes if p.budget_share})
    sentence = f"The hook used {cpu:.2f} s of CPU"
    sentence += (f", {share:.2%} of the {job:.1f} s its processes used" if share is not None and job is not None
                 else "")
    paused = parts.get(PAUSES_PART, 0.0)
    sentence += (f", {paused:.2f} s of it the job's threads stopped while the JVM took their stacks."
                 if paused >= 0.005 else ".")
    if budgets:
        budget_share, cores = budgets[0]
        sentence += f" Its budget: {budget_share:.1%} of {cores:g} cores."
    thinned = planned > taken
    if thinned:
        sentence += (f" The budget thinned the stack samples: {taken:,} rounds taken where the configured interval "
                     f"would have taken {planned:,}.")
    if over:
        sentence += (f" It used more than its budget in {over} of {windows} two-second windows, while sampling no "
                     "less often than the analysis needs.")
    slowdown = step_slowdown(metrics or {})
    if slowdown is not None:
        sentence += " " + slowdown["sentence"]
    return {
        "cpu_s": round(cpu, 6),
        "job_cpu_s": round(job, 6) if job is not None else None,
        "share": round(share, 6) if share is not None else None,
        "parts": {k: round(v, 6) for k, v in sorted(parts.items(), key=lambda kv: -kv[1])},
        "budget_share": budgets[0][0] if budgets else None,
        "samples_taken": taken,
        "samples_planned": planned,
        "thinned": thinned,
        "windows_over_budget": over,
        "processes": [p.model_dump(exclude_none=True) for p in hook.processes[:100]],
        "step_slowdown": slowdown,
        "sentence": sentence,
    }


def _step_time(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds >= 1 else f"{seconds * 1000:.3g} ms"


def step_slowdown(metrics: dict[str, float]) -> dict[str, Any] | None:
    """The profiled steps' median against the steps timed after them in the same run: what recording a step cost
    the job, the framework's own profiler included (its work runs on the framework's threads, where the hook's
    CPU figure does not see it). None where the trace did not time both."""
    profiled, later = metrics.get("profiled_step_median_s"), metrics.get("later_step_median_s")
    count = int(metrics.get("later_steps", 0))
    if profiled is None or later is None or profiled <= 0 or later <= 0 or count <= 0:
        return None
    ratio = profiled / later - 1.0
    se = metrics.get("step_slowdown_se")
    spread = f", ±{se:.1%}" if se is not None and se >= 0 else ""
    medians = f"medians {_step_time(profiled)} and {_step_time(later)}{spread}"
    if se is not None and abs(ratio) <= 2 * se:
        sentence = (f"The profiled steps took {ratio:+.1%} against the {count} steps timed after them ({medians}): "
                    "what recording a step cost is within what the steps vary.")
    elif ratio > 0:
        sentence = (f"The profiled steps took {ratio:.1%} longer than the {count} steps timed after them ({medians}): "
                    "what recording a step cost, with the work on the framework's threads (its profiler's) that the "
                    "hook's CPU figure does not see.")
    else:
        sentence = (f"The profiled steps took {-ratio:.1%} less time than the {count} steps timed after them "
                    f"({medians}): the later steps slowed for reasons of their own, which hides what recording cost.")
    return {"profiled_step_median_s": round(profiled, 6), "later_step_median_s": round(later, 6),
            "later_steps": count, "ratio": round(ratio, 6),
            "standard_error": round(se, 6) if se is not None else None, "sentence": sentence}


def report_parts(profile: ExecutionProfile, bottleneck: Bottleneck, queries: list[dict[str, Any]],
                 skew: SkewFindings) -> ReportParts:
    """The report's entry for every operation (with its SQL operators and task-time distribution), the sources
    of its evidence, and the DAG's edges."""
    on_path = {p.path for p in bottleneck.path} | {p.path for p in bottleneck.top_path}
    walked = profile.walk()
    operations = [_op_entry(p, bottleneck, on_path) for p in walked]
    if queries:
        for entry in operations:
            found = operators_of(queries, entry["id"])
            if found:
                entry["plan_operators"] = found
    for entry in operations:
        times = skew.times.get(entry["path"])
        if times is not None:
            # the task-time distribution (and what the tasks read) of every operation of enough tasks
            entry["task_time_s"] = times.as_dict()
            entry["skewed"] = entry["path"] in skew.flagged
    counts: dict[str, int] = {}
    for entry in operations:
        counts[entry["vector_source"]] = counts.get(entry["vector_source"], 0) + 1
    resolution = profile.resolution
    # each leaf's task-seconds once (a vector times its tasks' time, for 20,000 operations)
    leaf_work = [(sum(p.work_seconds.values()), p.vector.measured_share) for p in walked if not p.children]
    leaf_time = sum(work for work, _ in leaf_work)
    measured_time = sum(work * share for work, share in leaf_work)
    sources: dict[str, Any] = {
        "classifier": profile.classifier_version,
        "attribution": profile.attribution,
        "vector_sources": counts,
        # Share of the operations' time (task-seconds) whose category was measured, not inferred.
        "measured_fraction": round(measured_time / leaf_time, 4) if leaf_time > 0 else 0.0,
    }
    if resolution is not None:
        sources.update(
            samples=resolution.total_samples,
            located_samples=resolution.located_samples,
            located_fraction=round(resolution.located_samples / resolution.total_samples, 4)
            if resolution.total_samples else 0.0,
            samples_by_origin=dict(resolution.by_origin),
            problems=resolution.problems[:50],
        )
    edges = []

    def collect_edges(level: Any) -> None:
        for u, v, data in level.graph.edges(data=True):
            edges.append({"from": level.nodes[u].path, "to": level.nodes[v].path, "implicit": bool(data.get("implicit"))})
        for node in level.nodes.values():
            if node.children is not None:
                collect_edges(node.children)

    collect_edges(profile.top)
    return ReportParts(operations, queries, skew, sources, edges)


def _outside_entry(predictor: Predictor) -> dict[str, float | None] | None:
    outside = predictor.outside
    if outside is None:
        return None
    disk = predictor.outside_disk_s()
    return {"seconds": round(outside.seconds, 6), "read_bytes": round(outside.read_bytes),
            "disk_s": round(disk, 6) if disk is not None else None}


def build_report(
    profile: ExecutionProfile, bottleneck: Bottleneck, predictions: Sequence[Prediction], predictor: Predictor,
    settings: SettingsSearch, parts: ReportParts,
) -> dict[str, Any]:
    """The report document: the stages' results (``parts`` from ``report_parts``; ``settings`` the search of the
    framework's settings with this predictor and these predictions) laid out."""
    trace = profile.trace
    app = trace.application
    resolution = profile.resolution
    operations, queries, skew, sources, edges = parts.operations, parts.queries, parts.skew, parts.sources, parts.edges
    report: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "producer": {"name": "crystalperf", "version": __version__},
        "trace_schema_version": trace.schema_version,
        "application": {
            "framework": app.framework,
            "framework_version": app.framework_version,
            "id": app.id,
            "name": app.name,
            "status": app.status,
            "start": app.start,
            "end": app.end,
        },
        # Set when the hook wrote before the run ended (killed, stopped early): the figures cover what ran until then.
        "partial": trace.partial,
        "total_runtime_s": round(app.duration, 6),
        "bottleneck": {
            "resource": bottleneck.resource,
            "seconds": {r: round(bottleneck.seconds[r], 6) for r in CATEGORIES},
            "share": {r: round(v, 6) for r, v in bottleneck.share.items()},
            "busiest_resource": bottleneck.busiest_resource,
            "waiting_on": bottleneck.waiting_on,
            # Set when the path mostly waited on something whose own work is known: that work's split.
            "through_input": ({r: round(v, 6) for r, v in bottleneck.upstream_work.as_dict().items()}
                              if bottleneck.upstream_work is not None else None),
            "waiting_operation": bottleneck.waiting_op.path if bottleneck.waiting_op is not None else None,
            "unattributed_s": round(bottleneck.unattributed_s, 6),
            # the gaps between the operations (at least half a second each) and the device's part in them
            "outside": _outside_entry(predictor),
            # the time outside every operation: before the first, between them, after the last
            "outside_split": ({"before_s": round(split.before_s, 6), "between_s": round(split.between_s, 6),
                               "after_s": round(split.after_s, 6)}
                              if (split := outside_split(profile)) is not None else None),
            # the driver's own work outside every operation, where a hook sampled it (crystalperf.core.profile.driver)
            "driver_work": (work.as_dict() if (work := driver_work(profile)) is not None else None),
            # A pipelined job's streaming limits in seconds, and the one that set its pace (``input``: none did).
            "pace": ({"limit": bottleneck_pace.limit, "runtime_s": round(bottleneck_pace.runtime_s, 6),
                      "limits_s": {k: round(v, 6) for k, v in bottleneck_pace.limits.items()}}
                     if (bottleneck_pace := predictor.streaming_pace()) is not None else None),
            "sentence": bottleneck.sentence(),
        },
        "critical_path": [p.path for p in bottleneck.path],
        "critical_path_top": [p.path for p in bottleneck.top_path],
        "operations": operations,
        "edges": edges,
        "baseline": {
            "slots": predictor.baseline.slots,
            "executors": predictor.baseline.executors,
            "cores_per_executor": predictor.baseline.cores_per_executor,
            "network_bandwidth": predictor.baseline.network_bandwidth,
            "disk_bandwidth": predictor.baseline.disk_bandwidth,
            "memory_bytes": predictor.baseline.memory_bytes,
            "data_bytes": predictor.baseline.data_bytes,
            "device": predictor.baseline.device,
            "warmup_factor": round(predictor.warmup, 4),
            "assumptions": predictor.baseline.assumptions,
            # where each bandwidth comes from (declared by the hook, observed from the job's byte counters,
            # assumed), and what the counters showed
            "bandwidth_origins": dict(predictor.baseline.origins),
            "observed": {key: {"bytes": round(seen.bytes), "direction": seen.direction,
                               "active_s": round(seen.active_s, 3), "bandwidth": round(seen.bandwidth, 1),
                               "limit": seen.limit, "sources": seen.sources, "note": seen.describe()}
                         for key, seen in predictor.baseline.observed.items()},
        },
        "predictions": [p.as_dict() for p in predictions],
        "advice": _advice(bottleneck, predictions, profile, predictor),
        "sources": sources,
        "warnings": list(trace.warnings) + [
            p for p in (resolution.problems if resolution is not None else []) if p.startswith("classifier ")
        ] + _storage_idle_warning(profile) + _network_idle_warning(profile) + _collector_warning(trace),
    }
    # What the tasks shared: the cores, how busy the processes kept them, where their CPU went by thread kind.
    report["machine"] = machine_entry(trace, predictor.ceilings.machine)
    # What the hook itself cost (trace schema 1.9), measured by the hook.
    report["hook_cost"] = hook_cost(trace.hook, trace.metrics)
    if report["hook_cost"] is not None and report["hook_cost"]["thinned"]:
        report["warnings"].append(report["hook_cost"]["sentence"])
    if queries:
        report["sql_queries"] = queries
    if trace.streaming is not None:
        report["streaming"] = trace.streaming.model_dump(exclude_none=True)
        report["streaming"]["note"] = "Streaming predictions assume the observed input rate."
    # the steps a hook timed without profiling them (a window its memory budget ended early) are iterations too
    steps = int(trace.metrics.get("steps", 0) + trace.metrics.get("unprofiled_steps", 0))
    if steps > 0:
        # Iterative jobs (training): the paper's runtime is the mean iteration time (§7.1).
        report["iterations"] = {
            "steps": steps,
            "step_time_s": round(app.duration / steps, 6),
            "predicted_step_time_s": {p.changes.describe(): round(p.crystalperf.runtime_s / steps, 6)
                                      for p in predictions},
        }
    if "input_wait_fraction" in trace.metrics:
        wait = trace.metrics["input_wait_fraction"]
        report["input_bound"] = {
            "input_wait_fraction": wait,
            "highly_input_bound": wait >= INPUT_BOUND_THRESHOLD,
        }
    # Skewed operations (crystalperf.core.profile.skew), the largest predicted gain first; advice names the worst.
    report["skew"] = [found.as_dict() for found in skew.skewed]
    if skew.skewed:
        report["advice"].append(skew.skewed[0].sentence())
    # Advice in settings (crystalperf.core.predict.settings): the framework's own keys, found by searching the what-if
    # space; the report's scenarios are reused where a setting makes the same changes.
    report["settings_advice"] = [s.as_dict() for s in settings.suggestions]
    report["settings_search"] = settings.as_dict()
    report["advice"] += settings.advice()
    return report
