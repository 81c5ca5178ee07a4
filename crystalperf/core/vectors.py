"""Per-operation resource vectors (paper §4.1).

For every sampling interval (bucket) of an operation, each sampled stack is scanned from the top
down to the first function whose source is available; the interval's vector is the mean of those
functions' vectors (one per sample), and the operation's vector is the time-weighted mean over its
intervals. Operations without samples fall back to the framework's native metrics (CPU time against
run time, shuffle fetch wait, spill bytes...), and every vector says where it came from.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from crystalperf.core import trace as tr
from crystalperf.core.classify import FunctionSource, KeywordClassifier, ResourceClassifier
from crystalperf.core.resources import CPU_ONLY, ResourceVector, weighted_mean
from crystalperf.core.sources import FrameResolver, LocateContext, is_native

log = logging.getLogger(__name__)

# Where an operation's vector came from, in the order of preference.
SOURCE_SAMPLES = "samples"  # classified functions of its sampled stacks (the paper's way)
SOURCE_METRICS = "metrics"  # the framework's native task metrics
SOURCE_CHILDREN = "children"  # aggregated from its sub-operations
SOURCE_DEFAULT = "default"  # nothing known: counted as CPU


@dataclass
class FunctionStat:
    """A located function and how much of an operation's sampled time it accounts for."""

    function: FunctionSource
    vector: ResourceVector
    samples: int


@dataclass
class OperationVector:
    vector: ResourceVector
    source: str
    samples: int = 0
    functions: list[FunctionStat] = field(default_factory=list)
    # Spread of the interval vectors: a rough uncertainty of the operation's vector.
    interval_spread: float = 0.0


@dataclass
class SampleResolution:
    """Result of locating and classifying every stack of a trace."""

    # stack index -> (function key or None, vector)
    stack_function: dict[int, FunctionSource | None]
    function_vectors: dict[str, ResourceVector]
    located_samples: int
    total_samples: int
    by_origin: Counter[str]
    problems: list[str]
    classified: int = 0  # functions classified in this analysis (not taken from the trace)


def _name_only(frames: Sequence[tr.Frame], stack: Sequence[int]) -> FunctionSource | None:
    """When no frame of a stack has source, classify by the frame names themselves.

    The paper skips such stacks; we keep them (marked ``frame-name``) because a JVM stack of
    ``SocketInputStream.read`` still says a lot, and dropping it would bias the vector to whatever
    happened to be located.
    """
    names = [frames[i].name for i in stack if not is_native(frames[i])]
    if not names:
        return None
    top = frames[next(i for i in stack if not is_native(frames[i]))]
    return FunctionSource(
        qualified_name=names[0],
        language=top.language if top.language in ("java", "scala", "python", "cpp") else "unknown",
        code=names[0],
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


def resolve_samples(
    samples: tr.StackSamples,
    classifier: ResourceClassifier,
    resolver: FrameResolver | None,
    *,
    use_embedded: bool = True,
) -> SampleResolution:
    """Locate the first function with source in every interned stack, then classify them in one batch.

    Stacks the trace's embedded resolution covers take the function and the vector the job-end analysis
    used (the report then regenerates the same anywhere); the others are located and classified here."""
    stack_function: dict[int, FunctionSource | None] = {}
    function_vectors: dict[str, ResourceVector] = {}
    embedded = samples.resolution if use_embedded else None
    if embedded is not None:
        known = [_embedded_function(f) for f in embedded.functions]
        for embedded_function, source in zip(embedded.functions, known, strict=True):
            function_vectors[source.key] = ResourceVector.of(*embedded_function.vector)
    used_stacks = set(samples.stack)
    for s in used_stacks:
        chosen = embedded.stack_function[s] if embedded is not None else -1
        if chosen >= 0:
            stack_function[s] = known[chosen]
        elif chosen == -2:
            stack_function[s] = None
        else:
            stack = samples.stacks[s]
            found = resolver.resolve_stack(stack, samples.frames) if resolver else None
            stack_function[s] = found[1] if found else _name_only(samples.frames, stack)
    unique = {f.key: f for f in stack_function.values() if f is not None and f.key not in function_vectors}
    functions = list(unique.values())
    vectors, classifier_problem = _classify_or_fall_back(classifier, functions)
    function_vectors.update({f.key: v for f, v in zip(functions, vectors, strict=True)})

    per_stack_count: Counter[int] = Counter()
    for _, _, stack_id, count in samples.rows():
        per_stack_count[stack_id] += count
    by_origin: Counter[str] = Counter()
    located = 0
    total = 0
    for s, n in per_stack_count.items():
        total += n
        f = stack_function.get(s)
        origin = f.origin if f else "unresolved"
        by_origin[origin] += n
        if f is not None and f.origin != "frame-name":
            located += n
    problems = list(resolver.context.problems) if resolver else []
    if classifier_problem:
        problems.append(classifier_problem)
    return SampleResolution(stack_function, function_vectors, located, total, by_origin, problems, len(functions))


def sampled_vectors(samples: tr.StackSamples, resolution: SampleResolution) -> dict[str, OperationVector]:
    """Operation id -> vector from its samples (paper §4.1), keyed by the sample keys' operation."""
    # (operation, bucket) -> stack -> count
    per_interval: dict[tuple[str, int], Counter[int]] = defaultdict(Counter)
    for key, bucket, stack, count in samples.rows():
        per_interval[(samples.keys[key].operation, bucket)][stack] += count

    interval_vectors: dict[str, list[tuple[ResourceVector, float]]] = defaultdict(list)
    function_samples: dict[str, Counter[str]] = defaultdict(Counter)
    functions_by_key: dict[str, FunctionSource] = {}
    for (op, _bucket), stacks in per_interval.items():
        pairs = []
        for stack, count in stacks.items():
            f = resolution.stack_function.get(stack)
            if f is None:
                continue
            vec = resolution.function_vectors[f.key]
            pairs.append((vec, float(count)))
            function_samples[op][f.key] += count
            functions_by_key[f.key] = f
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
            sum(w * sum((v[i] - vec[i]) ** 2 for i in range(3)) for v, w in pairs) / total
        ) ** 0.5 if total else 0.0
        stats = [
            FunctionStat(functions_by_key[k], resolution.function_vectors[k], n)
            for k, n in function_samples[op].most_common()
        ]
        result[op] = OperationVector(vec, SOURCE_SAMPLES, int(total), stats, spread)
    return result


def _metric(metrics: dict[str, float], name: str) -> float:
    value = metrics.get(name, 0.0)
    return value if value > 0 else 0.0


def metrics_vector(units: Iterable[tuple[float, dict[str, float]]]) -> ResourceVector | None:
    """Vector from native metrics of tasks (or of an operation): (wall duration, metrics) pairs.

    CPU time, network wait and disk time are taken as measured; the rest of the run time (blocked,
    but on what the framework does not say) is split between disk and network in proportion to the
    bytes the task moved through each, and counted as CPU when it moved none.
    """
    cpu = disk = net = 0.0
    known = False
    for duration, m in units:
        run = _metric(m, tr.METRIC_RUN_TIME) or duration
        if run <= 0:
            continue
        has_cpu = tr.METRIC_CPU_TIME in m
        known = known or has_cpu or tr.METRIC_NETWORK_WAIT in m or tr.METRIC_DISK_TIME in m
        c = min(_metric(m, tr.METRIC_CPU_TIME), run)
        n = min(_metric(m, tr.METRIC_NETWORK_WAIT), run - c)
        d = min(_metric(m, tr.METRIC_DISK_TIME), run - c - n)
        rest = run - c - n - d if has_cpu else 0.0
        disk_bytes = sum(
            _metric(m, k)
            for k in (tr.METRIC_INPUT_BYTES, tr.METRIC_OUTPUT_BYTES, tr.METRIC_SPILL_DISK_BYTES,
                      tr.METRIC_SHUFFLE_WRITE_BYTES)
        )
        net_bytes = _metric(m, tr.METRIC_SHUFFLE_REMOTE_READ_BYTES) + _metric(m, tr.METRIC_NETWORK_BYTES)
        if rest > 0 and disk_bytes + net_bytes > 0:
            d += rest * disk_bytes / (disk_bytes + net_bytes)
            n += rest * net_bytes / (disk_bytes + net_bytes)
        else:
            c += rest
        if not has_cpu and tr.METRIC_NETWORK_WAIT not in m and tr.METRIC_DISK_TIME not in m:
            continue
        cpu, disk, net = cpu + c, disk + d, net + n
    if not known or cpu + disk + net <= 0:
        return None
    return ResourceVector.of(cpu, disk, net)


def operation_metrics_vector(op: tr.Operation) -> ResourceVector | None:
    if op.tasks:
        return metrics_vector((t.duration, t.metrics) for t in op.tasks)
    return metrics_vector([(op.duration, op.metrics)])


def resolver_for(trace: tr.Trace, locators: Sequence[object] | None, source_roots: Sequence[str] = ()) -> FrameResolver:
    from crystalperf.core.sources import installed_locators

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
    masked = [v if name in keep else 0.0 for v, name in zip(vec.vector, ("cpu", "disk", "network"), strict=True)]
    if not any(masked) or list(masked) == list(vec.vector):
        return vec
    return OperationVector(ResourceVector.of(*masked), vec.source, vec.samples, vec.functions, vec.interval_spread)


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
