"""A job's merged parts -> ``Trace``: one operation per operator chain (kind ``task``, one task per
subtask) with its operators as children, ordered and linked by the recorded plan when one names the job's
operators (linearly otherwise), the streaming figures, and the stack samples per chain and per operator.

:func:`read_metrics` is the entry point (``crystalperf import flink-metrics``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from crystalperf.core import trace as t
from crystalperf.core.sampling import SampleTable
from crystalperf.integrations.flink.config import INTEGRATION
from crystalperf.integrations.flink.reader import Part, PlanNode, Scope, find_plan, load_job

PUSH_TO_OPERATOR = "ChainingOutput.pushToOperator"
# Frames of the Java side of PyFlink's Python operators (process mode: the UDFs run in worker processes)
PYTHON_OPERATOR = "org.apache.flink.streaming.api.operators.python."
NO_PLAN_WARNING = (
    "no recorded execution plan (crystalperf.integrations.flink.record_plan) matches this job: "
    "edges between operator chains are assumed linear"
)
PYTHON_WORKERS_WARNING = (
    "the job runs Python functions in separate Python worker processes, which are not sampled: "
    "the time task threads wait on them (Python compute) shows as waiting, not as CPU"
)


@dataclass
class OperatorTotals:
    """One chained operator's records summed over its subtasks."""

    records_in: float = 0.0
    records_out: float = 0.0
    subtasks: int = 0


@dataclass
class Chain:
    """An operator chain (a Flink task): the task scope of each subtask, and its operators in chain order."""

    name: str
    tasks: dict[str, Scope] = field(default_factory=dict)  # subtask -> its (last) task scope
    operators: dict[str, OperatorTotals] = field(default_factory=dict)


@dataclass
class Links:
    """The edges the plan gives: chain -> upstream chains, chain -> {upstream chain: ship strategy},
    operator -> the operators it follows inside its chain. Empty without a plan."""

    chain_parents: dict[str, list[str]] = field(default_factory=dict)
    strategies: dict[str, dict[str, str]] = field(default_factory=dict)
    operator_parents: dict[str, list[str]] = field(default_factory=dict)


def chains_from_scopes(scopes: Iterable[Scope]) -> dict[str, Chain]:
    """Chains in the order the job's metrics first name them."""
    chains: dict[str, Chain] = {}
    for scope in scopes:
        if not scope.task_name:
            continue  # JobManager-side job metrics (uptime, restarts) belong to no operator chain
        chain = chains.setdefault(scope.task_name, Chain(scope.task_name))
        if scope.operator_name:
            op = chain.operators.setdefault(scope.operator_name, OperatorTotals())
            op.records_in += scope.values.get("numRecordsIn", 0.0)
            op.records_out += scope.values.get("numRecordsOut", 0.0)
            op.subtasks = max(op.subtasks, scope.index + 1)
        else:
            chain.tasks[scope.subtask] = scope
    return chains


def _topological(items: list[str], parents_of: dict[str, list[str]]) -> list[str]:
    """items with every item after its parents among them, otherwise in their given order (cycles cut)."""
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


def plan_links(chains: dict[str, Chain], nodes: list[PlanNode]) -> Links:
    """The plan's edges between the job's operators, sorted into edges between chains and inside them."""
    chain_of = {name: chain.name for chain in chains.values() for name in chain.operators}
    name_of = {node.id: node.name for node in nodes}
    links = Links({name: [] for name in chains}, {name: {} for name in chains}, defaultdict(list))
    for node in nodes:
        me = name_of[node.id]
        for edge in node.predecessors:
            parent = name_of.get(edge.source)
            if parent is None or me not in chain_of or parent not in chain_of:
                continue
            mine, theirs = chain_of[me], chain_of[parent]
            if mine == theirs:
                links.operator_parents[me].append(parent)
            elif theirs not in links.chain_parents[mine]:
                links.chain_parents[mine].append(theirs)
                links.strategies[mine][theirs] = edge.ship_strategy
    return links


def plan_order(chains: dict[str, Chain], links: Links) -> dict[str, Chain]:
    """Chains in topological order, each with its operators in topological order."""
    for chain in chains.values():
        ordered = _topological(list(chain.operators), links.operator_parents)
        chain.operators = {name: chain.operators[name] for name in ordered}
    return {name: chains[name] for name in _topological(list(chains), links.chain_parents)}


def _chain_position(task_name: str, operator_name: str) -> int:
    # Flink registers a chain's operators tail first; the task name lists them head first.
    position = task_name.find(operator_name)
    return position if position >= 0 else len(task_name)


def order_without_plan(chains: dict[str, Chain]) -> dict[str, Chain]:
    """Without a plan: chains as first seen, operators in the order the chain's name lists them."""
    for chain in chains.values():
        chain.operators = dict(sorted(chain.operators.items(), key=lambda kv: _chain_position(chain.name, kv[0])))
    return chains


def chain_tasks(chain: Chain, job: Part, duration: float) -> list[t.Task]:
    """One task per subtask of the chain: busy + back-pressured time, back-pressure as network wait."""
    tasks = []
    for scope in sorted(chain.tasks.values(), key=lambda s: s.index):
        values = scope.values
        busy = values.get("accumulateBusyTimeMs")
        backpressured = values.get("accumulateBackPressuredTimeMs", 0.0) / 1000.0
        cpu = job.thread_cpu.get((chain.name, scope.subtask))
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
        tasks.append(t.Task(id=f"{chain.name}#{scope.subtask}", index=scope.index, start=job.start, end=job.end,
                            metrics=metrics))
    return tasks


def chain_operators(chain_id: str, chain: Chain, links: Links | None, job: Part) -> list[t.Operation]:
    """The chain's operators as child operations, linked by the plan (one after the other without it)."""
    op_ids = {name: f"{chain_id}/op{i}" for i, name in enumerate(chain.operators)}
    children: list[t.Operation] = []
    for name, op in chain.operators.items():
        if links is not None:
            inner = [op_ids[p] for p in links.operator_parents.get(name, []) if p in op_ids]
        else:
            inner = [children[-1].id] if children else []
        children.append(
            t.Operation(
                id=op_ids[name],
                name=name,
                kind="operator",
                parents=inner,
                start=job.start,
                end=job.end,
                parallelism=op.subtasks or None,
                metrics={t.METRIC_RECORDS_IN: op.records_in, t.METRIC_RECORDS_OUT: op.records_out},
            )
        )
    return children


def chain_operations(chains: dict[str, Chain], links: Links | None, job: Part) -> list[t.Operation]:
    """One operation per chain, in the given order, linked by the plan (one after the other without it)."""
    chain_ids = {name: f"chain{i}" for i, name in enumerate(chains)}
    duration = max(job.end - job.start, 0.0)
    operations: list[t.Operation] = []
    for name, chain in chains.items():
        attributes: dict[str, str] = {}
        if links is not None:
            parents = [chain_ids[p] for p in links.chain_parents.get(name, [])]
            if links.strategies.get(name):
                attributes["ship_strategy"] = ", ".join(
                    f"{chain_ids[p]}: {how}" for p, how in links.strategies[name].items()
                )
        else:
            parents = [operations[-1].id] if operations else []
        tasks = chain_tasks(chain, job, duration)
        operations.append(
            t.Operation(
                id=chain_ids[name],
                name=name,
                kind="task",
                parents=parents,
                start=job.start,
                end=job.end,
                tasks=tasks,
                children=chain_operators(chain_ids[name], chain, links, job),
                parallelism=len(tasks) or None,
                attributes=attributes,
            )
        )
    return operations


def streaming_figures(operations: list[t.Operation], duration: float) -> t.Streaming:
    """The job's duration as latency, its sources' output rate and its sinks' input rate."""
    has_children = {p for op in operations for p in op.parents}
    sinks_in = sum(
        c.metrics.get(t.METRIC_RECORDS_IN, 0.0)
        for op in operations
        if op.id not in has_children
        for c in op.children[-1:]
    )
    sources_out = sum(
        c.metrics.get(t.METRIC_RECORDS_OUT, 0.0) for op in operations if not op.parents for c in op.children[:1]
    )
    return t.Streaming(
        latency_s=duration or None,
        input_rate=sources_out / duration if duration else None,
        throughput=sinks_in / duration if duration else None,
    )


def _frames(table: SampleTable, stack: str) -> tuple[list[int], int]:
    """Frame ids of a stack (top first) and how many chained operators deep it is."""
    frame_ids = []
    depth = 0
    for line in stack.splitlines():
        name, file, number = (line.split("\t") + ["", ""])[:3]
        depth += name.endswith(PUSH_TO_OPERATOR)
        line_number = int(number) if number.lstrip("-").isdigit() and int(number) > 0 else None
        frame_ids.append(table.frame_id(name, file or None, line_number, language="java"))
    return frame_ids, depth


def samples_of(job: Part, chain_ids: dict[str, str], operator_ids: dict[str, list[str]]) -> t.StackSamples | None:
    """Task-thread stacks the reporter aggregated per (chain, subtask, bucket); top frame first.

    Each row counts for its chain and, again, for the operator of the chain it was in: a record enters
    the n-th chained operator through n nested ``ChainingOutput.pushToOperator`` calls.
    """
    if not job.samples:
        return None
    origin = job.sample_origin if job.sample_origin is not None else job.start
    origin = min([origin, *(row.origin for row in job.samples)])
    table = SampleTable(origin, job.sample_bucket_s, job.sample_interval_s)
    for row in job.samples:
        chain = chain_ids.get(row.task_name)
        if chain is None:
            continue
        frame_ids, depth = _frames(table, row.stack)
        stack = table.stack_id(frame_ids)
        when = row.origin + (row.bucket + 0.5) * job.sample_bucket_s
        task = f"{row.task_name}#{row.subtask}"
        table.add(t.SampleKey(operation=chain, task=task), stack, when, row.count)
        members = operator_ids.get(chain) or []
        if len(members) > 1:
            operator = members[min(depth, len(members) - 1)]
            table.add(t.SampleKey(operation=operator, task=task, thread="operator"), stack, when, row.count)
    return table.to_samples()


def split_chain_busy_time(operations: list[t.Operation], samples: t.StackSamples | None) -> None:
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


def warnings_of(job: Part, planned: bool, samples: t.StackSamples | None) -> list[str]:
    """What the trace cannot show, in words for the report."""
    warnings = []
    if not planned:
        warnings.append(NO_PLAN_WARNING)
    if job.dropped_metrics:
        warnings.append(f"{job.dropped_metrics} metrics were not kept (memory bound reached)")
    if samples is not None and any(PYTHON_OPERATOR in frame.name for frame in samples.frames):
        warnings.append(PYTHON_WORKERS_WARNING)
    if job.dropped_samples:
        warnings.append(f"{job.dropped_samples} stack samples were not kept (memory bound reached)")
    return warnings


def build_trace(job: Part) -> t.Trace:
    """The trace of a job's (merged) parts; the plan is looked for in the first part's directory."""
    chains = chains_from_scopes(job.scopes)
    operator_names = {name for chain in chains.values() for name in chain.operators}
    nodes = find_plan(job.path.parent, operator_names) if operator_names else None
    links = plan_links(chains, nodes) if nodes is not None else None
    chains = plan_order(chains, links) if links is not None else order_without_plan(chains)
    operations = chain_operations(chains, links, job)
    duration = max(job.end - job.start, 0.0)
    chain_ids = {op.name: op.id for op in operations}
    samples = samples_of(job, chain_ids, {op.id: [c.id for c in op.children] for op in operations})
    split_chain_busy_time(operations, samples)
    process_cpu = job.process_cpu_s
    return t.Trace(
        samples=samples,
        producer=t.Producer(hook="flink-reporter"),
        application=t.Application(
            framework="flink",
            id=job.job_id,
            name=job.job_name,
            start=job.start,
            end=job.end,
            output_dir=str(job.path.parent),
        ),
        operations=operations,
        streaming=streaming_figures(operations, duration),
        environment=t.Environment(cpu_count=job.cpu_count or None, scaling=list(INTEGRATION.scaling)),
        metrics={"cpu_utilization": process_cpu / duration} if process_cpu and duration else {},
        warnings=warnings_of(job, links is not None, samples),
    )


def read_metrics(path: Path) -> t.Trace:
    """Turn the reporter's ``crystalperf-flink-<job_id>.<process>.json`` into a trace (one operation per
    operator chain), merged with the other parts of the same job in that directory (one per cluster process)."""
    return build_trace(load_job(Path(path)))
