"""The run's time outside every operation — start-up, the driver planning or loading classes, the gaps between
stages, streaming micro-batches waiting for their trigger — and what the job's processes read from the storage
device in it (``Trace.io``).

No operation runs in that time, so all of it is on the critical path. Where the device moved bytes then (a JVM
loading its jars from a cold, slow disk; a driver reading a file before the first job), a faster or slower
device shortens or stretches it as it does the operations' reads: ``crystalperf.core.predict.engine`` adds the
difference to every scenario that changes the disk bandwidth, and the report says how much of that time the
device took.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from crystalperf.core import trace as tr
from crystalperf.core.attribution.observed import counter_series
from crystalperf.core.profile.dag import ExecutionProfile, implicit_predecessors, unit_profiles
from crystalperf.core.units import format_duration

# A micro-batch (an operation with ``ATTRIBUTE_STREAMING_BATCH``) starts when its query's trigger fires, or at once
# after the batch before when that one ran past it (or always: an available-now trigger, a query behind its input),
# after the query's own steps (planning, committing offsets: from tens of milliseconds to a few tenths on a busy
# machine). Where the hook saw the batches' progress, a batch whose trigger fired more than TRIGGER_LATE_S after the
# trigger before it had ended waited for it (one that ran behind fires once the query has reported the batch
# before: 7-68 ms later on a 2-core machine). Otherwise the gaps between the jobs tell: gaps of at least TRIGGER_GAP_S
# that are more than half the batch before are waits for the trigger; where a query's gaps differ by more than
# TRIGGER_MIXED (some of its batches ran back to back), only those more than twice its shortest gap, its own steps,
# are.
TRIGGER_LATE_S = 0.1
TRIGGER_GAP_S = 0.2
TRIGGER_MIXED = 1.5


@dataclass(frozen=True)
class TriggerWait:
    """A micro-batch's wait for its trigger."""

    gap_s: float  # from the end of the operation before it (``implicit_predecessors``) to its start
    overhead_s: float  # its query's own steps before its work: from its trigger where that is known, else the
    # shortest gap before its query's batches that did not wait (else 0)


def waited_batches(operations: Sequence[tr.Operation]) -> dict[str, TriggerWait]:
    """The micro-batches among sibling ``operations`` that waited for their trigger, by id."""
    if not any(tr.ATTRIBUTE_STREAMING_BATCH in op.attributes for op in operations):
        return {}
    by_id = {op.id: op for op in operations}
    gaps: dict[str, list[tuple[tr.Operation, float, tr.Operation]]] = {}
    for op_id, before_id in implicit_predecessors(operations).items():
        op, before = by_id[op_id], by_id[before_id]
        if tr.ATTRIBUTE_STREAMING_BATCH in op.attributes:
            query = op.attributes.get(tr.ATTRIBUTE_STREAMING_QUERY, "")
            gaps.setdefault(query, []).append((op, op.start - before.end, before))
    waited: dict[str, TriggerWait] = {}
    for query, batches in gaps.items():
        shortest = min(gap for _op, gap, _before in batches)
        mixed = max(gap for _op, gap, _before in batches) > TRIGGER_MIXED * max(shortest, 1e-3)
        by_trigger: dict[str, TriggerWait | None] = {}
        for op, gap, before in batches:
            fired, _ran = _trigger(op)
            before_fired, before_ran = _trigger(before)
            if (fired is not None and before_fired is not None and before_ran is not None
                    and before.attributes.get(tr.ATTRIBUTE_STREAMING_QUERY, "") == query):
                late = fired - (before_fired + before_ran) > TRIGGER_LATE_S
                by_trigger[op.id] = TriggerWait(gap, max(0.0, op.start - fired)) if late else None
        found = {op.id: gap for op, gap, before in batches if op.id not in by_trigger
                 and gap >= TRIGGER_GAP_S and gap > before.duration / 2 and (not mixed or gap > 2 * shortest)}
        overhead = max(0.0, min((gap for op, gap, _before in batches if op.id not in found
                                 and by_trigger.get(op.id) is None), default=0.0))
        waited.update({op_id: TriggerWait(gap, overhead) for op_id, gap in found.items()})
        waited.update({op_id: wait for op_id, wait in by_trigger.items() if wait is not None})
    return waited


def _trigger(op: tr.Operation) -> tuple[float | None, float | None]:
    """When a micro-batch's trigger fired and how long it ran, where its hook saw the batch's progress."""
    return (_seconds(op.attributes.get(tr.ATTRIBUTE_STREAMING_TRIGGER_START)),
            _seconds(op.attributes.get(tr.ATTRIBUTE_STREAMING_TRIGGER_S)))


def _seconds(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None


def trigger_waits(profile: ExecutionProfile) -> dict[str, TriggerWait]:
    """``waited_batches`` of the trace's top-level operations. Computed once per profile."""
    return profile.memoised("trigger_waits", lambda: waited_batches(profile.trace.operations))


# Gaps shorter than this (task scheduling between stages) are left alone: counters read every 250 ms say nothing
# of them, and whatever the device did in them is the operations' neighbours' reads.
MIN_GAP_S = 0.5


@dataclass(frozen=True)
class OutsideGap:
    start: float
    end: float
    read_bytes: float  # read from the storage device by the busiest host's job processes in the gap

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class OutsideTime:
    """The gaps of at least ``MIN_GAP_S`` between the operations, in the application's span."""

    gaps: tuple[OutsideGap, ...]

    @property
    def seconds(self) -> float:
        return sum(g.seconds for g in self.gaps)

    @property
    def read_bytes(self) -> float:
        return sum(g.read_bytes for g in self.gaps)

    def disk_seconds(self, bandwidth: float) -> float:
        """The gaps' time the device needed for their bytes at ``bandwidth`` (bytes/s), at most each gap's length."""
        if bandwidth <= 0:
            return 0.0
        return sum(min(g.seconds, g.read_bytes / bandwidth) for g in self.gaps)

    def seconds_at(self, traced_bandwidth: float, new_bandwidth: float) -> float:
        """The gaps' length with a device of ``new_bandwidth`` where the traced run's had ``traced_bandwidth``: the
        part the device took at the traced bandwidth becomes the bytes over the new one, the rest stays."""
        if traced_bandwidth <= 0 or new_bandwidth <= 0:
            return self.seconds
        return sum(g.seconds - min(g.seconds, g.read_bytes / traced_bandwidth)
                   + min(g.seconds, g.read_bytes / traced_bandwidth) * traced_bandwidth / new_bandwidth
                   for g in self.gaps)


@dataclass(frozen=True)
class OutsideSplit:
    """Where the run's time outside every operation lies: before the first (the application's start-up), between
    them (the program's or driver's own work, scheduling) and after the last (stopping)."""

    before_s: float
    between_s: float
    after_s: float


def outside_split(profile: ExecutionProfile) -> OutsideSplit | None:
    """The run's time outside every operation, before, between and after them; None without an operation.
    Computed once per profile."""
    return profile.memoised("outside_split", lambda: _outside_split(profile))


def _outside_split(profile: ExecutionProfile) -> OutsideSplit | None:
    app = profile.trace.application
    busy = [(a, b) for a, b in sorted((max(p.op.start, app.start), min(p.op.end, app.end))
                                       for p in unit_profiles(profile)) if b > a]
    if not busy or app.duration <= 0:
        return None
    first, last = busy[0][0], max(b for _, b in busy)
    between = sum(b - a for a, b in _gaps(first, last, busy, min_gap_s=0.0))
    return OutsideSplit(first - app.start, between, app.end - last)


def where_outside(split: OutsideSplit | None) -> str:
    """Where the time outside the operations lay, in words: the parts of at least a tenth of a second."""
    if split is None:
        return "driver code, scheduling, start-up"
    parts = [(split.before_s, "before the first (start-up)"),
             (split.between_s, "between them (the program's or driver's own work, scheduling)"),
             (split.after_s, "after the last (stopping)")]
    said = [f"{format_duration(seconds)} {where}" for seconds, where in parts if seconds >= 0.1]
    return ", ".join(said) if said else "driver code, scheduling, start-up"


def outside_time(profile: ExecutionProfile) -> OutsideTime | None:
    """The run's gaps outside every operation and the device's bytes in them; None without device counters.
    Computed once per profile."""
    return profile.memoised("outside_time", lambda: _outside_time(profile))


def _outside_time(profile: ExecutionProfile) -> OutsideTime | None:
    trace = profile.trace
    app = trace.application
    busy = sorted((p.op.start, p.op.end) for p in unit_profiles(profile) if p.op.end > p.op.start)
    spans = _gaps(app.start, app.end, busy)
    # A micro-batch waiting for its trigger starts at its trigger whatever the device does before it: that wait
    # is not time a device changes.
    waits = trigger_waits(profile)
    if waits:
        # disjoint, so sorted by start they are sorted by end too: a span overlaps one only if it overlaps the last
        # to start before the span ends
        waited = sorted((op.start - waits[op.id].gap_s, op.start) for op in profile.trace.operations if op.id in waits)
        starts = [start for start, _ in waited]
        spans = [(a, b) for a, b in spans
                 if (i := bisect.bisect_left(starts, b) - 1) < 0 or waited[i][1] <= a]
    if not spans:
        return OutsideTime(())
    by_host: dict[str | None, list[tr.IoSample]] = {}
    for row in trace.io:
        by_host.setdefault(row.host, []).append(row)
    # Every process counts, the coordinator too: a driver loading its classes is outside time's commonest reader.
    series = []
    for rows in by_host.values():
        per_source: dict[str, list[tr.IoSample]] = {}
        for row in sorted(rows, key=lambda r: r.t):
            per_source.setdefault(row.source, []).append(row)
        found = [s for source_rows in per_source.values()
                 if (s := counter_series(source_rows, "storage_read_bytes")) is not None]
        if found:
            series.append(found)
    if not series:
        return None
    # hosts read from devices of their own: the busiest one sets the gap's pace
    gaps = tuple(OutsideGap(a, b, max(sum(s.between(a, b) for s in host) for host in series)) for a, b in spans)
    return OutsideTime(gaps)


def _gaps(start: float, end: float, busy: list[tuple[float, float]],
          min_gap_s: float = MIN_GAP_S) -> list[tuple[float, float]]:
    """The stretches of [start, end] that no interval of ``busy`` (sorted by start) covers, of at least
    ``min_gap_s``."""
    found = []
    reached = start
    for a, b in busy:
        if a > reached and min(a, end) - reached >= min_gap_s:
            found.append((reached, min(a, end)))
        reached = max(reached, b)
        if reached >= end:
            break
    if end - reached > 0 and end - reached >= min_gap_s:
        found.append((reached, end))
    return found
