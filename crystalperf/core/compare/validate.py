"""``crystalperf validate TRACE RERUN``: the what-if predicted from TRACE for the resources RERUN ran with,
against what RERUN measured, overall and per operation, next to the two baselines."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from crystalperf.core.compare.diff import _close, _round, setting_differences
from crystalperf.core.compare.runs import (
    VALIDATE_VERSION,
    Run,
    _dict,
    _text,
    match_operations,
    operations_of,
)
from crystalperf.core.errors import BadInputError
from crystalperf.core.predict.jvm import largest_heap
from crystalperf.core.units import format_bandwidth, format_byte_rate

# The settings that configure the slots a derived key already expresses: a difference in them is that change.
SLOT_SETTINGS = {
    "cores": ("spark.master", "spark.executor.cores", "spark.cores.max", "intra_op_parallelism_threads",
              "inter_op_parallelism_threads"),
    "executors": ("spark.executor.instances", "spark.cores.max", "spark.dynamicAllocation.maxExecutors"),
    "parallelism": ("parallelism.default",),
    "slots": ("spark.master", "spark.cores.max", "parallelism.default"),
}


# A bandwidth difference is a change to predict only where a run's bytes needed the slower of the two bandwidths
# for at least this share of its runtime: below it, a rate recorded as the bandwidth (e.g. what each read
# achieved) differs from run to run while the device or link sits idle, and re-runs vary by more than it.
BUSY_SHARE_TO_MATTER = 0.1


@dataclass
class DerivedChanges:
    values: dict[str, float | str] = field(default_factory=dict)
    not_expressed: list[str] = field(default_factory=list)


def derive_changes(traced: Run, rerun: Run) -> DerivedChanges:
    """The what-if that turns TRACE's resources into RERUN's, from the two reports' ``baseline`` (what the
    predictor starts from) and, where both are traces, their environments. Differences a what-if cannot
    express are listed, not guessed."""
    assert traced.trace is not None
    from crystalperf.core.profile.machine import executor_hosts, scaled_hosts, scaling_keys

    a = _dict(traced.report.get("baseline"))
    b = _dict(rerun.report.get("baseline"))
    out = DerivedChanges()

    def whole(base: dict[str, Any], key: str) -> int | None:
        value = base.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None

    slots_b = whole(b, "slots")
    resized = [k for k in ("slots", "cores_per_executor", "executors") if whole(b, k) and whole(a, k) != whole(b, k)]
    if resized and slots_b:
        if "parallelism" in scaling_keys(traced.trace):
            out.values["parallelism"] = slots_b
        else:
            cores, executors = whole(b, "cores_per_executor"), whole(b, "executors")
            if cores and executors and cores * executors == slots_b:
                # said the way the user configures it: the cores and executors that changed
                if cores != whole(a, "cores_per_executor"):
                    out.values["cores"] = cores
                if executors != whole(a, "executors"):
                    out.values["executors"] = executors
            if not out.values:
                out.values["slots"] = slots_b
    ma, mb = a.get("memory_bytes"), b.get("memory_bytes")
    if isinstance(ma, (int, float)) and isinstance(mb, (int, float)) and ma > 0 and mb > 0:
        if not _close(float(ma), float(mb)):
            out.values["memory"] = float(mb)
    elif bool(ma) != bool(mb):
        out.not_expressed.append("the memory for the job's data is recorded in one run only")
    elif rerun.trace is not None:
        # no memory for the job's data, but each process's heap (a Flink TaskManager's): a change of it is ``memory``
        ha, hb = largest_heap(traced.trace), largest_heap(rerun.trace)
        if ha and hb and not _close(ha, hb):
            out.values["memory"] = hb
    if _text(a.get("device")) and _text(b.get("device")) and a.get("device") != b.get("device"):
        out.values["device"] = _text(b.get("device"), 10)
    for key in ("network", "disk"):
        _bandwidth_change(key, (a, traced.runtime_s), (b, rerun.runtime_s), out)
    if rerun.trace is not None:
        ea, eb = traced.trace.environment, rerun.trace.environment
        if ea.cpu_speed != eb.cpu_speed:
            out.values["cpu_speed"] = eb.cpu_speed / ea.cpu_speed
        if ea.cpu_count and eb.cpu_count and ea.cpu_count != eb.cpu_count:
            out.not_expressed.append(f"the machines' CPUs differ ({ea.cpu_count} and {eb.cpu_count}); the "
                                     "prediction keeps the traced run's CPUs beyond the task slots")
        hosts_a, hosts_b = executor_hosts(traced.trace), executor_hosts(rerun.trace)
        executors_a, executors_b = whole(a, "executors"), whole(b, "executors")
        if hosts_a and hosts_b and executors_a and executors_b and "parallelism" not in scaling_keys(traced.trace):
            # a what-if keeps the traced executors per host unless it says ``hosts``
            if hosts_b != scaled_hosts(hosts_a, executors_a, executors_b):
                out.values["hosts"] = hosts_b
        elif len(ea.hosts) != len(eb.hosts):
            out.not_expressed.append(f"the runs used {len(ea.hosts)} and {len(eb.hosts)} hosts")
    settings, _ = setting_differences(traced, rerun)
    covered = {"task slots", "executors", "cores per executor", "memory", "network bandwidth", "disk bandwidth",
               "device", "crystalperf", "CPU speed", "CPUs", "hosts"}
    others = [s for s in settings if s["name"] not in covered and not _expressed(str(s["name"]), out.values)]
    if others:
        shown = "; ".join(f"{s['name']}: {s['a']} -> {s['b']}" for s in others[:8])
        more = f" (+{len(others) - 8} more)" if len(others) > 8 else ""
        out.not_expressed.append(f"{len(others)} other difference(s), part of the prediction only as far as they "
                                 f"changed the resources above: {shown}{more}")
    return out


def _expressed(name: str, values: dict[str, float | str]) -> bool:
    """Whether a setting's difference is already part of the derived what-if: a key that sets the slots the what-if
    changes, or the hook's own settings (its output directory), which change no resource."""
    key = name.removeprefix("setting ")
    return "crystalperf" in key.lower() or any(key in SLOT_SETTINGS.get(k, ()) for k in values)


def _bandwidth_change(key: str, run_a: tuple[dict[str, Any], float], run_b: tuple[dict[str, Any], float],
                      out: DerivedChanges) -> None:
    (a, runtime_a), (b, runtime_b) = run_a, run_b
    va, vb = a.get(f"{key}_bandwidth"), b.get(f"{key}_bandwidth")
    if not (isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va > 0 and vb > 0):
        return
    if _close(float(va), float(vb)):
        return
    rate = format_bandwidth if key == "network" else format_byte_rate
    busy = _busiest_share(key, float(min(va, vb)), (a, runtime_a), (b, runtime_b))
    if busy is not None and busy < BUSY_SHARE_TO_MATTER:
        out.not_expressed.append(
            f"the {key} bandwidth differs ({rate(float(va))}; {rate(float(vb))}) but neither run needed it: at the "
            f"slower of the two, the bytes the counters saw move take {busy:.1%} of a run at most, so the "
            "difference is left out of the prediction")
        return
    oa, ob = _dict(a.get("bandwidth_origins")).get(key), _dict(b.get("bandwidth_origins")).get(key)

    def configured(base: dict[str, Any], origin: Any) -> bool:
        # a declared bandwidth, or a cgroup limit the job ran under, is configuration; a rate the job was seen
        # moving data at is its demand as much as the device's supply
        seen = _dict(base.get("observed")).get(key)
        return origin in ("declared", "stated") or (origin == "observed" and isinstance(seen, dict)
                                                     and seen.get("limit") is not None)

    if configured(a, oa) and configured(b, ob):
        out.values[key] = float(vb)
    else:
        out.not_expressed.append(
            f"the {key} bandwidth differs ({rate(float(va))}, {oa or '?'}; {rate(float(vb))}, {ob or '?'}) but "
            "is not a declared bandwidth or a cgroup limit in both runs: what a job is seen moving is its "
            "demand, not a configuration, so it is left out of the prediction")


def _busiest_share(key: str, bandwidth: float, *runs: tuple[dict[str, Any], float]) -> float | None:
    """The largest share of its runtime a run's counted bytes need at ``bandwidth``; None when a run's counters
    are missing (then nothing says the resource was idle)."""
    shares = []
    for base, runtime in runs:
        seen = _dict(_dict(base.get("observed")).get(key))
        moved = seen.get("bytes")
        if not isinstance(moved, (int, float)) or runtime <= 0:
            return None
        shares.append(float(moved) / bandwidth / runtime)
    return max(shares)


# A rerun whose task threads used this much more or less CPU than the traced run's did other work per row (the
# JVM's code paths, its caches, the number of subtasks over the same rows): the prediction keeps the traced work.
WORK_CHANGE_TO_NOTE = 0.1
_WORK_FIGURES = ("process_cpu_s", "task_cpu_s", "threads_cpu_s", "kernel_cpu_s", "minor_faults")
# A rerun whose processes spent this many more CPU-s in the kernel, on this share more page faults served from
# memory, paid for first touching more heap at once (a fresh JVM's): the note says how much of the change it is.
FAULT_KERNEL_TO_NOTE = 0.25
FAULT_CHANGE_TO_NOTE = 0.1
# Frameworks whose per-task CPU time is their task threads' CPU time (Spark's executorCpuTime, Flink's subtask
# threads'); TensorFlow's is its compute kernels' duration, which more intra-op threads shorten.
TASK_CPU_IS_THREAD_CPU = frozenset({"spark", "flink"})


def _work_of(run: Run) -> dict[str, Any] | None:
    """A run's CPU figures from its report's ``machine`` (None: the report has none)."""
    machine = _dict(run.report.get("machine"))
    figures: dict[str, Any] = {k: float(v) for k in _WORK_FIGURES
                               if isinstance(v := machine.get(k), (int, float)) and math.isfinite(v) and v >= 0}
    threads = {str(k): float(v) for k, v in _dict(machine.get("threads")).items()
               if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0}
    if threads:
        figures["threads"] = threads
    return figures or None


def work_change(traced: Run, rerun: Run) -> tuple[dict[str, Any] | None, str | None]:
    """The two runs' CPU figures side by side (``work`` of the validation) and a note where the rerun's task
    threads used at least ``WORK_CHANGE_TO_NOTE`` more or less CPU than the traced run's."""
    a, b = _work_of(traced), _work_of(rerun)
    if a is None or b is None:
        return None, None
    ta, tb = _dict(a.get("threads")).get("task"), _dict(b.get("threads")).get("task")
    what = "task threads"
    if (not ta or tb is None) and _text(traced.application.get("framework")) in TASK_CPU_IS_THREAD_CPU:
        ta, tb, what = a.get("task_cpu_s"), b.get("task_cpu_s"), "tasks (as the framework measured them)"
    change = (tb - ta) / ta if ta and tb is not None else None
    entry = {"traced": a, "rerun": b, "task_change": _round(change)}
    if change is None or abs(change) < WORK_CHANGE_TO_NOTE:
        return entry, None
    note = (f"the rerun's {what} used {abs(change):.0%} {'more' if change > 0 else 'less'} CPU than the traced "
            f"run's ({tb:.2f} against {ta:.2f} CPU-s")
    if a.get("threads_cpu_s") and b.get("threads_cpu_s"):
        note += f"; all their processes' threads {b['threads_cpu_s']:.2f} against {a['threads_cpu_s']:.2f}"
    note += "): the prediction keeps the traced run's work, so a miss of about that share is the work's, not the "
    note += "resources'" + _fault_words(a, b) + " (docs/whatif.md, Known limits)"
    return entry, note


def _fault_words(traced: dict[str, Any], rerun: dict[str, Any]) -> str:
    """What of a work change the kernel's page-fault handling explains, where both runs' processes counted it."""
    ka, kb = traced.get("kernel_cpu_s"), rerun.get("kernel_cpu_s")
    fa, fb = traced.get("minor_faults"), rerun.get("minor_faults")
    if ka is None or kb is None or not fa or fb is None:
        return ""
    kernel, faults = kb - ka, (fb - fa) / fa
    if abs(kernel) < FAULT_KERNEL_TO_NOTE or abs(faults) < FAULT_CHANGE_TO_NOTE or (kernel > 0) != (faults > 0):
        return ""
    more = kernel > 0
    return (f"; {abs(kernel):.2f} CPU-s {'more' if more else 'less'} of it in the kernel, on {abs(faults):.0%} "
            f"{'more' if more else 'fewer'} page faults served from memory ({fb:,.0f} against {fa:,.0f}): its JVMs "
            f"first touched {'more' if more else 'less'} of their heaps")


def _measured(run: Run, streaming: bool) -> float:
    latency = _dict(run.report.get("streaming")).get("latency_s")
    if streaming and isinstance(latency, (int, float)) and latency > 0:
        return float(latency)
    return run.runtime_s


def _error(predicted: float, measured: float) -> float | None:
    return (predicted - measured) / measured if measured > 0 else None


def validate(traced: Run, rerun: Run, *, classifier: Any = None, band: bool = True) -> dict[str, Any]:
    """The prediction made from ``traced`` for ``rerun``'s resources, against ``rerun``'s measurement."""
    from crystalperf.core.analysis import analyze
    from crystalperf.core.predict import Changes, Predictor

    assert traced.trace is not None
    fa, fb = _text(traced.application.get("framework")), _text(rerun.application.get("framework"))
    if fa != fb:
        raise BadInputError(f"the runs are of different frameworks ({fa or '?'} and {fb or '?'}): "
                            "nothing to validate", rerun.path)
    pairs = match_operations(operations_of(traced), operations_of(rerun))
    if pairs and not any(p.a is not None and p.b is not None for p in pairs):
        raise BadInputError("no operation of the rerun matches one of the trace: not a run of the same job",
                            rerun.path)
    derived = derive_changes(traced, rerun)
    changes = Changes(dict(derived.values))
    analysis = traced.analysis or analyze(traced.trace, classifier=classifier, scenarios=[], band=False)
    predictor = Predictor(analysis.profile)
    prediction = predictor.predict(changes, band=band)
    points = _operation_points(predictor)
    streaming = predictor.streaming and predictor.runtime != traced.trace.application.duration
    measured = _measured(rerun, streaming)
    c = prediction.crystalperf
    estimates = {"crystalperf": c, "linear": prediction.linear, "replay": prediction.replay}
    rows = []
    for pair in pairs:
        if pair.a is None or pair.b is None or not pair.a.leaf or pair.a.path not in points:
            continue
        predicted = points[pair.a.path]
        rows.append({
            "path": pair.b.path, "trace_path": pair.a.path, "name": pair.b.name, "kind": pair.b.kind,
            "traced_s": round(pair.a.runtime_s, 6), "predicted_s": round(predicted, 6),
            "measured_s": round(pair.b.runtime_s, 6), "error": _round(_error(predicted, pair.b.runtime_s)),
            "on_critical_path": pair.b.on_critical_path,
        })
    notes = list(prediction.notes)
    if _text(traced.application.get("name")) != _text(rerun.application.get("name")):
        notes.append("the applications' names differ: the runs may not be of the same job")
    if rerun.report.get("partial"):
        notes.append(f"the rerun is partial: {_text(rerun.report.get('partial'), 1000)}")
    work, work_note = work_change(traced, rerun)
    if work_note is not None:
        notes.append(work_note)
    return {
        "validate_version": VALIDATE_VERSION,
        "trace": traced.summary(),
        "rerun": rerun.summary(),
        "changes": {"values": dict(changes.values), "description": changes.describe()},
        "not_expressed": derived.not_expressed,
        "traced_runtime_s": round(prediction.baseline_runtime_s, 6),
        "measured_runtime_s": round(measured, 6),
        "predicted": {name: {"runtime_s": round(e.runtime_s, 6),
                             **({"low_s": round(e.low_s, 6), "high_s": round(e.slow_end_s, 6)}
                                if e.low_s is not None else {})}
                      for name, e in estimates.items()},
        "error": {name: _round(_error(e.runtime_s, measured)) for name, e in estimates.items()},
        "within_band": (c.low_s <= measured <= c.slow_end_s) if c.low_s is not None else None,
        "operations": rows,
        "operations_unmatched": sum(1 for p in pairs if p.a is None or p.b is None),
        "work": work,
        "notes": notes,
    }


def _operation_points(predictor: Any) -> dict[str, float]:
    """Each finest operation's predicted duration in the point prediction the predictor last made (streaming
    predictions have none: they predict the path's latency as a whole)."""
    units = getattr(predictor, "_units", {})
    return {path: float(unit.point) for path, unit in units.items()
            if getattr(unit, "point", None) is not None and math.isfinite(unit.point)}
