"""From profiled training steps to the trace schema (no TensorFlow import here).

Per step the DAG is: the wait for the input pipeline, then the model's layers forward, the loss, the
layers backward and the optimizer update, in the order their kernels first ran (their data
dependencies). Kernels are grouped by the Keras layer in their graph node name, because a step runs a
few hundred of them and users think in layers. Every kernel execution becomes stack samples of the
frame ``tensorflow.op.<OpType>`` (its duration / the sampling interval), so the core locates the op's
documentation and classifies it like any sampled function; the input pipeline's kernels (file reads,
decoding, augmentation) become samples of the step's input wait.

What was measured is said as measured: the step's wait for its batch (the training thread blocked in
the iterator's GetNext) is ``wait_time_s`` of the input part, which waits on the input pipeline, so it is
waiting, not CPU, disk or network of the step; a compute kernel's time is compute time (``cpu_time_s``),
because it ran on TensorFlow's compute threads or on a device. Only the time of kernels that can block on
a file or a transfer is left to the classifiers.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from crystalperf.core import trace as tr
from crystalperf.core.attribution.observed import MIN_BYTES
from crystalperf.core.attribution.vectors import RESOURCES_ATTRIBUTE, VECTOR_SOURCE_ATTRIBUTE, WORK_IN_SAMPLES
from crystalperf.core.record.sampletable import SampleTable, folded_warning
from crystalperf.integrations.tensorflow.config import INTEGRATION
from crystalperf.integrations.tensorflow.reader import EAGER_NODE, OpEvent, Recording, RunInfo, Step, Timeline
from crystalperf.integrations.tensorflow.sources import (
    FILE_KERNEL,
    PYTHON_KERNEL,
    READER_DATASET,
    TRANSFER_KERNEL,
    is_compute_op,
    op_frame_name,
)
from crystalperf.integrations.tensorflow.tiling import (
    CALLBACKS_THREAD,
    SIGNIFICANT_SHARE,
    busy_union,
    callback_parts,
    iteration_starts,
    span,
    tile,
    tile_iterations,
)
from crystalperf.integrations.tensorflow.unprofiled import unprofiled_operation, unprofiled_warning

__all__ = ["Recording", "RunInfo", "Step", "build_trace", "layer_name", "op_group", "pipeline_parallelism",
           "pipeline_split", "pipeline_work", "printable", "read_limit", "step_operations", "waits_on",
           "window_read_bytes"]

# Scopes of the function calls and control flow around a step's graph (``steps_per_execution`` runs it in a while
# loop under a tf.cond: ``while/body/_1/while/cond/then/_119/while/cond/StatefulPartitionedCall/...``).
_WRAPPER_SCOPES = {"StatefulPartitionedCall", "PartitionedCall", "while", "body", "cond", "then", "else"}
_BRANCH_INDEX = re.compile(r"^_\d+$")
_NON_LAYER_SCOPES = {"compile_loss", "compile_metrics", "loss", "metrics", "gradient_tape"}
# tf.data stages that only hand elements on: not what a step waits on when the pipeline is slow.
_HANDOVER_STAGES = {"Root", "Prefetch", "Model", "Options", "MaxIntraOpParallelism", "PrivateThreadPool"}
WAITS_ON_PIPELINE = "input pipeline"
# Kernel time becomes samples at this resolution (many kernels last well under a Python sampling interval).
KERNEL_RESOLUTION_S = 0.001
# A scope named like an op (Sub_2, Cast_30, AddV2) is TF arithmetic outside any layer, not a layer.
_OP_LIKE_SCOPE = re.compile(r"^(?:[A-Z][A-Za-z0-9]*|[a-z]+(?:_[a-z]+)*_no_nan)(?:_\d+)?$")
# The part of a step no op timeline divides (Keras on another backend, TensorFlow's profiler taken).
WHOLE_STEP = "training step (Python samples)"
# The group of the ops a step ran eagerly (``run_eagerly=True``): they carry no graph scope, so no layer.
EAGER_GROUP = "eager ops"
_OPTIMIZERS = {"adam", "adamw", "sgd", "rmsprop", "adagrad", "adadelta", "adamax", "nadam", "ftrl", "lion",
               "lamb", "adafactor", "loss_scale_optimizer", "optimizer"}


@dataclass
class StepEvents:
    """The profiler's events that fell in one step."""

    compute: list[OpEvent] = field(default_factory=list)  # kernels of the training computation
    pipeline: list[OpEvent] = field(default_factory=list)  # kernels on tf.data's threads
    waits: list[tuple[float, float]] = field(default_factory=list)  # the training thread's input waits


@dataclass
class KernelGroup:
    """A step's kernels of one Keras layer (forward or backward), the optimizer, the loss, or "other"."""

    name: str
    phase: str  # forward, backward, update, other
    ops: list[OpEvent]


def layer_name(scope: str, layers: frozenset[str]) -> str:
    """``conv_a_1`` -> ``conv_a`` when the model has a layer ``conv_a`` (TF uniquifies name scopes by
    appending ``_N`` each time a layer is traced again)."""
    name = scope
    while name not in layers:
        shorter = re.sub(r"_\d+$", "", name)
        if shorter == name:
            return scope
        name = shorter
    return name


def op_group(node: str, layers: frozenset[str] = frozenset()) -> tuple[str, str]:
    """Graph node name -> (group name, phase): ``…/sequential/conv2d/Relu`` -> (conv2d, forward);
    ``…/gradient_tape/sequential/conv2d/…`` -> (conv2d backward, backward); ``…/adam/Mul`` ->
    (adam, update); top-level arithmetic such as ``Sub_2/ReadVariableOp`` -> (other, other); an op run eagerly
    -> (eager ops, other)."""
    if node == EAGER_NODE:
        return EAGER_GROUP, "other"
    parts = [p for p in node.split("/")
             if p and p not in _WRAPPER_SCOPES and not p.startswith("__inference") and not _BRANCH_INDEX.match(p)]
    backward = bool(parts) and parts[0] == "gradient_tape"
    if backward:
        parts = parts[1:]
    scope = parts[:-1]  # the last part names the node itself
    if len(scope) >= 2 and scope[0] not in _NON_LAYER_SCOPES:
        group = scope[1]  # <model>/<layer>/...
    elif scope:
        group = scope[0]  # optimizer, loss, metrics, or a layer used outside a model
    else:
        return "other", "other"
    if _OP_LIKE_SCOPE.match(group):
        return "other", "other"
    group = layer_name(group, layers)
    base = re.sub(r"_\d+$", "", group).lower()
    if not backward and (base in _OPTIMIZERS or group.lower() in _OPTIMIZERS):
        return group, "update"
    if backward:
        return f"{group} backward", "backward"
    return group, "forward"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "op"


def _step_of(steps: Sequence[Step], when: float) -> int | None:
    """Position of the step whose window holds ``when`` (a step lasts until the next one begins)."""
    lo, hi = 0, len(steps) - 1
    if not steps or when < steps[0].start or when > steps[-1].end:
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if steps[mid].start <= when:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _add_op_samples(table: SampleTable, key: tr.SampleKey, ops: Sequence[OpEvent], carry: dict[str, float]) -> None:
    """Kernel time as samples of the op's frame: duration / resolution, summed per (op type, bucket). What a compute
    kernel's time does not make of a whole sample is carried to the op type's next part (``carry``, in samples,
    shared by the calls of one trace): counting every part's microsecond ops as a sample each would rank a step's
    hundred tiny eager ops above its one long matrix product. A part whose kernels make no whole sample still gets
    one, of its longest op type, taken from that op type's carry. A kernel that may wait on a file or a transfer
    keeps at least a sample in every part: the classifiers split its part's time by what its samples are."""
    seconds: dict[tuple[str, int], float] = defaultdict(float)
    first_seen: dict[tuple[str, int], float] = {}
    for op in ops:
        bucket = int((op.start - table.origin) // table.bucket_s)
        seconds[(op.op_type, bucket)] += op.duration
        first_seen.setdefault((op.op_type, bucket), op.start)
    counts: dict[tuple[str, int], int] = {}
    for (op_type, bucket), secs in seconds.items():
        if not is_compute_op(op_type):
            counts[(op_type, bucket)] = max(1, round(secs / table.interval_s))
            continue
        exact = secs / table.interval_s + carry.get(op_type, 0.0)
        counts[(op_type, bucket)] = count = max(0, math.floor(exact + 0.5))
        carry[op_type] = exact - count
    if seconds and not any(counts.values()):
        longest = max(seconds, key=lambda part: seconds[part])
        counts[longest] = 1
        carry[longest[0]] = carry.get(longest[0], 0.0) - 1
    for (op_type, bucket), count in counts.items():
        if count:
            frame = table.frame_id(op_frame_name(op_type), None, None, "unknown", "tensorflow")
            table.add(key, table.stack_id([frame]), first_seen[(op_type, bucket)], count)


def _possible_resources(ops: Sequence[OpEvent], multi_worker: bool) -> str:
    """What a group of kernels can wait on: CPU always; the network only through collectives or
    send/recv kernels between workers (between one machine's devices they copy memory), the disk
    only through file kernels (checkpoints, file reads in the step)."""
    allowed = ["cpu"]
    if any(FILE_KERNEL.search(o.op_type) for o in ops):
        allowed.append("disk")
    if multi_worker and any(TRANSFER_KERNEL.search(o.op_type) for o in ops):
        allowed.append("network")
    return ",".join(allowed)


def _summary(ops: Sequence[OpEvent], limit: int = 6) -> str:
    busy: dict[str, float] = defaultdict(float)
    for op in ops:
        busy[op.op_type] += op.duration
    top = sorted(busy.items(), key=lambda kv: -kv[1])[:limit]
    return ", ".join(f"{t} {s * 1000:.1f} ms" for t, s in top)


def printable(text: str) -> str:
    """``text`` as valid Unicode. Python gives a file name that is not UTF-8 as lone surrogates
    (``b"/tmp/\\xff.py"`` -> ``"/tmp/\\udcff.py"``), which no JSON writer can encode: those bytes are written as
    ``\\xff`` escapes, so the trace stays writable and the name stays recognisable."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape" if _only_escapes(text) else "surrogatepass").decode(
            "utf-8", "backslashreplace")


def _only_escapes(text: str) -> bool:
    return all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in text)


def _printable_or_none(text: str | None) -> str | None:
    return None if text is None else printable(text)


def _whole_step_part(operation: str) -> str:
    return f"{operation.split('/', 1)[0]}/{_slug(WHOLE_STEP)}"


def _copy_python_samples(table: SampleTable, samples: tr.StackSamples, whole_steps: bool = False,
                         callbacks_to: dict[str, str] | None = None) -> None:
    """Python samples re-counted in the table's resolution: one sample stands for its interval. The thread
    states the sampler saw stay with their stacks. ``whole_steps``: nothing divides the steps (no op timeline), and
    every sample of a step is its one part's (:data:`WHOLE_STEP`). The training thread's samples in the batch
    callbacks (:data:`CALLBACKS_THREAD`) are copied only with ``callbacks_to``, which gives the part of each step
    they go to (:func:`callback_parts`), and the other samples only without it."""
    weight = max(1, round(samples.interval_s / table.interval_s))
    frames = [table.frame_id(printable(f.name), _printable_or_none(f.file), f.line, f.language,
                             _printable_or_none(f.module)) for f in samples.frames]
    keys: list[tr.SampleKey | None] = []
    for k in samples.keys:
        if (k.thread == CALLBACKS_THREAD) != (callbacks_to is not None):
            keys.append(None)
            continue
        operation = (callbacks_to or {}).get(k.operation) if callbacks_to is not None else (
            _whole_step_part(k.operation) if whole_steps else k.operation)
        keys.append(None if operation is None else tr.SampleKey(
            operation=printable(operation), task=_printable_or_none(k.task), thread=_printable_or_none(k.thread)))
    stacks = [table.stack_id((frames[i] for i in stack), samples.state_of(s)) for s, stack in enumerate(samples.stacks)]
    for key, bucket, stack, count in zip(samples.key, samples.bucket, samples.stack, samples.count, strict=True):
        copied = keys[key]
        if copied is None:
            continue
        when = samples.origin + (bucket + 0.5) * samples.bucket_s
        table.add(copied, stacks[stack], when, count * weight)


def pipeline_work(timeline: Timeline, storage_read: bool = True) -> tuple[float, float, float]:
    """(cpu, disk, network) seconds of the input pipeline's work over the window, by kernel kind and
    by the busy time of tf.data's reader datasets (TFRecordDataset reads inside its iterator, not in a
    kernel). Without ``storage_read`` (the window read next to nothing from storage) the file reads were
    page-cache copies: CPU work."""
    cpu = disk = net = 0.0
    for op in timeline.input_threads:
        if FILE_KERNEL.search(op.op_type):
            disk += op.duration
        elif TRANSFER_KERNEL.search(op.op_type):
            net += op.duration
        else:
            cpu += op.duration
    for stage, busy in timeline.stage_busy.items():
        if READER_DATASET.search(stage):
            disk += busy
    return (cpu, disk, net) if storage_read else (cpu + disk, 0.0, net)


def read_from_storage(read_bytes: float | None) -> bool:
    """Whether reads of this many bytes from storage (None: not counted) can have kept file reads waiting on a
    device; under ``MIN_BYTES`` the files came from the page cache (a process's own code loading aside)."""
    return read_bytes is None or read_bytes >= MIN_BYTES


def _pipeline_work_is_known(timeline: Timeline, waited_s: float) -> bool:
    """Whether the kernel kinds say what the pipeline spent the steps' waits on: not when Python functions
    (``py_function``) did much of it, whose time may be computing, reading or sleeping alike, and not when
    the work the profiler saw explains less than half of what the steps waited."""
    total = sum(pipeline_work(timeline))
    python = sum(op.duration for op in timeline.input_threads if PYTHON_KERNEL.search(op.op_type))
    return total > 0 and python < 0.1 * total and total >= 0.5 * waited_s


def _samples_input_code(samples: tr.StackSamples | None) -> bool:
    """Whether the Python sampler saw the input pipeline's Python code (generators, py_function bodies)."""
    return samples is not None and any(samples.keys[k].operation.endswith("/input") for k in set(samples.key))


def unseen_python_input(timeline: Timeline | None, samples: tr.StackSamples | None) -> str | None:
    """A warning where the input pipeline's work was mostly Python functions (py_function, from_generator: PyFunc
    kernels) and the Python sampler never saw their code: what they did (compute, read, sleep) is not known."""
    if timeline is None or _samples_input_code(samples):
        return None
    python = sum(op.duration for op in timeline.input_threads if PYTHON_KERNEL.search(op.op_type))
    if python <= 0 or python < 0.5 * sum(pipeline_work(timeline)):
        return None
    return (f"the input pipeline's work was Python functions (py_function, Dataset.from_generator: {python:.2f} s of "
            "PyFunc kernels in the window) whose code the Python sampler never caught running (it reads stacks under "
            "the interpreter's lock, which a call from TensorFlow that returns within the switch interval, 5 ms, "
            "never hands over): whether they computed, read or slept is not known, so the steps' waits for them "
            "stay waiting")


# The share of the steps' waits the worker processes' CPU time must reach to be what the steps waited for.
WORKER_CPU_EXPLAINS = 0.5


def _declared_work(timeline: Timeline | None, waited_s: float, split: tuple[float, float, float],
                   python_input: bool, worker_cpu_s: float | None = None) -> str | None:
    """The input parts' ``waits_on_work``: the pipeline's kernel split when the kernels explain the waits; cpu
    when the process's worker processes (a PyDataset's multiprocessing pool, whose Python the sampler of this
    process cannot see: its own threads only wait for their results) computed for at least half of what the steps
    waited; the parts' own samples when the pipeline's Python code did the work in this process and was sampled;
    else nothing is declared and the wait stays waiting."""
    if timeline is not None and _pipeline_work_is_known(timeline, waited_s):
        return _split_work(split)
    if worker_cpu_s is not None and waited_s > 0 and worker_cpu_s >= WORKER_CPU_EXPLAINS * waited_s:
        return "cpu=1.0000,disk=0.0000,network=0.0000"
    if python_input:
        return WORK_IN_SAMPLES
    return None


def _split_work(split: tuple[float, float, float]) -> str:
    return ",".join(f"{r}={v:.4f}" for r, v in zip(("cpu", "disk", "network"), split, strict=True))


def unseen_worker_input(rec: Recording, waited_s: float) -> str | None:
    """A warning where the steps waited while worker processes ran but did not compute enough to be what they
    waited for: what else the workers did (read, wait) is not sampled."""
    if not rec.worker_processes or rec.worker_cpu_s is None or waited_s <= 0:
        return None
    if rec.worker_cpu_s >= WORKER_CPU_EXPLAINS * waited_s:
        return None
    return (f"the steps waited {waited_s:.2f} s for input while {rec.worker_processes} worker processes ran "
            f"(a multiprocessing pool: PyDataset(use_multiprocessing=True)), which used {rec.worker_cpu_s:.2f} CPU-s "
            "in the window: what else they did (read, wait) is not sampled, so the steps' waits for them stay "
            "waiting")


def pipeline_split(timeline: Timeline, storage_read: bool = True) -> tuple[float, float, float]:
    """The pipeline's work as (cpu, disk, network) shares."""
    work = pipeline_work(timeline, storage_read)
    total = sum(work)
    return (work[0] / total, work[1] / total, work[2] / total) if total > 0 else (1.0, 0.0, 0.0)


def pipeline_parallelism(timeline: Timeline) -> float:
    """How many pipeline kernels ran at once on average while any ran (>= 1)."""
    ops = list(timeline.input_threads)
    busy = busy_union(ops)
    return max(1.0, sum(o.duration for o in ops) / busy) if busy > 0 else 1.0


def kernel_core_seconds(timeline: Timeline, start: float, end: float, cores: int) -> tuple[float, float]:
    """(busy, core-seconds) of the training kernels between ``start`` and ``end``: the wall time during which at
    least one kernel ran on the host's compute threads, and the integral of how many ran at once, at most ``cores``.

    The core-seconds are the work those kernels would be on one thread if none gained from its own intra-op
    threads: two kernels side by side were two threads' work, one kernel alone one thread's at least."""
    edges: list[tuple[float, int]] = []
    for op in timeline.ops:
        if op.device or op.thread.startswith("tf_data"):
            continue
        lo, hi = max(op.start, start), min(op.start + op.duration, end)
        if hi > lo:
            edges += [(lo, 1), (hi, -1)]
    edges.sort()  # at a tie an end (-1) sorts before a start: back-to-back kernels do not count as overlapping
    busy = core_s = 0.0
    running, last = 0, start
    for when, change in edges:
        if running > 0:
            busy += when - last
            core_s += (when - last) * min(running, max(1, cores))
        running, last = running + change, when
    return busy, core_s


def _minor_groups(compute: Sequence[Sequence[OpEvent]], labels: Sequence[Sequence[tuple[str, str]]]) -> set[str]:
    """Groups too small for a part of their own, decided over the whole window rather than per step:
    a layer near the threshold would otherwise be a part in some steps and hidden in others, and the
    steps could not be compared. ``labels`` holds each kernel's (group, phase)."""
    busy: dict[str, float] = defaultdict(float)
    total = 0.0
    for ops, step_labels in zip(compute, labels, strict=True):
        for op, (group, phase) in zip(ops, step_labels, strict=True):
            total += op.duration
            if group != "other" and phase != "update":
                busy[group] += op.duration
    return {group for group, seconds in busy.items() if seconds < SIGNIFICANT_SHARE * total}


def _events_by_step(steps: Sequence[Step], timeline: Timeline | None) -> list[StepEvents]:
    """The profiler's events of each step. The ops a step ran eagerly are its kernels only where it ran no compiled
    function (``run_eagerly=True``): beside one, they are Keras's bookkeeping around it (the iterator's optional,
    the step counter), part of the host's work between the compiled steps."""
    events = [StepEvents() for _ in steps]
    if timeline is None:
        return events
    for op in timeline.ops:
        pos = _step_of(steps, op.start)
        if pos is not None:
            (events[pos].pipeline if op.thread.startswith("tf_data") else events[pos].compute).append(op)
    for start, duration in timeline.input_waits:
        pos = _step_of(steps, start)
        if pos is not None:
            events[pos].waits.append((start, duration))
    for step in events:
        if any(op.node != EAGER_NODE for op in step.compute):
            step.compute = [op for op in step.compute if op.node != EAGER_NODE]
    return events


def waits_on(timeline: Timeline | None) -> str:
    """What a step's input wait waits on: the input pipeline, named by its busiest dataset (the tf.data
    stage that does the work, e.g. ``ParallelMapV2`` or ``TFRecord``) when the profiler saw one."""
    stages = {s: b for s, b in (timeline.stage_busy.items() if timeline else ()) if s not in _HANDOVER_STAGES}
    if not stages or max(stages.values()) <= 0:
        return WAITS_ON_PIPELINE
    return f"{WAITS_ON_PIPELINE} ({max(stages, key=lambda s: stages[s])})"


def _work_summary(split: tuple[float, float, float]) -> str:
    return ", ".join(f"{r} {share:.0%}" for r, share in zip(("cpu", "disk", "network"), split, strict=True) if share)


def _input_part(sid: str, step: Step, events: StepEvents, split: tuple[float, float, float],
                waited_on: str, work: str | None = None) -> tr.Operation:
    """The step's wait for its batch: measured (the training thread blocked in GetNext), so it is waiting
    on the input pipeline, whatever the pipeline's threads did meanwhile. What they did (their kernels,
    the Python input code the sampler saw) stays as the part's samples and functions, and the
    pipeline's work split (file reads disk, transfers network, the rest CPU) as an attribute and in the
    window's ``input_work_*`` metrics, which the what-if model of prefetching uses. ``work`` is the
    ``waits_on_work`` the part declares, when what the pipeline spent the wait on is known."""
    wait_s = sum(d for _, d in events.waits)
    start = max(step.start, min((s for s, _ in events.waits), default=step.start))
    # The part lasts as long as the waits: a step of several batches (steps_per_execution) waits once per batch,
    # and the compute between those waits is the step's other parts', not the input's.
    end = min(step.end, start + wait_s)
    attributes = {"placement": "host", "pipeline_ops": _summary(events.pipeline),
                  "pipeline_work": _work_summary(split), tr.ATTRIBUTE_WAITS_ON: waited_on,
                  VECTOR_SOURCE_ATTRIBUTE: "metrics"}
    if work is not None:
        # No other part of the step does the pipeline's work: the core gives the wait to that work's resources.
        attributes[tr.ATTRIBUTE_WAITS_ON_WORK] = work
    return tr.Operation(
        id=f"{sid}/input", name="input pipeline (wait)", kind="input", start=start, end=max(start, end),
        metrics={tr.METRIC_RUN_TIME: wait_s, tr.METRIC_WAIT_TIME: wait_s}, attributes=attributes,
    )


def _kernel_groups(ops: Sequence[OpEvent], labels: Sequence[tuple[str, str]], folded: set[str]) -> list[KernelGroup]:
    """The step's kernels by group, in the order each group first ran; each group's kernels by start."""
    groups: dict[str, KernelGroup] = {}
    for op, (name, phase) in zip(ops, labels, strict=True):
        if name in folded:
            name, phase = "other", "other"
        group = groups.setdefault(name, KernelGroup(name, phase, []))
        group.ops.append(op)
        group.phase = phase
    for group in groups.values():
        group.ops.sort(key=lambda o: o.start)
    return list(groups.values())


def _group_part(sid: str, step: Step, group: KernelGroup, multi_worker: bool) -> tr.Operation:
    """A kernel group's part. Its compute kernels' time is measured compute (``cpu_time_s``: compute on
    the host's threads or on the device); when every kernel computes, that is the whole split."""
    ops = group.ops
    first, last = span(ops)
    start = min(max(step.start, first), step.end)
    run = sum(o.duration for o in ops)
    compute = sum(o.duration for o in ops if is_compute_op(o.op_type))
    metrics = {tr.METRIC_RUN_TIME: run, tr.METRIC_CPU_TIME: compute}
    if any(o.device for o in ops):
        metrics[tr.METRIC_DEVICE_TIME] = sum(o.duration for o in ops if o.device)
    attributes = {"phase": group.phase, "placement": "device", "kernels": str(len(ops)),
                  "op_types": _summary(ops), RESOURCES_ATTRIBUTE: _possible_resources(ops, multi_worker)}
    if compute >= run:
        attributes[VECTOR_SOURCE_ATTRIBUTE] = "metrics"
    return tr.Operation(
        id=f"{sid}/{_slug(group.name)}", name=group.name, kind="op", start=start, end=max(start, min(step.end, last)),
        metrics=metrics, attributes=attributes,
    )


def _whole_step(step: Step, sid: str) -> tr.Operation:
    """A step's one part where no op timeline divides it: its training thread's and input code's Python samples say
    what its time did. One part of the same name in every step, so that the steps' time adds up under it."""
    return tr.Operation(id=_whole_step_part(sid), name=WHOLE_STEP, kind="op", start=step.start, end=step.end,
                        attributes={"phase": "step", "placement": "host"})


def step_operations(rec: Recording, table: SampleTable) -> tuple[list[tr.Operation], float]:
    """The step operations with their children, and the seconds the training thread waited for input (in the
    profiled steps); the requested steps the profile did not cover follow as one operation."""
    events = _events_by_step(rec.steps, rec.timeline)
    # Every step gets its input part, of zero length when the pipeline kept up: a what-if with slower
    # storage can make any step wait.
    has_pipeline = any(e.waits for e in events) or any(e.pipeline for e in events)
    storage_read = read_from_storage(rec.read_bytes)
    split = pipeline_split(rec.timeline, storage_read) if rec.timeline is not None else (1.0, 0.0, 0.0)
    waited_s = sum(d for e in events for _, d in e.waits)
    python_input = _samples_input_code(rec.python_samples)
    work = _declared_work(rec.timeline, waited_s, split, python_input, rec.worker_cpu_s)
    waited_on = waits_on(rec.timeline)
    labels = [[op_group(op.node, rec.layer_names) for op in e.compute] for e in events]
    folded = _minor_groups([e.compute for e in events], labels)
    operations: list[tr.Operation] = []
    waited = 0.0
    pipeline_carry: dict[str, float] = {}
    kernel_carry: dict[str, float] = {}
    for step, step_events, step_labels in zip(rec.steps, events, labels, strict=True):
        sid = f"s{step.index}"
        children: list[tr.Operation] = []
        if has_pipeline:
            part = _input_part(sid, step, step_events, split, waited_on, work)
            waited += part.metrics[tr.METRIC_RUN_TIME]
            children.append(part)
            # A py_function kernel only runs Python code whose own samples say what it did (read a socket,
            # sleep, compute): counting the kernel's time as well would count those seconds twice.
            pipeline = [op for op in step_events.pipeline
                        if not (python_input and PYTHON_KERNEL.search(op.op_type))]
            _add_op_samples(table, tr.SampleKey(operation=part.id, thread="tf.data"), pipeline, pipeline_carry)
        part_ops: dict[str, list[OpEvent]] = {}
        for group in _kernel_groups(step_events.compute, step_labels, folded):
            part = _group_part(sid, step, group, rec.multi_worker)
            children.append(part)
            part_ops[part.id] = group.ops
            _add_op_samples(table, tr.SampleKey(operation=part.id, thread="tf-kernels"), group.ops, kernel_carry)
        starts = iteration_starts(step_events.compute)
        if rec.timeline is None:
            parts = [_whole_step(step, sid)]
        elif len(starts) > 1:
            parts = tile_iterations(children, part_ops, step_events.waits, step, sid, starts)
        else:
            parts = tile(children, step, sid)
        operations.append(tr.Operation(
            id=sid, name=f"step {step.index} (epoch {step.epoch + 1})", kind="step", start=step.start,
            end=step.end, children=parts,
            attributes={"epoch": str(step.epoch), "batch": str(step.index)},
        ))
    if rec.unprofiled is not None:
        tail_read = window_read_bytes(rec.io, rec.unprofiled.start, rec.unprofiled.start + rec.unprofiled.seconds)
        # The pipeline's file reads were page-cache copies only if neither the window nor these steps read from
        # storage: the window's first steps may have run on batches read before it, and a read is counted when it
        # is issued (a throttled device's readahead issued in the window arrives during these steps).
        reads = storage_read or read_from_storage(tail_read)
        tail_split = pipeline_split(rec.timeline, reads) if rec.timeline is not None else split
        input_attributes = {"pipeline_work": _work_summary(tail_split), tr.ATTRIBUTE_WAITS_ON: waited_on}
        if work is not None:  # `samples`: the profiled steps' input samples, pooled by name, speak for these too
            input_attributes[tr.ATTRIBUTE_WAITS_ON_WORK] = _split_work(tail_split) if work == _split_work(split) else work
        tail = unprofiled_operation(rec.unprofiled, operations, input_attributes, tail_read)
        if tail is not None:
            operations.append(tail[0])
    return operations, waited


def _read_counter(rows: Sequence[tr.IoSample]) -> list[tuple[float, float, float | None]]:
    """(t, storage bytes read so far, read limit) of the rows that have the counter, in time order."""
    return sorted((r.t, r.storage_read_bytes, r.disk_read_limit) for r in rows if r.storage_read_bytes is not None)


def window_read_bytes(rows: Sequence[tr.IoSample], start: float, end: float) -> float | None:
    """Bytes read from storage between ``start`` and ``end`` by the I/O counter rows (linear between rows,
    the nearest row outside them); None without two rows."""
    points = _read_counter(rows)
    if len(points) < 2:
        return None

    def at(t: float) -> float:
        if t <= points[0][0]:
            return points[0][1]
        for (t0, v0, _), (t1, v1, _) in zip(points, points[1:], strict=False):
            if t <= t1:
                return v0 + (v1 - v0) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)
        return points[-1][1]

    return max(0.0, at(end) - at(start))


def read_limit(rows: Sequence[tr.IoSample], start: float, end: float) -> float | None:
    """The cgroup read limit in force while the process read from storage between ``start`` and ``end``: the
    device bandwidth the job had (the strictest one, when it held for at least half of the reading)."""
    points = _read_counter(rows)
    reading = [after[2] for before, after in zip(points, points[1:], strict=False)
               if after[0] >= start and before[0] <= end and after[1] > before[1]]
    limits = [limit for limit in reading if limit]
    return min(limits) if limits and 2 * len(limits) >= len(reading) else None


# The fewest steps timed after the window that make their median worth setting beside the profiled steps'.
LATER_STEPS_MIN = 5


def later_step_metrics(rec: Recording) -> dict[str, float]:
    """The profiled steps' median time beside that of the steps timed after the window, in the same fit: the
    difference is what recording a step cost, TensorFlow's profiler included, which no CPU clock of the callback's
    own sees. ``step_slowdown_se`` is the standard error of their ratio, from how much the steps of each kind vary.
    The first profiled step is left out (its begin follows the profiler's start); none without enough of either."""
    profiled = [s.end - s.start for s in rec.steps[1:]]
    later = rec.later_step_s
    if len(profiled) < 3 or len(later) < LATER_STEPS_MIN:
        return {}
    p, q = statistics.median(profiled), statistics.median(later)
    if p <= 0 or q <= 0:
        return {}
    relative = math.hypot(_median_se(profiled, p) / p, _median_se(later, q) / q)
    return {"profiled_step_median_s": p, "later_step_median_s": q, "later_steps": float(len(later)),
            "step_slowdown_se": p / q * relative}


def _median_se(values: Sequence[float], centre: float) -> float:
    """The standard error of a sample's median ``centre``, from its median absolute deviation (robust to the odd
    slow step: a collection, a checkpoint): 1.2533 σ / √n for normal spread, σ ≈ 1.4826 MAD."""
    mad = statistics.median(abs(v - centre) for v in values)
    return 1.2533 * 1.4826 * mad / math.sqrt(len(values))


def _window_metrics(rec: Recording, waited: float, window: float) -> dict[str, float]:
    metrics: dict[str, float] = {
        "steps": float(len(rec.steps)),
        "step_time_s": window / len(rec.steps),
        "input_wait_fraction": min(1.0, waited / window),
        "cpu_utilization": rec.cpu_seconds / window,
    }
    if rec.fit_start is not None and rec.fit_end is not None:
        metrics["fit_time_s"] = rec.fit_end - rec.fit_start
    if rec.worker_processes and rec.worker_cpu_s is not None:  # a PyDataset's multiprocessing pool
        metrics["input_worker_processes"] = float(rec.worker_processes)
        metrics["input_worker_cpu_s"] = rec.worker_cpu_s
    timeline = rec.timeline
    if timeline is None:
        return metrics
    if timeline.peak_bytes_in_use:
        metrics["tensor_bytes"] = float(timeline.peak_bytes_in_use)
        metrics["data_bytes"] = float(timeline.peak_bytes_in_use)
        metrics[tr.METRIC_PEAK_MEMORY_BYTES] = float(timeline.peak_bytes_in_use)
    # The input pipeline's own work, for the TensorFlow what-if model of prefetching.
    cpu_s, disk_s, net_s = pipeline_work(timeline, read_from_storage(rec.read_bytes))
    metrics.update(input_work_cpu_s=cpu_s, input_work_disk_s=disk_s, input_work_network_s=net_s,
                   input_parallelism=pipeline_parallelism(timeline))
    # The window's edges read exactly when the callback did; the counter rows (0.25 s apart) when it could not.
    read = rec.read_bytes if rec.read_bytes is not None else window_read_bytes(rec.io, rec.steps[0].start,
                                                                                rec.steps[-1].end)
    if read is not None:
        metrics["input_read_bytes"] = float(read)
    for stage, busy in timeline.stage_busy.items():
        metrics[f"tf.data.{stage}_busy_s"] = busy
    if rec.threads > 1 and not timeline.dropped_ops and not any(op.device for op in timeline.ops):
        # The threads model's lower bound on the window's work on one thread (the callback's CPU time, which also
        # counts all the pool threads' CPU time as work, is its upper bound). Not with an accelerator: the host's
        # time beside the kernels would count the device's as the host's work.
        busy, core_s = kernel_core_seconds(timeline, rec.steps[0].start, rec.steps[-1].end, rec.threads)
        if busy > 0:
            metrics["kernel_busy_s"], metrics["kernel_core_s"] = busy, core_s
    if read and disk_s > 0:
        # What the pipeline's reads achieved: the storage delivers at least this much.
        metrics["observed_read_bandwidth"] = read / (disk_s / metrics["input_parallelism"])
    return metrics


def _disk_bandwidth(rec: Recording, metrics: dict[str, float], end: float) -> float | None:
    """The storage bandwidth the job had: a cgroup read limit in force while it read in the window (until ``end``,
    the unprofiled steps' too) is the device's bandwidth for it, exactly; else what its reads achieved (a lower
    bound)."""
    limit = read_limit(rec.io, rec.steps[0].start, end)
    if limit is not None:
        metrics["disk_read_limit"] = limit
        return limit
    return metrics.get("observed_read_bandwidth")


def _environment(rec: Recording, host: str | None, disk_bandwidth: float | None) -> tr.Environment:
    return tr.Environment(
        hosts=[host] if host else [],
        executors=[tr.Executor(id="worker", host=host, cores=rec.threads, memory_bytes=rec.memory_bytes)],
        cores_per_executor=rec.threads,
        total_slots=rec.threads,
        cpu_count=rec.cpu_count,
        memory_bytes=rec.memory_bytes,
        devices=[tr.Device(kind=rec.device)],  # type: ignore[arg-type]
        disk_bandwidth=disk_bandwidth,
        properties=rec.properties,
        scaling=list(INTEGRATION.scaling),
    )


def build_trace(rec: Recording, *, run_id: str, name: str, framework_version: str | None,
                status: str = "succeeded", output_dir: str | None = None,
                host: str | None = None) -> tr.Trace:
    """The trace of a profiled window of training steps: the window is the job, steps are its
    sequential operations (paper §7.1: TensorFlow's runtime is the average iteration time)."""
    from crystalperf import __version__

    if not rec.steps:
        raise ValueError("no training step was profiled")
    start, end = rec.steps[0].start, rec.steps[-1].end
    table = SampleTable(start, bucket_s=1.0, interval_s=KERNEL_RESOLUTION_S)
    if rec.python_samples is not None:
        _copy_python_samples(table, rec.python_samples, whole_steps=rec.timeline is None)
    operations, waited = step_operations(rec, table)
    if rec.python_samples is not None and rec.timeline is not None:
        _copy_python_samples(table, rec.python_samples, callbacks_to=callback_parts(operations))
    metrics = _window_metrics(rec, waited, max(end - start, 1e-9))
    metrics.update(later_step_metrics(rec))
    warnings = list(rec.warnings)
    if rec.unprofiled is not None and operations[-1].attributes.get("profiled") == "false":
        tail = operations[-1]
        tail_wait = tail.children[0].duration
        # The what-if models read the profiled window's figures; the report's input share is of every step.
        metrics.update(unprofiled_steps=float(rec.unprofiled.count), unprofiled_s=tail.duration,
                       profiled_input_wait_fraction=metrics["input_wait_fraction"],
                       input_wait_fraction=min(1.0, (waited + tail_wait) / max(tail.end - start, 1e-9)))
        warnings.append(unprofiled_warning(rec.unprofiled, tail, tail_wait))
        end = tail.end
    if (unseen := unseen_python_input(rec.timeline, rec.python_samples)) is not None and waited > 0:
        warnings.append(unseen)
    if (unseen := unseen_worker_input(rec, waited)) is not None:
        warnings.append(unseen)
    if rec.timeline is None:
        warnings.append("no TensorFlow op timeline (the profiler could not run): steps are whole operations "
                        "and their resources come from Python stack samples only")
    samples = table.to_samples()
    folded = folded_warning(rec.python_samples, "Python stack samples")
    if folded:
        warnings.append(folded)
    disk_bandwidth = _disk_bandwidth(rec, metrics, end)
    return tr.Trace(
        producer=tr.Producer(version=__version__, hook="keras-callback"),
        application=tr.Application(
            framework="tensorflow", framework_version=framework_version, id=printable(run_id), name=printable(name),
            start=start, end=end, status=status, output_dir=_printable_or_none(output_dir),  # type: ignore[arg-type]
        ),
        environment=_environment(rec, host, disk_bandwidth),
        operations=operations,
        samples=samples if samples.count else None,
        metrics=metrics,
        io=list(rec.io),
        warnings=warnings,
    )


def build_trace_for(rec: Recording, info: RunInfo) -> tr.Trace:
    """:func:`build_trace` with the run's names from a :class:`RunInfo`."""
    return build_trace(rec, run_id=info.run_id, name=info.name, framework_version=info.framework_version,
                       status=info.status, output_dir=info.output_dir, host=info.host)
