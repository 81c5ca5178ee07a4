"""Per-operation resource vectors (paper §4.1).

For every sampling interval (bucket) of an operation, each sampled stack is scanned from the top
down to the first function whose source is available; the interval's vector is the mean of those
functions' vectors (one per sample), and the operation's vector is the time-weighted mean over its
intervals. Operations without samples fall back to the framework's native metrics (CPU time against
run time, shuffle fetch wait, spill bytes...), and every vector says where it came from.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

from crystalperf.core import trace as tr
from crystalperf.core.attribution.callers import caller, most_common
from crystalperf.core.attribution.classify import (
    LOW_CONFIDENCE,
    FunctionSource,
    KeywordClassifier,
    ResourceClassifier,
)
from crystalperf.core.attribution.observed import BUSY_SHARE
from crystalperf.core.attribution.sources import FrameResolver, LocateContext, is_native
from crystalperf.core.attribution.waiting import (
    awaits_io,
    delegates,
    idle_worker,
    is_off_cpu,
    is_plumbing,
    is_plumbing_frame,
    parks,
    primitive_vector,
    sample_vector,
    sleeps,
    wait_label,
    waits_on_consumer,
)
from crystalperf.core.record.syscalls import KERNEL_MODULE
from crystalperf.core.resources import CATEGORIES, CPU_ONLY, WAITING_ONLY, ResourceVector, weighted_mean

log = logging.getLogger(__name__)

# Where an operation's vector came from, in the order of preference.
SOURCE_SAMPLES = "samples"  # classified functions of its sampled stacks (the paper's way)
SOURCE_METRICS = "metrics"  # the framework's native task metrics
SOURCE_CHILDREN = "children"  # aggregated from its sub-operations
SOURCE_DEFAULT = "default"  # nothing known: counted as CPU


# How samples become vectors: the evidence-first order (measured facts, thread states and plumbing, then the
# classifiers) or the paper's (first located frame, classifier only), kept to show what each step buys.
ATTRIBUTION_EVIDENCE = "evidence"
ATTRIBUTION_PAPER = "paper"
ATTRIBUTIONS = (ATTRIBUTION_EVIDENCE, ATTRIBUTION_PAPER)


@dataclass
class FunctionStat:
    """A located function and how much of an operation's sampled time it accounts for: ``vector`` is what its
    samples did (a thread parked in it waited, whatever the classifier reads its code as), ``classified`` the
    classifier's vector of its code (None: the same as ``vector``), ``confidence`` the classifier's confidence in
    that vector's class where it gives one (``confidence.attach_confidence``)."""

    function: FunctionSource
    vector: ResourceVector
    samples: int
    classified: ResourceVector | None = None
    confidence: float | None = None
    # A runtime library's function (the JDK's, Python's standard library): the first frames outside the runtime
    # that called it, by samples (``callers``).
    callers: Counter[str] = field(default_factory=Counter)

    @property
    def called_from(self) -> str | None:
        return most_common(self.callers)

    @property
    def low_confidence(self) -> bool:
        """Its class is a guess: the classifier's confidence in it is under ``LOW_CONFIDENCE``."""
        return self.confidence is not None and self.confidence < LOW_CONFIDENCE


@dataclass
class OperationVector:
    vector: ResourceVector
    source: str
    samples: int = 0
    functions: list[FunctionStat] = field(default_factory=list)
    # Spread of the interval vectors: a rough uncertainty of the operation's vector.
    interval_spread: float = 0.0
    # Samples that waited, by the frame they waited in (innermost non-native frame).
    waiting_in: Counter[str] = field(default_factory=Counter)
    # Fractions of the operation's run time that the framework or the OS measured, per category.
    measured: dict[str, float] = field(default_factory=dict)
    # The parts of ``vector`` that were the operation's wait for work it stands for on the path (a training
    # step's wait for its input pipeline), given to that work's resources: see :func:`resolve_awaited_work`.
    through: ResourceVector | None = None
    # The split of that work's own time.
    awaited_work: ResourceVector | None = None
    # The share of the operation's time its threads waited for another thread's read (``waiting.awaits_io``), in
    # ``vector.waiting`` until the OS counters say what the read waited on (``resolve_awaited_io``).
    awaiting_io: float = 0.0

    @property
    def measured_share(self) -> float:
        return min(1.0, sum(self.measured.values()))


@dataclass
class SampleResolution:
    """Result of locating and classifying every stack of a trace."""

    # stack index -> the function it is attributed to (None: no function below its plumbing)
    stack_function: dict[int, FunctionSource | None]
    function_vectors: dict[str, ResourceVector]
    located_samples: int
    total_samples: int
    by_origin: Counter[str]
    problems: list[str]
    classified: int = 0  # functions classified in this analysis (not taken from the trace)
    # stack index -> the sample's vector: its function's, with CPU turned to waiting when the thread was off CPU
    stack_vectors: dict[int, ResourceVector] = field(default_factory=dict)
    # stack index -> where a waiting stack waited (innermost frame), for stacks with any waiting
    stack_waiting_in: dict[int, str] = field(default_factory=dict)
    # stacks that only read back what another sampled process computes (a Spark task and its Python worker)
    delegating: set[int] = field(default_factory=set)
    attribution: str = ATTRIBUTION_EVIDENCE
    # stacks whose thread was off CPU (parked, blocked, sleeping) when sampled, and those of them parked on a
    # synchroniser (waiting for another thread, not in a read of its own)
    off_cpu: set[int] = field(default_factory=set)
    parked: set[int] = field(default_factory=set)
    # stacks of a pool's thread waiting for work (a fetcher pool's idle thread): no time of any operation
    idle_workers: set[int] = field(default_factory=set)
    # stacks parked on another thread's read (``waiting.awaits_io``)
    io_waits: set[int] = field(default_factory=set)


def _name_only(frames: Sequence[tr.Frame], stack: Sequence[int], skip_plumbing: bool) -> FunctionSource | None:
    """When no frame of a stack has source, classify by the frame names themselves.

    The paper skips such stacks; we keep them (marked ``frame-name``) because a JVM stack of
    ``SocketInputStream.read`` still says a lot, and dropping it would bias the vector to whatever
    happened to be located. Plumbing frames are passed over as in the located scan.
    """
    usable = [i for i in stack if not is_native(frames[i]) and not (skip_plumbing and is_plumbing(frames[i].name))]
    if not usable:
        return None
    top = frames[usable[0]]
    return FunctionSource(
        qualified_name=top.name,
        language=top.language if top.language in ("java", "scala", "python", "cpp") else "unknown",
        code=top.name,
        origin="frame-name",
    )


def _classify_or_fall_back(
    classifier: ResourceClassifier, functions: list[FunctionSource]
) -> tuple[list[ResourceVector], str | None]:
    """The classifier's vectors; if it fails (a plug-in classifier meeting input it was not built for),
    the keyword classifier's, so that one bad function never costs the user the whole report."""
    if not functions:
        return [], None
    try:
        return list(classifier.classify(functions)), None
    except Exception as exc:  # noqa: BLE001 - any plug-in failure degrades to the baseline classifier
        log.warning("classifier %s failed (%s); using the keyword classifier", classifier.version, exc)
        problem = f"classifier {classifier.version} failed ({exc}); the keyword classifier was used instead"
        return list(KeywordClassifier().classify(functions)), problem


def _embedded_function(function: tr.EmbeddedFunction) -> FunctionSource:
    return FunctionSource(qualified_name=function.qualified_name, language=function.language, code=function.code,
                          doc=function.doc, origin=function.origin, location=function.location)


def _declared_vector(function: FunctionSource) -> ResourceVector | None:
    """``extra["vector"]`` as "cpu,disk,network[,waiting]", when a locator declared one and it parses."""
    text = function.extra.get("vector") if function.extra else None
    if not text:
        return None
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        return None
    if not 3 <= len(values) <= 4 or any(not math.isfinite(v) or v < 0 for v in values) or sum(values) <= 0:
        return None
    return ResourceVector.of(*values)


def _choose_functions(
    samples: tr.StackSamples, resolver: FrameResolver | None, use_embedded: bool, skip_plumbing: bool,
    function_vectors: dict[str, ResourceVector],
) -> dict[int, FunctionSource | None]:
    """Stack -> its function: the embedded one (job-end analysis) where the trace has it, else located here."""
    stack_function: dict[int, FunctionSource | None] = {}
    embedded = samples.resolution if use_embedded else None
    known: list[FunctionSource] = []
    if embedded is not None:
        known = [_embedded_function(f) for f in embedded.functions]
        for embedded_function, source in zip(embedded.functions, known, strict=True):
            function_vectors[source.key] = ResourceVector.of(*embedded_function.vector)
    skip = is_plumbing_frame if skip_plumbing else None
    for s in set(samples.stack):
        chosen = embedded.stack_function[s] if embedded is not None else -1
        # A trace analysed before plumbing was skipped may embed a lock or pool frame: locate that stack anew.
        if chosen >= 0 and not (skip_plumbing and is_plumbing(known[chosen].qualified_name)):
            stack_function[s] = known[chosen]
        elif chosen == -2:
            stack_function[s] = None
        else:
            stack = samples.stacks[s]
            kernel = _kernel_io(samples.frames, stack) if skip_plumbing else None
            found = resolver.resolve_stack(stack, samples.frames, skip=skip) if resolver and not kernel else None
            stack_function[s] = kernel or (found[1] if found else _name_only(samples.frames, stack, skip_plumbing))
    return stack_function


def _kernel_io(frames: Sequence[tr.Frame], stack: Sequence[int]) -> FunctionSource | None:
    """The file or socket call a sampled thread was blocked in (a ``kernel.*`` frame on top of its stack):
    the function of the sample, whatever the code above it is."""
    top = frames[stack[0]] if stack else None
    if top is None or top.module != KERNEL_MODULE or primitive_vector(top.name) is None:
        return None
    return FunctionSource(qualified_name=top.name, language="unknown", code=top.name, origin="kernel")


def resolve_samples(
    samples: tr.StackSamples,
    classifier: ResourceClassifier,
    resolver: FrameResolver | None,
    *,
    use_embedded: bool = True,
    attribution: str = ATTRIBUTION_EVIDENCE,
) -> SampleResolution:
    """Locate the first non-plumbing function with source in every interned stack, classify them in one batch,
    and give every stack its vector from its function's and the thread's state.

    Stacks the trace's embedded resolution covers take the function and the vector the job-end analysis
    used (the report then regenerates the same anywhere); the others are located and classified here.
    With ``attribution="paper"`` the first located frame is the function and its vector the sample's."""
    evidence = attribution != ATTRIBUTION_PAPER
    function_vectors: dict[str, ResourceVector] = {}
    stack_function = _choose_functions(samples, resolver, use_embedded and evidence, evidence, function_vectors)
    unique = {f.key: f for f in stack_function.values() if f is not None and f.key not in function_vectors}
    if evidence:
        # A locator that knows a function's resource (a TensorFlow compute kernel) declares it: a fact,
        # not a guess for the classifier.
        for key, function in list(unique.items()):
            declared = _declared_vector(function) or primitive_vector(function.qualified_name)
            if declared is not None:
                function_vectors[key] = declared
                del unique[key]
    functions = list(unique.values())
    vectors, classifier_problem = _classify_or_fall_back(classifier, functions)
    function_vectors.update({f.key: v for f, v in zip(functions, vectors, strict=True)})

    stack_vectors: dict[int, ResourceVector] = {}
    stack_waiting_in: dict[int, str] = {}
    delegating: set[int] = set()
    off_cpu_stacks: set[int] = set()
    parked: set[int] = set()
    idle_workers: set[int] = set()
    io_waits: set[int] = set()
    for s, f in stack_function.items():
        vector = function_vectors[f.key] if f is not None else None
        if not evidence:
            if vector is not None:
                stack_vectors[s] = vector
            continue
        stack = samples.stacks[s]
        off_cpu = is_off_cpu(samples.state_of(s), samples.frames, stack)
        consumer_behind = False
        if delegates(samples.frames, stack):
            # Waiting on the worker whatever the socket read under it is classified as.
            delegating.add(s)
            off_cpu, vector = True, None
        if off_cpu:
            off_cpu_stacks.add(s)
            if parks(samples.frames, stack):
                parked.add(s)
            consumer_behind = waits_on_consumer(samples.frames, stack)
            if consumer_behind or idle_worker(samples.frames, stack):
                # a thread waiting for work, or for the thread it serves to take what it made, spends none of
                # the operation's time
                idle_workers.add(s)
            elif parks(samples.frames, stack) and awaits_io(samples.frames, stack):
                io_waits.add(s)
        stack_vectors[s] = (WAITING_ONLY if consumer_behind or sleeps(samples.frames, stack)
                            else sample_vector(vector, off_cpu))
        if stack_vectors[s].waiting > 0:
            stack_waiting_in[s] = wait_label(samples.frames, stack)

    per_stack_count: Counter[int] = Counter()
    for _, _, stack_id, count in samples.rows():
        per_stack_count[stack_id] += count
    by_origin: Counter[str] = Counter()
    located = 0
    total = 0
    for s, n in per_stack_count.items():
        total += n
        f = stack_function.get(s)
        origin = f.origin if f else ("waiting" if s in stack_waiting_in else "unresolved")
        by_origin[origin] += n
        if f is not None and f.origin != "frame-name":
            located += n
    problems = list(resolver.context.problems) if resolver else []
    if classifier_problem:
        problems.append(classifier_problem)
    return SampleResolution(stack_function, function_vectors, located, total, by_origin, problems, len(functions),
                            stack_vectors, stack_waiting_in, delegating, attribution, off_cpu_stacks, parked,
                            idle_workers, io_waits)


def sampled_vectors(samples: tr.StackSamples, resolution: SampleResolution,
                    idle: Collection[str] = ()) -> dict[str, OperationVector]:
    """Operation id -> vector from its samples (paper §4.1), keyed by the sample keys' operation. ``idle``: the
    resources ("disk", "network") the OS counters saw the job's processes not use; a sample's share of them is
    CPU where its thread ran (a buffer pool, a state map, a local channel computed); see ``_without_idle``."""
    stack_vectors = idle_corrected(resolution, idle)
    # (operation, bucket) -> stack -> count
    per_interval: dict[tuple[str, int], Counter[int]] = defaultdict(Counter)
    roles: dict[str, set[str | None]] = defaultdict(set)
    working: set[str] = set()  # operations with samples of threads that were not idle in a pool
    for key, _, stack, _ in samples.rows():
        operation = samples.keys[key].operation
        roles[operation].add(samples.keys[key].thread)
        if stack not in resolution.idle_workers:
            working.add(operation)
    for key, bucket, stack, count in samples.rows():
        operation = samples.keys[key].operation
        # A thread reading back its worker's results: where the worker was sampled too, its samples tell
        # where that time went, and counting the reader as well would count the same seconds twice.
        if stack in resolution.delegating and len(roles[operation]) > 1:
            continue
        # A pool's thread waiting for work (a source's fetcher pool between splits) spends none of the
        # operation's time: the threads that worked say where it went.
        if stack in resolution.idle_workers and operation in working:
            continue
        per_interval[(operation, bucket)][stack] += count

    interval_vectors: dict[str, list[tuple[ResourceVector, float]]] = defaultdict(list)
    io_waited: dict[str, float] = defaultdict(float)  # per operation: the io-wait samples' waiting, in samples
    function_samples: dict[str, Counter[str]] = defaultdict(Counter)
    function_vectors: dict[str, dict[str, list[tuple[ResourceVector, float]]]] = defaultdict(lambda: defaultdict(list))
    function_callers: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    stack_callers: dict[int, str | None] = {}
    functions_by_key: dict[str, FunctionSource] = {}
    waiting_in: dict[str, Counter[str]] = defaultdict(Counter)
    for (op, _bucket), stacks in per_interval.items():
        pairs = []
        for stack, count in stacks.items():
            vec = stack_vectors.get(stack)
            if vec is None:
                continue
            pairs.append((vec, float(count)))
            if stack in resolution.io_waits:
                io_waited[op] += vec.waiting * count
            f = resolution.stack_function.get(stack)
            if f is not None:
                function_samples[op][f.key] += count
                function_vectors[op][f.key].append((vec, float(count)))
                functions_by_key[f.key] = f
                if stack not in stack_callers:
                    stack_callers[stack] = caller(samples.frames, samples.stacks[stack], f.qualified_name)
                if (called_by := stack_callers[stack]) is not None:
                    function_callers[op][f.key][called_by] += count
            if stack in resolution.stack_waiting_in:
                waiting_in[op][resolution.stack_waiting_in[stack]] += count
        mean = weighted_mean(pairs)
        if mean is not None:
            # An interval's weight is the time it covers, i.e. the samples taken in it.
            interval_vectors[op].append((mean, sum(w for _, w in pairs)))

    result: dict[str, OperationVector] = {}
    for op, pairs in interval_vectors.items():
        mean_vec = weighted_mean(pairs)
        if mean_vec is None:
            continue
        vec = mean_vec
        total = sum(w for _, w in pairs)
        spread = (
            sum(w * sum((v[i] - vec[i]) ** 2 for i in range(len(CATEGORIES))) for v, w in pairs) / total
        ) ** 0.5 if total else 0.0
        stats = [
            FunctionStat(functions_by_key[k], weighted_mean(function_vectors[op][k]) or resolution.function_vectors[k],
                         n, resolution.function_vectors[k], callers=function_callers[op][k])
            for k, n in function_samples[op].most_common()
        ]
        result[op] = OperationVector(vec, SOURCE_SAMPLES, int(total), stats, spread, waiting_in[op],
                                     awaiting_io=io_waited[op] / total if total else 0.0)
    return result


# ``waits_on_work`` of an operation whose own samples are the work it waited on (a training step's input wait,
# sampled on the input pipeline's threads).
WORK_IN_SAMPLES = "samples"


def parse_work(text: str | None) -> ResourceVector | None:
    """``waits_on_work`` as "cpu=..,disk=..,network=..[,waiting=..]"; None when absent, malformed or all zero."""
    if not text:
        return None
    values: dict[str, float] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            return None
        if not math.isfinite(number) or number < 0:
            return None
        values[key.strip()] = number
    if not any(values.get(c, 0.0) > 0 for c in CATEGORIES):
        return None
    return ResourceVector.of(*(values.get(c, 0.0) for c in CATEGORIES))


def awaited_work(op: tr.Operation, sampled: OperationVector | None) -> ResourceVector | None:
    """How the work an operation waited on spent its time, where the hook says the operation stands for that
    work on the path: declared in ``waits_on_work``, or (``samples``) the sampled split ``sampled`` (the
    operation's own, or ``pooled_samples``')."""
    text = op.attributes.get(tr.ATTRIBUTE_WAITS_ON_WORK)
    if text == WORK_IN_SAMPLES:
        return sampled.vector if sampled is not None and sampled.samples else None
    return parse_work(text)


def pooled_samples(operations: Iterable[tr.Operation], sampled: dict[str, OperationVector]) -> dict[str, OperationVector]:
    """The sampled split of every operation that declares its samples as the work it waited on, pooled over the
    operations of its name (every training step's wait for the same input pipeline): a sampler that caught the
    pipeline's code in a few steps says what it did in all of them. By operation id."""
    by_name: dict[str, list[tr.Operation]] = {}
    for op in operations:
        if op.attributes.get(tr.ATTRIBUTE_WAITS_ON_WORK) == WORK_IN_SAMPLES:
            by_name.setdefault(op.name, []).append(op)
    pooled: dict[str, OperationVector] = {}
    for ops in by_name.values():
        found = [vec for op in ops if (vec := sampled.get(op.id)) is not None and vec.samples]
        if not found:
            continue
        total = sum(vec.samples for vec in found)
        vector = weighted_mean([(vec.vector, vec.samples) for vec in found])
        if vector is None:
            continue
        for op in ops:
            pooled[op.id] = OperationVector(vector=vector, samples=total, source="samples")
    return pooled


def resolve_awaited_work(vec: OperationVector, work: ResourceVector | None) -> OperationVector:
    """The operation's waiting given to the work it waited on, in that work's split.

    A training step waiting for its batch is idle, but nothing else on the critical path does the input
    pipeline's work: the wait *is* the pipeline's time on the path, and a pipeline reading a slow disk makes
    the job disk-bound. So the waiting goes to the work's resources (what of the work itself waited, a
    generator sleeping, stays waiting), and ``through`` keeps which part came that way, for the verdict."""
    if work is None or vec.vector.waiting <= 0:
        return vec
    waited = vec.vector.waiting
    added = [waited * share for share in work]
    through = ResourceVector._make([*added[:3], 0.0])
    if sum(through) <= 0:
        return vec
    values = [vec.vector[i] + added[i] for i in range(3)] + [added[3]]
    return replace(vec, vector=ResourceVector._make(values), through=through, awaited_work=work.busy())


def resolver_for(trace: tr.Trace, locators: Sequence[object] | None, source_roots: Sequence[str] = ()) -> FrameResolver:
    from crystalperf.core.attribution.sources import installed_locators

    context = LocateContext.from_environment(trace.environment, source_roots)
    return FrameResolver(list(locators) if locators is not None else installed_locators(), context)  # type: ignore[arg-type]


RESOURCES_ATTRIBUTE = "resources"
# "metrics": the hook measured the operation's split; prefer its metrics over classified samples.
VECTOR_SOURCE_ATTRIBUTE = "vector_source"


def restrict(vec: OperationVector, allowed: str | None) -> OperationVector:
    """Keep only the resources a hook says the operation can use (``attributes["resources"]``, e.g.
    ``cpu,disk`` for a step of a one-process TensorFlow job, which has no network to wait for).

    Classifiers spread a little probability over every class; where the hook knows a resource is
    physically absent, that share would become phantom what-if sensitivity, so it is given back to
    the others in proportion.
    """
    if not allowed:
        return vec
    keep = {r.strip().lower() for r in allowed.split(",")}
    keep.add("waiting")  # waiting needs no resource, so no hook can rule it out
    masked = [v if name in keep else 0.0 for v, name in zip(vec.vector, CATEGORIES, strict=True)]
    if not any(masked) or list(masked) == list(vec.vector):
        return vec
    return replace(vec, vector=ResourceVector.of(*masked))


def without_disk_waits(vec: OperationVector) -> OperationVector:
    """The vector of an operation whose processes the OS saw read nothing from storage (and write only what the
    page cache holds): the disk share its sampled functions suggested is CPU. Those samples were running: a
    function a classifier reads as I/O (a state map, a buffer pool) computed, or copied from the page cache.
    What the framework measured as disk time stays."""
    cpu, disk, network, waiting = vec.vector
    kept = min(disk, vec.measured.get("disk", 0.0))
    if disk <= kept:
        return vec
    return replace(vec, vector=ResourceVector.of(cpu + disk - kept, kept, network, waiting))


def idle_corrected(resolution: SampleResolution, idle: Collection[str] = ()) -> dict[int, ResourceVector]:
    """Stack id -> its vector, with its share of the ``idle`` resources (those the OS counters saw the job's
    processes not use) moved as ``_without_idle`` says."""
    if not idle:
        return resolution.stack_vectors
    return {s: _without_idle(v, idle, s in resolution.off_cpu, s in resolution.parked)
            for s, v in resolution.stack_vectors.items()}


def _without_idle(vector: ResourceVector, idle: Collection[str], off_cpu: bool, parked: bool) -> ResourceVector:
    """A sample's vector with its share of the ``idle`` resources moved: to CPU where its thread ran (it computed
    or copied). Off CPU, a disk share is waiting (nothing was read from the device), and so is the network share
    of a thread parked on a synchroniser (a buffer pool, a lock: another thread of its process); a thread blocked
    in a read or a poll of its own keeps its network share, as a slow peer that sends next to nothing may hold it
    (latency moves no bytes)."""
    cpu, disk, network, waiting = vector
    moved_disk = disk if "disk" in idle else 0.0
    moved_network = network if "network" in idle and (parked or not off_cpu) else 0.0
    if not moved_disk and not moved_network:
        return vector
    if off_cpu:
        return ResourceVector.of(cpu, disk - moved_disk, network - moved_network, waiting + moved_disk + moved_network)
    return ResourceVector.of(cpu + moved_disk + moved_network, disk - moved_disk, network - moved_network, waiting)


def default_vector() -> OperationVector:
    """Nothing known about an operation: counted as CPU, and the report says so."""
    return OperationVector(CPU_ONLY, SOURCE_DEFAULT)


# Bounds of what a trace carries of its analysis: enough for the functions that matter, small next to
# the samples themselves.
EMBED_MAX_FUNCTIONS = 2000
EMBED_MAX_BYTES = 4_000_000
EMBED_MAX_TEXT = 8000  # characters of a function's code, and of its doc


def embed_resolution(samples: tr.StackSamples, resolution: SampleResolution, classifier: str) -> tr.EmbeddedResolution:
    """What the analysis used for each stack, bounded: the functions of the most-sampled stacks first, up to
    EMBED_MAX_FUNCTIONS functions and EMBED_MAX_BYTES of code and doc; stacks beyond are marked -1."""
    per_stack: Counter[int] = Counter()
    for _, _, stack_id, count in samples.rows():
        per_stack[stack_id] += count
    index_of: dict[str, int] = {}
    functions: list[tr.EmbeddedFunction] = []
    stack_function = [-1] * len(samples.stacks)
    spent = 0
    for stack_id, _ in per_stack.most_common():
        function = resolution.stack_function.get(stack_id)
        if function is None:
            stack_function[stack_id] = -2
            continue
        if function.key not in index_of:
            code, doc = function.code[:EMBED_MAX_TEXT], function.doc[:EMBED_MAX_TEXT]
            size = len(code.encode()) + len(doc.encode()) + len(function.qualified_name) + 64
            if len(functions) >= EMBED_MAX_FUNCTIONS or spent + size > EMBED_MAX_BYTES:
                continue
            spent += size
            index_of[function.key] = len(functions)
            vector = resolution.function_vectors[function.key]
            functions.append(tr.EmbeddedFunction(
                qualified_name=function.qualified_name, language=function.language, code=code, doc=doc,
                origin=function.origin, location=function.location, vector=[vector.cpu, vector.disk, vector.network]))
        stack_function[stack_id] = index_of[function.key]
    return tr.EmbeddedResolution(classifier=classifier, functions=functions, stack_function=stack_function)


def resolve_awaited_io(vec: OperationVector, busy: dict[str, float]) -> OperationVector:
    """The operation's wait for other threads' reads given to what those reads waited on: the storage device or
    the network link, as busy as the OS counters saw them with the job's data over the operation's window
    (``observed.window_busy``); a wait while neither was busy stays waiting (the reader was held back by
    something else)."""
    waited = min(vec.awaiting_io, vec.vector.waiting)
    disk, network = busy.get("disk", 0.0), busy.get("network", 0.0)
    if waited <= 0 or disk + network <= 0:
        return vec
    # all of it where a device or link was busy at BUSY_SHARE of its bandwidth or more, in proportion below
    moved = waited * min(1.0, (disk + network) / BUSY_SHARE)
    to_disk = moved * disk / (disk + network)
    v = vec.vector
    vector = ResourceVector.of(v.cpu, v.disk + to_disk, v.network + moved - to_disk, v.waiting - moved)
    return replace(vec, vector=vector, awaiting_io=vec.awaiting_io - moved)
