"""Critical path and bottleneck resource (paper §4.2).

The critical path of a level is its longest path with each operation weighted by its measured wall
time (which already honours the parallelism of its tasks). Operations with a sub-DAG are expanded
into their own critical path, so the path ends at the finest level the trace has (Spark: stages).
Resource-time is summed along it; the largest resource is the bottleneck. Waiting (for input, for
downstream, for nothing) is summed too and, when it is the largest, is the verdict — with what was waited
on — since no resource of the operations would shorten it. Time on the path that no operation accounts
for (driver work, scheduling gaps) is reported apart, not given to a resource.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from crystalperf.core import trace as tr
from crystalperf.core.profile.dag import ExecutionProfile, LevelGraph, OperationProfile
from crystalperf.core.profile.driver import driver_work
from crystalperf.core.profile.outside import outside_split, trigger_waits, where_outside
from crystalperf.core.resources import CATEGORIES, RESOURCES, WAITING, ResourceVector, weighted_mean
from crystalperf.core.trace.totals import metric_total
from crystalperf.core.units import format_duration


@dataclass(frozen=True)
class Pace:
    """What set a pipelined job's traced pace: the largest of its limits (seconds: ``thread`` the busiest subtask
    thread's CPU time, ``machine`` the processes' work over their CPUs, ``link`` the busiest link's bytes over its
    bandwidth) where it took at least ``SATURATED`` of the runtime, else ``input`` (the operators kept up with
    what arrived)."""

    limit: str
    limits: dict[str, float]
    runtime_s: float

    @property
    def resource(self) -> str | None:
        """The resource more of which would speed the job up; None when its input set the pace."""
        return {"thread": "cpu", "machine": "cpu", "link": "network"}.get(self.limit)

    @property
    def seconds(self) -> float:
        return self.limits.get(self.limit, 0.0)

    def reason(self) -> str:
        """The limit in words, with its seconds against the runtime (empty when the input set the pace)."""
        share = f"{format_duration(self.seconds)} of the {format_duration(self.runtime_s)} run"
        if self.limit == "link":
            return f"its busiest network link needed {share} to carry the records between its operators"
        if self.limit == "machine":
            return f"its processes' CPU work needed {share} on the CPUs they had"
        if self.limit == "thread":
            return f"its busiest subtask thread computed for {share}"
        return ""


@dataclass
class Bottleneck:
    resource: str
    seconds: dict[str, float]  # resource-time on the critical path
    unattributed_s: float  # wall time of the job not covered by the path's operations
    total_runtime_s: float
    path: list[OperationProfile]  # finest-level operations on the critical path, in order
    top_path: list[OperationProfile]  # top-level operations on the critical path
    # When waiting is the verdict: the operation that waited most on the path, and what it waited on.
    waiting_op: OperationProfile | None = None
    waiting_on: str | None = None
    backpressured: bool = False
    # of unattributed_s: streaming micro-batches waiting for their trigger (``crystalperf.core.profile.outside``)
    trigger_wait_s: float = 0.0
    # where unattributed_s lay (before, between, after the operations), in words
    outside_where: str = ""
    waiting_seconds: float = 0.0  # waiting on the path of the operations named as waiting_op
    # When the path mostly waited on something whose own work is known: that work's split; the resource is
    # then the one it used most ("disk-bound through its input").
    upstream_work: ResourceVector | None = None
    # Seconds on the path that waited on that work (and count as its resources, or as waiting when the
    # verdict is resolved through upstream siblings).
    through_seconds: float = 0.0
    # A pipelined job whose streaming limits (the busiest thread, the machine's CPUs, the busiest link) set its
    # pace: the verdict is that limit's resource, whatever the path's few busy seconds were spent on.
    pace: Pace | None = None

    @property
    def share(self) -> dict[str, float]:
        total = self.path_seconds
        return {r: (self.seconds[r] / total if total else 0.0) for r in CATEGORIES}

    @property
    def busiest_resource(self) -> str:
        """The largest of the three resources on the path: what more of would help most, waiting aside."""
        return max(RESOURCES, key=lambda r: self.seconds[r])

    @cached_property
    def path_seconds(self) -> float:
        """All the critical path's seconds, every category (``seconds`` is complete once the bottleneck is built;
        the report asks for it once per operation)."""
        return sum(self.seconds.values())

    def heaviest(self, resource: str) -> tuple[str, float, list[OperationProfile]] | None:
        """The operation name whose operations on the path spent the most on ``resource``, with their seconds and
        the operations: an operation repeated under one name (a model's layer in every training step) counts as
        one. None where none spent any."""
        by_name: dict[str, list[OperationProfile]] = {}
        for prof in self.path:
            by_name.setdefault(prof.op.name, []).append(prof)
        seconds = {name: sum(p.resource_seconds[resource] for p in profs) for name, profs in by_name.items()}
        name = max(seconds, key=lambda n: seconds[n], default=None)
        return (name, seconds[name], by_name[name]) if name is not None and seconds[name] > 0 else None

    def heaviest_text(self, resource: str) -> str:
        """The heaviest operation for a sentence: its name and seconds, and how many ran where more than one."""
        found = self.heaviest(resource)
        if found is None:
            return ""
        name, seconds, profs = found
        return f"{name} ({format_duration(seconds)}" + (f" over {len(profs)} runs)" if len(profs) > 1 else ")")

    def operation_share(self, prof: OperationProfile) -> float:
        total = self.path_seconds
        return sum(prof.resource_seconds.values()) / total if total else 0.0

    def sentence(self) -> str:
        if self.pace is not None:
            return self._pace_verdict()
        if self.path_seconds <= 0:
            return "No operation time was recorded, so there is no bottleneck to name."
        if self.upstream_work is not None:
            return self._through_verdict()
        share = self.share[self.resource]
        secs = self.seconds[self.resource]
        if self.resource == WAITING:
            verdict = self._waiting_verdict(secs, share)
            label = "backpressured" if self.backpressured else "input-bound"
        else:
            heaviest = self.heaviest_text(self.resource)
            where = f"; most of it in {heaviest}" if heaviest else ""
            verdict = (
                f"{format_duration(secs)} of the {format_duration(self.path_seconds)} on its critical path ({share:.0%}) went to "
                f"{self.resource}{where}."
            )
            label = f"{self.resource}-bound"
        if self.total_runtime_s > 0 and self.unattributed_s > 0.5 * self.total_runtime_s:
            # A job that mostly waited (a rate-limited source, start-up, a driver doing other things) is not
            # "bound" by what its operations did in the little time they worked.
            why = (self.outside_where or "driver code, scheduling, start-up" if self.trigger_wait_s <= 0 else
                   f"{format_duration(self.trigger_wait_s)} of it streaming micro-batches waiting for their trigger")
            return (
                f"Most of the run ({format_duration(self.unattributed_s)} of {format_duration(self.total_runtime_s)}) was outside the "
                f"operations' busy time ({why}); of the rest, {verdict}"
            )
        return f"The job is {label}: {verdict}"

    def _pace_verdict(self) -> str:
        assert self.pace is not None
        text = (f"The job is {self.resource}-bound: it runs as a pipeline, as fast as its tightest limit, and "
                f"{self.pace.reason()}.")
        total = self.path_seconds
        if total > 0:
            busiest = self.busiest_resource
            top = max(self.path, key=lambda p: p.resource_seconds[busiest], default=None)
            where = f", most in {top.op.name}" if top is not None and top.resource_seconds[busiest] > 0 else ""
            text += (f" The operators' own busy time on the critical path: {format_duration(total)}, "
                     f"{format_duration(self.seconds[busiest])} of it {busiest}{where}.")
        return text

    def _through_verdict(self) -> str:
        assert self.upstream_work is not None
        waited = self.through_seconds
        total = self.path_seconds
        where = f"; most in {self.waiting_op.op.name} ({format_duration(self.waiting_seconds)})" if self.waiting_op else ""
        on = f", {self.waiting_on}" if self.waiting_on else ""
        work = ", ".join(f"{r} {self.upstream_work.as_dict()[r]:.0%}" for r in RESOURCES
                         if self.upstream_work.as_dict()[r] >= 0.005)
        return (
            f"The job is {self.resource}-bound through its input: {format_duration(waited)} of the {format_duration(total)} on its critical "
            f"path ({waited / total:.0%}) waited{where}{on}, and what it waited on spent its own time on "
            f"{work}. More {self.resource} for the input would shorten it."
        )

    def _waiting_verdict(self, secs: float, share: float) -> str:
        total = self.path_seconds
        text = f"{format_duration(secs)} of the {format_duration(total)} on its critical path ({share:.0%}) was spent waiting, not working"
        if self.waiting_op is not None:
            text += f"; most in {self.waiting_op.op.name} ({format_duration(self.waiting_seconds)})"
            if self.waiting_on:
                text += f", {self.waiting_on}"
        return text + ". More CPU, disk or network for these operations would not shorten it."


def level_critical_path(level: LevelGraph) -> list[str]:
    """Longest path by measured wall time; ties go to the operation that ended later."""
    order = level.topological()
    best: dict[str, float] = {}
    back: dict[str, str | None] = {}
    predecessors = level.graph.pred
    for node in order:
        runtime = level.nodes[node].path_time
        preds = list(predecessors[node])
        if preds:
            # one predecessor (a chain of 20,000 jobs) needs no ranking
            pred = preds[0] if len(preds) == 1 else max(preds, key=lambda p: (best[p], level.nodes[p].op.end))
            best[node] = best[pred] + runtime
            back[node] = pred
        else:
            best[node] = runtime
            back[node] = None
    if not best:
        return []
    last = max(order, key=lambda n: (best[n], level.nodes[n].op.end))
    path = [last]
    while back[path[-1]] is not None:
        path.append(back[path[-1]])  # type: ignore[arg-type]
    path.reverse()
    return path


def expand(level: LevelGraph, ids: list[str]) -> list[OperationProfile]:
    out: list[OperationProfile] = []
    for node_id in ids:
        prof = level.nodes[node_id]
        if prof.children is not None and prof.children.nodes:
            out.extend(expand(prof.children, level_critical_path(prof.children)))
        else:
            out.append(prof)
    return out


def find_bottleneck(profile: ExecutionProfile) -> Bottleneck:
    top_ids = level_critical_path(profile.top)
    path = expand(profile.top, top_ids)
    seconds = {r: 0.0 for r in CATEGORIES}
    on_path = {p.path for p in path} | {p.path for p in path_ancestors(profile, path)}
    for prof in path:
        for r, s in prof.resource_seconds.items():
            if r == WAITING and _waits_on_the_path(profile, prof, on_path):
                # In a pipeline, an operator idling for its upstream on this path waits while that upstream
                # works: the same seconds, already counted as the upstream's resource time.
                continue
            seconds[r] += s
    total = profile.trace.application.duration
    covered = sum(p.path_time for p in path)
    unattributed = max(0.0, total - covered)
    resource = max(CATEGORIES, key=lambda r: seconds[r])
    result = Bottleneck(resource, seconds, unattributed, total, path, [profile.top.nodes[i] for i in top_ids])
    result.trigger_wait_s = min(unattributed, sum(wait.gap_s for wait in trigger_waits(profile).values()))
    if total > 0 and unattributed > 0.5 * total:
        result.outside_where = where_outside(outside_split(profile)) + _drivers_own_work(profile)
    if resource != WAITING:
        _name_awaited_work(profile, result)
    elif any(not _waits_on_the_path(profile, p, on_path) for p in path):
        # Repeated operations (a training step's input wait, every step) are one place to look: by name.
        by_name: dict[str, float] = {}
        for prof in path:
            if not _waits_on_the_path(profile, prof, on_path):
                by_name[prof.op.name] = by_name.get(prof.op.name, 0.0) + prof.resource_seconds[WAITING]
        name = max(by_name, key=lambda n: by_name[n])
        waiter = max((p for p in path if p.op.name == name), key=lambda p: p.resource_seconds[WAITING])
        result.waiting_seconds = by_name[name]
        result.waiting_op = waiter
        result.waiting_on, result.backpressured = describe_waiting(profile, waiter)
        if not result.backpressured:
            work = upstream_work(profile, waiter)
            if work is not None:
                result.upstream_work = work
                result.resource = work.dominant_resource()
                result.through_seconds = seconds[WAITING]
    return result


def _name_awaited_work(profile: ExecutionProfile, result: Bottleneck) -> None:
    """When most of the verdict's resource-time on the path is operations' waiting given to the work they
    waited on (``OperationVector.through``), the verdict says so: the operation that waited, on what, and
    how that work spent its own time."""
    index = CATEGORIES.index(result.resource)
    through: dict[str, float] = {}
    works: list[tuple[ResourceVector, float]] = []
    for prof in result.path:
        vec = prof.vector
        if vec.through is None or vec.awaited_work is None:
            continue
        seconds = sum(vec.through) * prof.path_time
        through[prof.op.name] = through.get(prof.op.name, 0.0) + vec.through[index] * prof.path_time
        works.append((vec.awaited_work, seconds))
    if not through or sum(through.values()) < 0.5 * result.seconds[result.resource]:
        return
    name = max(through, key=lambda n: through[n])
    waiter = max((p for p in result.path if p.op.name == name),
                 key=lambda p: sum(p.vector.through or ()) * p.path_time)
    result.waiting_op = waiter
    result.waiting_seconds = sum(sum(p.vector.through or ()) * p.path_time for p in result.path if p.op.name == name)
    result.waiting_on, result.backpressured = describe_waiting(profile, waiter)
    result.upstream_work = weighted_mean(works)
    result.through_seconds = sum(seconds for _, seconds in works)


def _waits_on_the_path(profile: ExecutionProfile, prof: OperationProfile, on_path: set[str]) -> bool:
    """Whether the operation, or the operation it is part of (a chained operator's chain), runs in a pipeline
    behind an upstream sibling that lies on the critical path too (``on_path`` holds the path's operations
    and their ancestors)."""
    node: OperationProfile | None = prof
    while node is not None:
        if node.pipelined:
            prefix = f"{node.parent_path}/" if node.parent_path else ""
            if any(f"{prefix}{parent}" in on_path for parent in node.op.parents):
                return True
        node = profile.by_path.get(node.parent_path) if node.parent_path else None
    return False


def path_ancestors(profile: ExecutionProfile, path: list[OperationProfile]) -> list[OperationProfile]:
    """The operations the path's operations are part of (a stage's job, an operator's chain)."""
    found: dict[str, OperationProfile] = {}
    for prof in path:
        parent = prof.parent_path
        while parent is not None and parent not in found and parent in profile.by_path:
            found[parent] = profile.by_path[parent]
            parent = found[parent].parent_path
    return list(found.values())


def upstream_work(profile: ExecutionProfile, prof: OperationProfile) -> ResourceVector | None:
    """How what a pipelined operation waited on spent its own time, when that was mostly work: its upstream
    siblings' vectors weighted by their path time. None when what it waited on itself mostly waited (a
    rate-limited source: the job is input-bound, not resource-bound). (A hook's ``waits_on_work`` is resolved
    in the operation's vector already: :func:`crystalperf.core.attribution.vectors.resolve_awaited_work`.)"""
    if not prof.pipelined:
        # One after the other, an operation's parents had finished before it started: it did not wait on them.
        return None
    upstream = [o for o in _siblings(profile, prof) if o.op.id in prof.op.parents]
    mean = weighted_mean((o.vector.vector, o.path_time) for o in upstream)
    if mean is None or mean.waiting >= 0.5:
        return None
    return mean.busy()


def _sum_metric(prof: OperationProfile, name: str) -> float:
    return metric_total(prof.op, name)


def describe_waiting(profile: ExecutionProfile, prof: OperationProfile) -> tuple[str, bool]:
    """What an operation waited on, in words, and whether it was downstream that held it back.

    Measured backpressure points downstream; measured idle time, or waiting samples, of an operation with
    upstream siblings point at them; a source (nothing upstream) waited for its own input."""
    # Only operations running at the same time as their neighbours (a pipeline) wait on them.
    siblings = _siblings(profile, prof) if prof.pipelined else []
    downstream = [o.op.name for o in siblings if prof.op.id in o.op.parents]
    upstream = [o.op.name for o in siblings if o.op.id in prof.op.parents]
    if _sum_metric(prof, tr.METRIC_BACKPRESSURED_TIME) > _sum_metric(prof, tr.METRIC_IDLE_TIME) and downstream:
        return f"backpressured by {', '.join(downstream)}", True
    declared = prof.op.attributes.get(tr.ATTRIBUTE_WAITS_ON)
    if declared:
        return f"waiting on {declared}", False
    if upstream:
        return f"waiting on {', '.join(upstream)}", False
    where = prof.vector.waiting_in.most_common(1)
    inside = f" (in {where[0][0]})" if where else ""
    return f"waiting for its input{inside}", False


def _siblings(profile: ExecutionProfile, prof: OperationProfile) -> list[OperationProfile]:
    if prof.parent_path is None:
        return list(profile.top.nodes.values())
    parent = profile.by_path.get(prof.parent_path)
    return list(parent.children.nodes.values()) if parent is not None and parent.children is not None else []


def _drivers_own_work(profile: ExecutionProfile) -> str:
    """What the driver's sampled work in the time outside the operations was, where it worked at least 0.1 s:
    "; the driver worked about 4.80 s of it, most in org.apache.spark.sql.classic.Dataset.withColumn"."""
    work = driver_work(profile)
    if work is None or work.seconds - work.waiting_s < 0.1:
        return ""
    busiest = next((f for f in work.functions if f.resource != WAITING), None)
    most = f", most in {busiest.name}" if busiest is not None else ""
    return f"; the driver worked about {format_duration(work.seconds - work.waiting_s)} of it{most}"
