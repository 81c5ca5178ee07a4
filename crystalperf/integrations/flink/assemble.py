"""A job's merged parts -> ``Trace``: one operation per operator chain (kind ``task``, one task per
subtask) with its operators as children, ordered and linked by the recorded plan when one names the job's
operators (linearly otherwise), the streaming figures, and the stack samples per chain and per operator.

What Flink measures bounds the split (docs/trace.md, "Metrics the core reads"): a
subtask's ``run_time_s`` is its busy + idle + back-pressured time, idle (waiting for input) and
back-pressured (waiting for downstream) are measured waiting, ``cpu_time_s`` is its threads' CPU time, and
each task spans its deployment to its end as the reporter saw its metrics come and go. A FLIP-27 source reads
in fetcher threads while its task thread, idle to Flink, waits for them: where they were sampled, that idle
time is the fetchers' work (their samples split it), not waiting.

:func:`read_metrics` is the entry point (``crystalperf import flink-metrics``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from crystalperf.core import trace as t
from crystalperf.core.errors import BadInputError
from crystalperf.core.record.sampletable import OTHER, SampleTable, folded_warning
from crystalperf.core.record.sampling import merge_samples
from crystalperf.integrations.flink.config import INTEGRATION
from crystalperf.integrations.flink.pyworkers import (
    WORKER_ROLE,
    load_spool,
    load_spool_hook,
    load_spool_io,
    spool_files,
)
from crystalperf.integrations.flink.reader import (
    FETCHER_ROLE,
    JOB_STATES,
    Part,
    PlanNode,
    Scope,
    find_plan,
    load_job,
)

PUSH_TO_OPERATOR = "ChainingOutput.pushToOperator"
# Frames of the Java side of PyFlink's Python operators (process mode: the UDFs run in worker processes)
PYTHON_OPERATOR = "org.apache.flink.streaming.api.operators.python."
NO_PLAN_WARNING = (
    "no recorded execution plan (crystalperf.integrations.flink.record_plan) matches this job: "
    "edges between operator chains are assumed linear"
)
# What a source waits on when it has nothing to emit: a rate limit (datagen's rows-per-second) or an empty input.
SOURCE_WAITS_ON = t.WAITS_ON_OUTSIDE_INPUT
BACKPRESSURE_WAITS_ON = "downstream operators (back-pressure)"
PYTHON_WORKERS_WARNING = (
    "the job runs Python functions in separate Python worker processes, which are not sampled: "
    "the time task threads wait on them (Python compute) shows as waiting, not as CPU"
)
# ``python.execution-mode: thread``: the Python functions run on the task threads, in a CPython embedded in the
# TaskManager by pemja. The JVM's samples end in pemja's native call, whatever the Python code does there.
EMBEDDED_PYTHON_FRAME = "pemja.core.PythonInterpreter."
_EXTERNAL_PYTHON_OPERATOR = PYTHON_OPERATOR + "process."
EMBEDDED_PYTHON_WARNING = (
    "the job runs Python functions in the task threads (python.execution-mode: thread), whose Python stacks were "
    "not sampled (the reporter starts a sampler in the embedded interpreter, which could not import crystalperf "
    "there or did not run): they show as the JVM's call into Python (pemja.core.PythonInterpreter), counted as "
    "CPU even where the Python code waited on a disk or the network"
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


def task_span(scope: Scope, job: Part) -> tuple[float, float]:
    """When the subtask was deployed and finished, as its metrics came and went (the job's span where the
    part does not say: version 1 parts, or a task still running when the part was written)."""
    start = scope.added if scope.added is not None else job.start
    end = scope.removed if scope.removed is not None else job.end
    return max(start, job.start), max(min(end, job.end), max(start, job.start))


def task_metrics(scope: Scope, cpu: float | None, span: float, fetched: bool = False,
                 fetcher_cpu: float | None = None) -> dict[str, float]:
    """The subtask's measured times: run = busy + idle + back-pressured, each waiting a part of it, and its
    threads' CPU time bounded by the busy time (CPU spent before the mailbox loop, compiling generated code,
    is in no Flink timer).

    ``fetched``: the subtask's source read in fetcher threads that were sampled. Its task thread's idle time
    is then the time it waited for them to read, which their samples split (a disk read, a parse, or really
    nothing to read); their CPU time is in ``cpu`` and bounded by the time the subtask was not back-pressured.
    ``fetcher_cpu``: their part of ``cpu``, where the part measured it (version 7): the subtask's threads' CPU time
    unbounded and the fetchers' part of it are kept beside (``threads_cpu_time_s``, ``reader_cpu_time_s``), since
    threads side by side may use more than one core's time of the subtask's run."""
    values = scope.values
    busy = values.get("accumulateBusyTimeMs")
    backpressured = values.get("accumulateBackPressuredTimeMs", 0.0) / 1000.0
    metrics: dict[str, float] = {}
    if busy is not None:
        idle = values.get("accumulateIdleTimeMs", 0.0) / 1000.0
        working = busy / 1000.0
        metrics[t.METRIC_RUN_TIME] = working + idle + backpressured
        if fetched:
            working += idle
        else:
            metrics[t.METRIC_IDLE_TIME] = idle
    else:
        # A legacy source (its own thread, outside the mailbox) reports no busy time and an idle time of 0 that
        # says nothing: it ran from deployment to its end, and its threads' states say how it spent that time.
        run = max(span, cpu or 0.0, backpressured)
        metrics[t.METRIC_RUN_TIME] = run
        working = run - backpressured
    metrics[t.METRIC_BACKPRESSURED_TIME] = backpressured
    if "numBytesIn" in values:
        metrics[t.METRIC_NETWORK_BYTES] = values["numBytesIn"] + values.get("numBytesOut", 0.0)
    if cpu is not None:
        metrics[t.METRIC_CPU_TIME] = min(cpu, working)
        if fetcher_cpu is not None:
            metrics[t.METRIC_THREADS_CPU_TIME] = cpu
            metrics[t.METRIC_READER_CPU_TIME] = min(fetcher_cpu, cpu)
    return metrics


def taskmanagers(job: Part) -> dict[str, Any]:
    """The hosts and TaskManagers the job's subtasks ran on (from their metric scopes), for the environment, each
    with its process's CPU time by thread kind where its part split it and its garbage collector where it named it;
    the JobManager's own scope (no TaskManager id) runs no subtask and is not listed."""
    hosts: list[str] = []
    executors: dict[str, t.Executor] = {}
    for scope in job.scopes:
        if scope.host and scope.taskmanager and scope.host not in hosts:
            hosts.append(scope.host)
        if scope.taskmanager and scope.taskmanager not in executors:
            kinds = job.taskmanager_kinds.get(scope.taskmanager)
            collector = job.taskmanager_collectors.get(scope.taskmanager)
            faults = job.taskmanager_faults.get(scope.taskmanager, {})
            executors[scope.taskmanager] = t.Executor(
                id=scope.taskmanager, host=scope.host,
                thread_cpu=t.ThreadCpu(**kinds, **faults) if kinds is not None else None,
                garbage_collector=t.GarbageCollector(**collector) if collector is not None else None)
    return {"hosts": hosts, "executors": list(executors.values())}


def fetched_subtasks(job: Part) -> set[tuple[str, str]]:
    """(task name, subtask) of the subtasks whose source's fetcher threads were sampled."""
    return {(row.task_name, row.subtask) for row in job.samples if row.thread == FETCHER_ROLE}


def chain_tasks(chain: Chain, job: Part) -> list[t.Task]:
    """One task per subtask of the chain, spanning its deployment to its end, with its measured times."""
    tasks = []
    fetched = fetched_subtasks(job)
    for scope in sorted(chain.tasks.values(), key=lambda s: s.index):
        start, end = task_span(scope, job)
        key = (chain.name, scope.subtask)
        metrics = task_metrics(scope, job.thread_cpu.get(key), end - start, key in fetched, job.fetcher_cpu.get(key))
        tasks.append(t.Task(id=f"{chain.name}#{scope.subtask}", index=scope.index, start=start, end=end,
                            metrics=metrics, host=scope.host, executor=scope.taskmanager))
    return tasks


def waits_on(tasks: list[t.Task], upstream: list[str]) -> str | None:
    """What the chain's measured (or, for a legacy source, unmeasured off-CPU) waiting was for, when it waited:
    a source waits on its input, any other chain on the chains upstream of it."""
    source = not upstream
    idle = sum(task.metrics.get(t.METRIC_IDLE_TIME, 0.0) for task in tasks)
    backpressured = sum(task.metrics.get(t.METRIC_BACKPRESSURED_TIME, 0.0) for task in tasks)
    if source and all(t.METRIC_IDLE_TIME not in task.metrics for task in tasks):
        # a legacy source measures no idle time: what it did not run or wait on downstream for, it waited on
        # its input (or read it: the samples tell that apart)
        idle = sum(task.metrics[t.METRIC_RUN_TIME] - task.metrics.get(t.METRIC_CPU_TIME, 0.0)
                   - task.metrics.get(t.METRIC_BACKPRESSURED_TIME, 0.0) for task in tasks)
        run = sum(task.metrics[t.METRIC_RUN_TIME] for task in tasks)
        idle = idle if run and idle > run / 2 else 0.0
    if backpressured > idle:
        return BACKPRESSURE_WAITS_ON
    if idle > 0:
        return SOURCE_WAITS_ON if source else f"its input from {', '.join(upstream)}"
    return None


def chain_operators(chain_id: str, chain: Chain, links: Links | None, span: tuple[float, float]) -> list[t.Operation]:
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
                start=span[0],
                end=span[1],
                parallelism=op.subtasks or None,
                metrics={t.METRIC_RECORDS_IN: op.records_in, t.METRIC_RECORDS_OUT: op.records_out},
            )
        )
    return children


def chain_operations(chains: dict[str, Chain], links: Links | None, job: Part) -> list[t.Operation]:
    """One operation per chain, in the given order, linked by the plan (one after the other without it)."""
    chain_ids = {name: f"chain{i}" for i, name in enumerate(chains)}
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
        tasks = chain_tasks(chain, job)
        span = (min(task.start for task in tasks), max(task.end for task in tasks)) if tasks else (job.start, job.end)
        children = chain_operators(chain_ids[name], chain, links, span)
        waited_on = waits_on(tasks, [op.name for op in operations if op.id in parents])
        if waited_on is not None:
            attributes[t.ATTRIBUTE_WAITS_ON] = waited_on
            # the chain's thread waits in its head operators, which a critical path through the chain names
            for head in (c for c in children if not c.parents):
                head.attributes[t.ATTRIBUTE_WAITS_ON] = waited_on
        operations.append(
            t.Operation(
                id=chain_ids[name],
                name=name,
                kind="task",
                parents=parents,
                start=span[0],
                end=span[1],
                tasks=tasks,
                children=children,
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


# Task-thread frames of a chain's work for its Python operator: the operator's own frames, its Beam runner's, a
# legacy source thread waiting for the end of input (the Python operator's last bundle), and pemja's call into the
# embedded interpreter (thread mode)
_PYTHON_WORK = (PYTHON_OPERATOR, "org.apache.flink.streaming.api.runners.python.",
                "SourceStreamTask$LegacySourceFunctionThread.completeProcessing", EMBEDDED_PYTHON_FRAME)


def samples_of(job: Part, chain_ids: dict[str, str], operator_ids: dict[str, list[str]],
               python_ops: dict[str, str] | None = None) -> t.StackSamples | None:
    """Stacks the reporter aggregated per (chain, subtask, bucket, thread state, thread role); top frame first.

    Each row counts for its chain and, again, for the operator of the chain it was in: a record enters
    the n-th chained operator through n nested ``ChainingOutput.pushToOperator`` calls. A source's fetcher
    threads read for the chain's head operator; their samples keep their role (thread ``fetcher``) in both
    keys, so the analysis can tell the task thread's waits for them from the fetchers' own work. A chain's
    stacks in its Python operator (``python_ops``: chain id -> that operator's id) are that operator's, whatever
    the depth they reached it at (a watermark, or the end of input, reaches it without ``pushToOperator``).
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
        stack = table.stack_id(frame_ids, row.state)
        when = row.origin + (row.bucket + 0.5) * job.sample_bucket_s
        task = f"{row.task_name}#{row.subtask}"
        table.add(t.SampleKey(operation=chain, task=task, thread=row.thread or None), stack, when, row.count)
        members = operator_ids.get(chain) or []
        if len(members) > 1:
            operator = members[0 if row.thread else min(depth, len(members) - 1)]
            if not row.thread and python_ops and chain in python_ops and any(m in row.stack for m in _PYTHON_WORK):
                operator = python_ops[chain]
            table.add(t.SampleKey(operation=operator, task=task, thread=row.thread or "operator"), stack, when,
                      row.count)
    return table.to_samples()


SPLIT_METRICS = (t.METRIC_RUN_TIME, t.METRIC_IDLE_TIME, t.METRIC_BACKPRESSURED_TIME, t.METRIC_CPU_TIME)


def split_chain_busy_time(operations: list[t.Operation], samples: t.StackSamples | None) -> None:
    """Give each chained operator its share of the chain's run time (and of its measured parts), by the
    samples taken inside it (evenly without samples): chained operators run on the chain's one thread, so
    their times add up to the chain's, and a path through them must not count the chain's whole span once
    per operator."""
    counts: dict[str, int] = defaultdict(int)
    if samples is not None:
        for key_index, count in zip(samples.key, samples.count, strict=True):
            key = samples.keys[key_index]
            if key.thread == "operator":
                counts[key.operation] += count
    for chain in operations:
        if not chain.children or not chain.tasks:
            continue
        longest = max(chain.tasks, key=lambda task: task.metrics.get(t.METRIC_RUN_TIME, task.duration))
        measured = {name: longest.metrics[name] for name in SPLIT_METRICS if name in longest.metrics}
        measured.setdefault(t.METRIC_RUN_TIME, longest.duration)
        sampled = sum(counts[c.id] for c in chain.children)
        for child in chain.children:
            share = counts[child.id] / sampled if sampled else 1 / len(chain.children)
            child.metrics.update({name: value * share for name, value in measured.items()})


def python_chains(job: Part) -> list[str]:
    """Task names of the chains whose task threads were sampled in PyFlink's Python operators."""
    return sorted({row.task_name for row in job.samples
                   if not row.thread and (PYTHON_OPERATOR in row.stack or EMBEDDED_PYTHON_FRAME in row.stack)})


def python_operator(chain: t.Operation) -> str | None:
    """The id of the chain's one operator that PyFlink names as running Python functions (``PythonCalc``,
    ``PythonCorrelate``, …); None when none or several do."""
    named = [child.id for child in chain.children if "python" in child.name.lower()]
    return named[0] if len(named) == 1 else None


@dataclass
class WorkerSamples:
    """The loopback Python workers' samples and CPU time within the job, keyed to the Python chains."""

    samples: t.StackSamples | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)  # by chain id
    unplaced: int = 0  # samples taken where no chain's task thread was in its Python operator (left out)


def python_member(job: Part, chain: str, members: list[str]) -> str | None:
    """The operator of a chain whose task thread handed records to PyFlink's Python operator, by the depth those
    stacks were at (``samples_of``'s rule): where no operator's name says Python (a DataStream job's ``Map``). Only
    stacks in the operator's ``processElement`` count: the end of input, watermarks and the bundle timer reach the
    operator without the nested calls a record goes through."""
    depths: dict[int, int] = defaultdict(int)
    for row in job.samples:
        if row.task_name != chain or row.thread or PYTHON_OPERATOR not in row.stack:
            continue
        names = [line.split("\t", 1)[0] for line in row.stack.splitlines()]
        if any(name.startswith(PYTHON_OPERATOR) and ".processElement" in name for name in names):
            depths[sum(name.endswith(PUSH_TO_OPERATOR) for name in names)] += row.count
    if not depths or not members:
        return members[0] if len(members) == 1 else None
    return members[min(max(depths, key=lambda d: depths[d]), len(members) - 1)]


def python_activity(job: Part, chains: list[str]) -> dict[int, dict[str, int]]:
    """Per time bucket of the job (whole ``sample_bucket_s`` from its start), each Python chain's task-thread
    samples in its Python operator — handing records to its worker or waiting for its results: when the
    workers work for that chain."""
    wanted = set(chains)
    activity: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in job.samples:
        if row.task_name in wanted and not row.thread and any(m in row.stack for m in _PYTHON_WORK):
            when = row.origin + (row.bucket + 0.5) * job.sample_bucket_s
            activity[int((when - job.start) // job.sample_bucket_s)][row.task_name] += row.count
    return activity


def _split(count: float, weights: dict[str, int]) -> dict[str, float]:
    total = sum(weights.values())
    return {name: count * w / total for name, w in weights.items()}


def _split_count(count: int, weights: dict[str, int]) -> dict[str, int]:
    """``count`` shared by ``weights`` in whole samples (largest remainders)."""
    exact = _split(count, weights)
    whole = {name: int(value) for name, value in exact.items()}
    for name in sorted(exact, key=lambda n: whole[n] - exact[n])[:count - sum(whole.values())]:
        whole[name] += 1
    return {name: n for name, n in whole.items() if n}


def worker_samples(job: Part, chains: list[str], chain_ids: dict[str, str],
                   python_ops: dict[str, str]) -> WorkerSamples:
    """The samples of the threads that ran Beam bundles in the job's Python program (``pyworkers``), in the
    job's time span, keyed (role ``python-worker``) to the chains with Python operators and their Python operator
    (``python_ops``: chain id -> operator id). The workers do not say which chain (nor which subtask) they served:
    with one Python chain they are all its; with several, each time bucket's samples and CPU go to the chains by
    how many of their task threads' samples in it were in their Python operator, and samples of a bucket with none
    (nor in the buckets beside it) are left out."""
    spools = [s for s in (load_spool(p) for p in spool_files(job.path.parent)) if s is not None]
    if not spools or not chains:
        return WorkerSamples()
    # a chain is a Python chain by its task threads' samples in its Python operator: there is always some activity
    activity = python_activity(job, chains) if len(chains) > 1 else {}
    bucket_s = job.sample_bucket_s

    def chains_at(when: float) -> dict[str, int]:
        if len(chains) == 1:
            return {chains[0]: 1}
        index = int((when - job.start) // bucket_s)
        return next((found for i in (index, index - 1, index + 1) if (found := activity.get(i))), {})

    table = SampleTable(job.start, bucket_s, job.sample_interval_s)
    cpu: dict[str, float] = defaultdict(float)
    unplaced = 0
    for samples, cpu_by_bucket, _ in spools:
        for when, seconds in cpu_by_bucket.items():
            middle = when + samples.bucket_s / 2
            if job.start <= middle <= job.end and (weights := chains_at(middle)):
                for name, share in _split(seconds, weights).items():
                    cpu[chain_ids[name]] += share
        frame_ids = [table.frame_id(f.name, f.file, f.line, f.language, f.module) for f in samples.frames]
        stack_ids = [table.stack_id((frame_ids[i] for i in stack), samples.state_of(n))
                     for n, stack in enumerate(samples.stacks)]
        for _key, bucket, stack, count in samples.rows():
            when = samples.origin + (bucket + 0.5) * samples.bucket_s
            if not job.start <= when <= job.end:
                continue
            weights = chains_at(when)
            if not weights:
                unplaced += count
                continue
            for name, share in _split_count(count, weights).items():
                chain = chain_ids[name]
                table.add(t.SampleKey(operation=chain, thread=WORKER_ROLE), stack_ids[stack], when, share)
                if chain in python_ops:
                    table.add(t.SampleKey(operation=python_ops[chain], thread=WORKER_ROLE), stack_ids[stack], when,
                              share)
    found = table.to_samples()
    found.dropped = sum(samples.dropped for samples, _, _ in spools)  # what the workers' own bound folded
    return WorkerSamples(found if found.count else None, dict(cpu), unplaced=unplaced)


def add_worker_cpu(operations: list[t.Operation], chain_id: str, cpu_s: float) -> None:
    """Count the workers' CPU time in the chain's subtasks' (evenly: they do not say which subtask they served),
    within each subtask's busy time: the task thread's wait for its worker is busy time, so the worker's CPU
    falls within the subtask's run time, and the measured CPU is the whole subtask's, Java and Python."""
    for op in operations:
        if op.id != chain_id or not op.tasks or cpu_s <= 0:
            continue
        share = cpu_s / len(op.tasks)
        for task in op.tasks:
            run = task.metrics.get(t.METRIC_RUN_TIME, 0.0)
            waited = (task.metrics.get(t.METRIC_IDLE_TIME, 0.0)
                      + task.metrics.get(t.METRIC_BACKPRESSURED_TIME, 0.0))
            task.metrics[t.METRIC_CPU_TIME] = min(task.metrics.get(t.METRIC_CPU_TIME, 0.0) + share,
                                                  max(run - waited, 0.0))


_COUNTERS = ("storage_read_bytes", "storage_write_bytes", "network_rx_bytes", "network_tx_bytes")


def rows_of_span(rows: Iterable[t.IoSample], start: float, end: float) -> list[t.IoSample]:
    """Per source, the rows within [start, end] plus the last one before and the first one after, each
    source's counters counted from its first kept row (which reads 0, as a trace's rows do: a TaskManager or
    a Python program may have sampled long before the job). Sorted by source, then time."""
    by_source: dict[str, dict[float, t.IoSample]] = defaultdict(dict)
    for row in rows:
        by_source[row.source][row.t] = row  # the same reading in two parts (a rewritten part) counts once
    kept: list[t.IoSample] = []
    for source in sorted(by_source):
        ordered = [by_source[source][when] for when in sorted(by_source[source])]
        inside = [i for i, row in enumerate(ordered) if start <= row.t <= end]
        before = [i for i, row in enumerate(ordered) if row.t < start][-1:]
        after = [i for i, row in enumerate(ordered) if row.t > end][:1]
        if not inside and not (before and after):
            continue  # every reading before the job, or after it: another run's (a file left in the directory)
        chosen = [ordered[i] for i in before + inside + after]
        base = chosen[0]
        for row in chosen:
            update = {}
            for name in _COUNTERS:
                value, zero = getattr(row, name), getattr(base, name)
                if value is not None and zero is not None:
                    update[name] = max(0.0, value - zero)
            kept.append(row.model_copy(update=update))
    return kept


def job_io(job: Part) -> list[t.IoSample]:
    """The I/O counter rows of the job: its processes' (the reporter's parts) and the Python program's that
    ran its loopback workers (the spool files beside the parts), within the job's span."""
    spooled = [row for path in spool_files(job.path.parent) for row in load_spool_io(path)]
    return rows_of_span([*job.io, *spooled], job.start, job.end)


def hook_cost(job: Part) -> t.HookCost | None:
    """What the hook cost: in each JVM over the job (the reporter's parts), and in the Python program that ran its
    loopback workers (the spool files beside the parts; that process's whole run)."""
    processes = [*job.hook, *(h for h in (load_spool_hook(p) for p in spool_files(job.path.parent)) if h is not None)]
    return t.HookCost(processes=processes) if processes else None


def warnings_of(job: Part, planned: bool, samples: t.StackSamples | None,
                workers: WorkerSamples | None = None) -> list[str]:
    """What the trace cannot show, in words for the report."""
    warnings = []
    if job.status == "FAILED":
        warnings.append(f"the job failed: {job.failure}" if job.failure else "the job failed")
    elif job.status in ("CANCELED", "SUSPENDED"):
        warnings.append(f"the job was {'cancelled' if job.status == 'CANCELED' else 'suspended'}: the trace ends "
                        "where it stopped, not where its input did")
    if not planned:
        warnings.append(NO_PLAN_WARNING)
    if job.dropped_metrics:
        warnings.append(f"{job.dropped_metrics} metrics were not kept (memory bound reached)")
    if workers is not None and workers.unplaced:
        warnings.append(f"{workers.unplaced} of the Python workers' samples were left out: no chain's task thread "
                        "was in its Python operator when they were taken")
    names = [frame.name for frame in samples.frames] if samples is not None else []
    embedded = any(name.startswith(EMBEDDED_PYTHON_FRAME) for name in names)
    if workers is None or workers.samples is None:
        if (any(_EXTERNAL_PYTHON_OPERATOR in name for name in names)
                or (not embedded and any(PYTHON_OPERATOR in name for name in names))):
            warnings.append(PYTHON_WORKERS_WARNING)
        if embedded:
            warnings.append(EMBEDDED_PYTHON_WARNING)
    if job.dropped_samples:
        warnings.append(f"{job.dropped_samples} stack samples lost their stack detail to the reporter's memory "
                        f"bound (max.sample.bytes / max.sample.rows; counted under '{OTHER}')")
    worker_folded = folded_warning(workers.samples if workers is not None else None, "Python worker samples")
    if worker_folded is not None:
        warnings.append(worker_folded)
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
    members = {op.id: [c.id for c in op.children] for op in operations}
    python_ops = {}
    for name in python_chains(job):
        chain = next(o for o in operations if o.id == chain_ids[name])
        operator = python_operator(chain) or python_member(job, name, members[chain.id])
        if operator is not None:
            python_ops[chain.id] = operator
    samples = samples_of(job, chain_ids, members, python_ops)
    workers = worker_samples(job, python_chains(job), chain_ids, python_ops) if samples is not None else None
    if workers is not None and workers.samples is not None:
        for chain_id, cpu_s in workers.cpu_s.items():
            add_worker_cpu(operations, chain_id, cpu_s)
    split_chain_busy_time(operations, samples)
    if samples is not None and workers is not None and workers.samples is not None:
        samples = merge_samples([samples, workers.samples], bucket_s=job.sample_bucket_s)
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
            status=JOB_STATES.get(job.status, "cancelled" if job.cut else "unknown"),
        ),
        partial=f"{job.cut}: the trace ends with the reporter's last record" if job.cut and not job.status else None,
        operations=operations,
        streaming=streaming_figures(operations, duration),
        environment=t.Environment(cpu_count=job.cpu_count or None, scaling=list(INTEGRATION.scaling),
                                  classpath=list(job.classpath), **taskmanagers(job),
                                  cluster_slots=job.cluster.task_slots if job.cluster else None,
                                  cluster_workers=job.cluster.taskmanagers if job.cluster else None),
        metrics={"cpu_utilization": process_cpu / duration} if process_cpu and duration else {},
        io=job_io(job),
        hook=hook_cost(job),
        warnings=warnings_of(job, links is not None, samples, workers),
    )


def read_metrics(path: Path) -> t.Trace:
    """Turn the reporter's ``crystalperf-flink-<job_id>.<process>.json`` into a trace (one operation per
    operator chain), merged with the other parts of the same job in that directory (one per cluster process)."""
    try:
        return build_trace(load_job(Path(path)))
    except ValidationError as exc:
        # The parts passed the reader's checks but not the trace's (a span ending before it starts, a count out of
        # range): one line naming the file, as for any other bad input.
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "document"
        raise BadInputError(f"the reporter's files give an invalid trace at {where}: {first.get('msg', 'invalid')}",
                            path) from None
