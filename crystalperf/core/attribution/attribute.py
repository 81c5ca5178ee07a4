"""Stage 2, attribution: every operation's resource vector — <cpu, disk, network, waiting> shares of its time —
from the evidence the trace holds, strongest first (ARCHITECTURE: what the framework or the OS measured, then
thread states and plumbing frames, then the classifiers on located code), and, for an operation with no evidence
of its own, from its sub-operations."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import ResourceClassifier
from crystalperf.core.attribution.measurement import bound_by_measurement, operation_metrics_vector
from crystalperf.core.attribution.observed import (
    network_counted_idle,
    observed_bandwidths,
    storage_counted_idle,
    window_busy,
)
from crystalperf.core.attribution.vectors import (
    ATTRIBUTION_EVIDENCE,
    ATTRIBUTIONS,
    RESOURCES_ATTRIBUTE,
    SOURCE_CHILDREN,
    SOURCE_METRICS,
    VECTOR_SOURCE_ATTRIBUTE,
    FunctionStat,
    OperationVector,
    SampleResolution,
    awaited_work,
    default_vector,
    pooled_samples,
    resolve_awaited_io,
    resolve_awaited_work,
    resolve_samples,
    resolver_for,
    restrict,
    sampled_vectors,
    without_disk_waits,
)
from crystalperf.core.resources import ResourceVector, weighted_mean
from crystalperf.core.trace.totals import task_seconds


@dataclass
class Attribution:
    """Every operation's vector, by path (its ancestors' ids and its own, joined by '/'), and how they were
    found."""

    vectors: dict[str, OperationVector] = field(default_factory=dict)
    resolution: SampleResolution | None = None
    classifier_version: str = ""
    attribution: str = ATTRIBUTION_EVIDENCE
    # (read, written) storage bytes where the OS counters showed the job's processes did no disk I/O worth a wait
    # (``observed.storage_counted_idle``): the sampled functions' disk share was counted as CPU.
    storage_idle: tuple[float, float] | None = None
    # Whether the network counters of every process that ran the job's tasks saw no traffic: the running
    # samples' network share was counted as CPU.
    network_idle: bool = False


def attribute(
    trace: tr.Trace,
    classifier: ResourceClassifier,
    *,
    locators: Sequence[object] | None = None,
    source_roots: Sequence[str] = (),
    reclassify: bool = False,
    attribution: str = ATTRIBUTION_EVIDENCE,
) -> Attribution:
    """Locate, classify and weigh the evidence: every operation's vector. The functions and vectors the trace
    embeds from its job-end analysis are used as they are unless ``reclassify``. ``attribution`` "paper" is the
    paper's method (first located frame, classifier only), kept for comparison."""
    if attribution not in ATTRIBUTIONS:
        raise ValueError(f"unknown attribution {attribution!r} (known: {', '.join(ATTRIBUTIONS)})")
    evidence = attribution == ATTRIBUTION_EVIDENCE
    resolution: SampleResolution | None = None
    sampled: dict[str, OperationVector] = {}
    version = str(getattr(classifier, "version", type(classifier).__name__))
    storage_idle = storage_counted_idle(trace) if evidence else None
    network_idle = network_counted_idle(trace) if evidence else False
    idle = ("disk",) * (storage_idle is not None) + ("network",) * network_idle
    bandwidths = observed_bandwidths(trace) if evidence and trace.io else {}
    if trace.samples is not None and trace.samples.count:
        resolver = resolver_for(trace, locators, source_roots)
        resolution = resolve_samples(trace.samples, classifier, resolver, use_embedded=not reclassify,
                                     attribution=attribution)
        sampled = sampled_vectors(trace.samples, resolution, idle)
        embedded = trace.samples.resolution
        if embedded is not None and not reclassify and evidence:
            version = embedded.classifier if resolution.classified == 0 else f"{version} + {embedded.classifier}"

    vectors: dict[str, OperationVector] = {}
    pooled = pooled_samples(trace.iter_operations(), sampled) if evidence and sampled else {}

    def visit(op: tr.Operation, path: str) -> OperationVector:
        kids = [(child, visit(child, f"{path}/{child.id}")) for child in op.children]
        vec = sampled.get(op.id)
        prefer_metrics = op.attributes.get(VECTOR_SOURCE_ATTRIBUTE) == SOURCE_METRICS
        if evidence and (vec is not None or not kids):
            vec = bound_by_measurement(op, vec, prefer_metrics, idle)
        # The paper's method knows nothing of a hook's measured split: its samples, else native metrics.
        if vec is None:
            vec = _fallback_vector(op, kids, waiting=evidence)
        vec = restrict(vec, op.attributes.get(RESOURCES_ATTRIBUTE))
        if storage_idle is not None:
            vec = without_disk_waits(vec)
        if evidence:
            vec = resolve_awaited_work(vec, awaited_work(op, pooled.get(op.id) or sampled.get(op.id)))
            if vec.awaiting_io > 0:
                vec = resolve_awaited_io(vec, window_busy(trace, bandwidths, op.start, op.end))
        vectors[path] = vec
        return vec

    for op in trace.operations:
        visit(op, op.id)
    return Attribution(vectors, resolution, version, attribution, storage_idle, network_idle)


@dataclass
class _Weighed:
    vector: OperationVector
    work: float  # the task-seconds it is weighed by


def _fallback_vector(op: tr.Operation, children: list[tuple[tr.Operation, OperationVector]], *,
                     waiting: bool = True) -> OperationVector:
    """A vector for an operation without samples of its own: from its children (weighed by their task time),
    else from its native metrics, else the default."""
    if children:
        # one per id, the last listed, as the profile's level graph keeps them
        kids = list({child.id: _Weighed(vec, sum(vec.vector.scaled(task_seconds(child)).values()))
                     for child, vec in children}.values())
        vec = weighted_mean((c.vector.vector, c.work) for c in kids)
        if vec is not None:
            merged: dict[str, FunctionStat] = {}
            pairs: dict[str, list[tuple[ResourceVector, float]]] = {}
            for stat in (f for c in kids for f in c.vector.functions):
                key = stat.function.key
                pairs.setdefault(key, []).append((stat.vector, float(stat.samples)))
                if key in merged:
                    merged[key].samples += stat.samples
                    merged[key].callers.update(stat.callers)
                else:
                    merged[key] = FunctionStat(stat.function, stat.vector, stat.samples, stat.classified,
                                               callers=Counter(stat.callers))
            for key, stat in merged.items():
                stat.vector = weighted_mean(pairs[key]) or stat.vector
            functions = sorted(merged.values(), key=lambda f: -f.samples)
            waiting_in: Counter[str] = Counter()
            measured: dict[str, float] = {}
            total_work = sum(c.work for c in kids)
            for c in kids:
                waiting_in.update(c.vector.waiting_in)
                weight = c.work / total_work if total_work > 0 else 0.0
                for category, fraction in c.vector.measured.items():
                    measured[category] = measured.get(category, 0.0) + fraction * weight
            return OperationVector(vec, SOURCE_CHILDREN, sum(c.vector.samples for c in kids), functions,
                                   waiting_in=waiting_in, measured=measured)
    metrics_vec = operation_metrics_vector(op, waiting=waiting)
    if metrics_vec is not None:
        return OperationVector(metrics_vec, SOURCE_METRICS)
    return default_vector()


