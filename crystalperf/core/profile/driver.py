"""A driver's own work outside every operation: the samples a hook keyed to ``tr.DRIVER_OPERATION`` (a PySpark
program's main thread while not inside a call into Spark: its Python between jobs, its start-up and its stopping).

No operation holds that time, so it is not on the critical path and no what-if changes it; the report names where
it went, function by function, with the resource each sample's function and thread state say.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from crystalperf.core import trace as tr
from crystalperf.core.profile.dag import ExecutionProfile
from crystalperf.core.resources import CATEGORIES, WAITING, ResourceVector, weighted_mean
from crystalperf.core.units import format_duration

# Functions listed in the report, the most sampled first.
TOP_FUNCTIONS = 5
_OWN_PREFIX = "crystalperf."


@dataclass(frozen=True)
class DriverFunction:
    name: str
    where: str | None  # the frame's file:line
    seconds: float
    vector: ResourceVector

    @property
    def resource(self) -> str:
        return max(CATEGORIES, key=lambda c: self.vector.as_dict()[c])

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "where": self.where, "seconds": round(self.seconds, 6), "resource": self.resource,
                "vector": {c: round(v, 4) for c, v in self.vector.as_dict().items()}}


@dataclass(frozen=True)
class DriverWork:
    """What the driver's own samples say: about how long (samples × the interval) and in which functions."""

    seconds: float
    waiting_s: float
    samples: int
    functions: list[DriverFunction]

    def sentence(self) -> str:
        running = self.seconds - self.waiting_s
        listed = ", ".join(f"{format_duration(f.seconds)} "
                           f"{'waiting' if f.resource == WAITING else f'on {f.resource}'} in {f.name}"
                           + (f" ({os.path.basename(f.where)})" if f.where else "") for f in self.functions[:3])
        return (f"Outside its calls into Spark the driver's own Python ran about {format_duration(running)} and waited "
                f"about {format_duration(self.waiting_s)} (sampled {self.samples} times): {listed}.")

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 6), "waiting_s": round(self.waiting_s, 6), "samples": self.samples,
                "functions": [f.as_dict() for f in self.functions], "sentence": self.sentence()}


def _where(frames: list[tr.Frame], stack: list[int], name: str) -> str | None:
    frame = next((frames[i] for i in stack if frames[i].name == name), None)
    if frame is None or not frame.file:
        return None
    # a module's top level is the whole file, not its first line
    return f"{frame.file}:{frame.line}" if frame.line is not None and not name.endswith(".<module>") else frame.file


def _the_hooks_own(frames: list[tr.Frame], stack: list[int]) -> bool:
    """A sample in crystalperf's own code (the hook starting its sampler): the hook's cost, which it counts."""
    return any(frames[i].name.startswith(_OWN_PREFIX) for i in stack)


def driver_work(profile: ExecutionProfile) -> DriverWork | None:
    """The driver's own samples by function; None without any. Computed once per profile."""
    if "driver_work" not in profile.memo:
        profile.memo["driver_work"] = _driver_work(profile)
    found: DriverWork | None = profile.memo["driver_work"]
    return found


def _driver_work(profile: ExecutionProfile) -> DriverWork | None:
    samples, resolution = profile.trace.samples, profile.resolution
    if samples is None or resolution is None:
        return None
    keys = {i for i, key in enumerate(samples.keys) if key.operation == tr.DRIVER_OPERATION}
    if not keys:
        return None
    counts: dict[str, int] = {}
    vectors: dict[str, list[tuple[ResourceVector, float]]] = {}
    where: dict[str, str | None] = {}
    total = waiting = 0.0
    for key, _bucket, stack, count in samples.rows():
        if key not in keys or _the_hooks_own(samples.frames, samples.stacks[stack]):
            continue
        vector = resolution.stack_vectors.get(stack) or ResourceVector.of(waiting=1.0)
        function = resolution.stack_function.get(stack)
        name = function.qualified_name if function is not None else f"waiting in {resolution.stack_waiting_in.get(stack, 'plumbing')}"
        counts[name] = counts.get(name, 0) + count
        vectors.setdefault(name, []).append((vector, float(count)))
        if name not in where:
            where[name] = _where(samples.frames, samples.stacks[stack], name) if function is not None else None
        total += count
        waiting += count * vector.waiting
    if total <= 0:
        return None
    interval = samples.interval_s
    functions = [DriverFunction(name, where[name], counts[name] * interval,
                                weighted_mean(vectors[name]) or ResourceVector.of(waiting=1.0))
                 for name in sorted(counts, key=lambda n: -counts[n])[:TOP_FUNCTIONS]]
    return DriverWork(total * interval, waiting * interval, int(total), functions)
