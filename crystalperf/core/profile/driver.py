"""A driver's own work outside every operation: the samples a hook keyed to ``tr.DRIVER_OPERATION``. Two kinds:

- ``python-driver``: a PySpark program's main thread while not inside a call into Spark (its Python between jobs,
  its start-up and its stopping), listed function by function;
- ``jvm-driver``: the driver JVM's threads serving the program's calls (a Scala program's ``main``, py4j's
  connection threads, a Spark Connect server's request threads) while they used a core outside a job's wait (a query analysed and optimised, a plan built
  column by column, an optimiser iterating between jobs), listed by the call into Spark the work was under, with
  the functions that did it.

No operation holds that time, so it is not on the critical path and no what-if changes it; the report names where
it went, with the resource each sample's function and thread state say.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from crystalperf.core import trace as tr
from crystalperf.core.attribution.vectors import idle_corrected
from crystalperf.core.profile.dag import ExecutionProfile
from crystalperf.core.resources import CATEGORIES, WAITING, ResourceVector, weighted_mean
from crystalperf.core.units import format_duration

# Functions listed in the report, the most sampled first; under each JVM call, its functions.
TOP_FUNCTIONS = 5
TOP_FUNCTIONS_IN_CALL = 3
_OWN_PREFIX = "crystalperf."
JVM_DRIVER_THREAD = "jvm-driver"
# Frames outside the program's call into Spark on a JVM driver thread: the JDK's, py4j's, spark-submit's, a Spark
# Connect server's request handling (its session's artifacts and active session around it), Spark's try/finally
# wrappers and Scala's runtime.
_OUTSIDE_THE_CALL = ("java.", "jdk.", "sun.", "py4j.", "scala.", "org.apache.spark.deploy.",
                     "org.apache.spark.sql.connect.", "org.apache.spark.sql.artifact.", "org.apache.spark.JobArtifactSet",
                     "org.apache.spark.util.", "org.apache.spark.sql.SparkSession.withActive")


@dataclass(frozen=True)
class DriverFunction:
    """A Python function of the driver's program, or a call into Spark on a JVM driver thread (``runtime`` "jvm",
    with the functions that did its work in ``within``)."""

    name: str
    where: str | None  # the frame's file:line
    seconds: float
    vector: ResourceVector
    runtime: str = "python"
    within: tuple[DriverFunction, ...] = ()

    @property
    def resource(self) -> str:
        return max(CATEGORIES, key=lambda c: self.vector.as_dict()[c])

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "where": self.where, "seconds": round(self.seconds, 6),
                               "resource": self.resource, "runtime": self.runtime,
                               "vector": {c: round(v, 4) for c, v in self.vector.as_dict().items()}}
        if self.runtime == "jvm":
            out["functions"] = [{"name": f.name, "where": f.where, "seconds": round(f.seconds, 6),
                                 "resource": f.resource} for f in self.within]
        return out

    def phrase(self) -> str:
        doing = "waiting" if self.resource == WAITING else f"on {self.resource}"
        where = f" ({os.path.basename(self.where)})" if self.where and self.runtime == "python" else ""
        mostly = (f" (mostly {self.within[0].name})" if self.within and self.within[0].name != self.name else "")
        return f"{format_duration(self.seconds)} {doing} in {self.name}{where}{mostly}"


@dataclass(frozen=True)
class DriverWork:
    """What the driver's own samples say: about how long (samples × the interval) and in which functions."""

    seconds: float
    waiting_s: float
    samples: int
    functions: list[DriverFunction]  # the Python functions and the JVM calls, the longest first
    jvm_s: float = 0.0
    jvm_waiting_s: float = 0.0

    def sentence(self) -> str:
        python = [f for f in self.functions if f.runtime == "python"]
        jvm = [f for f in self.functions if f.runtime == "jvm"]
        # sums of the same samples' seconds: rounded, so that all-waiting Python runs 0 s, not a float's residue
        python_waiting_s = round(self.waiting_s - self.jvm_waiting_s, 6)
        python_running_s = max(0.0, round(self.seconds - self.jvm_s - python_waiting_s, 6))
        sampled = f" (sampled {self.samples} times)"
        parts = []
        if python:
            parts.append(f"Outside its calls into Spark the driver's own Python ran about "
                         f"{format_duration(python_running_s)} and waited about "
                         f"{format_duration(python_waiting_s)}{sampled}: {', '.join(f.phrase() for f in python[:3])}.")
        if jvm:
            parts.append(f"Outside Spark's jobs the driver's JVM worked about {format_duration(self.jvm_s)} on the "
                         f"program's calls{'' if python else sampled}: {', '.join(f.phrase() for f in jvm[:3])}.")
        return " ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 6), "waiting_s": round(self.waiting_s, 6), "samples": self.samples,
                "jvm_s": round(self.jvm_s, 6), "functions": [f.as_dict() for f in self.functions],
                "sentence": self.sentence()}


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
    return profile.memoised("driver_work", lambda: _driver_work(profile))


def _program_call(frames: list[tr.Frame], stack: list[int]) -> int | None:
    """The frame of the program's call into Spark on a JVM driver thread: the outermost frame of Spark's below the
    JDK's, py4j's and spark-submit's (else the outermost of another's: a Scala program's own code); None when the
    stack has only those."""
    inside = [i for i in reversed(stack) if not frames[i].name.startswith(_OUTSIDE_THE_CALL)]
    return next((i for i in inside if frames[i].name.startswith("org.apache.spark.")), inside[0] if inside else None)


class _Tally:
    """Samples by name: their count, the resource vectors they were drawn with, and where the name's frame is."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.vectors: dict[str, list[tuple[ResourceVector, float]]] = {}
        self.where: dict[str, str | None] = {}

    def add(self, name: str, where: str | None, vector: ResourceVector, count: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + count
        self.vectors.setdefault(name, []).append((vector, float(count)))
        self.where.setdefault(name, where)

    def top(self, limit: int, interval: float) -> list[tuple[str, str | None, float, ResourceVector]]:
        return [(name, self.where[name], self.counts[name] * interval,
                 weighted_mean(self.vectors[name]) or ResourceVector.of(waiting=1.0))
                for name in sorted(self.counts, key=lambda n: -self.counts[n])[:limit]]


def _driver_work(profile: ExecutionProfile) -> DriverWork | None:
    samples, resolution = profile.trace.samples, profile.resolution
    if samples is None or resolution is None:
        return None
    keys = {i: key.thread == JVM_DRIVER_THREAD for i, key in enumerate(samples.keys)
            if key.operation == tr.DRIVER_OPERATION}
    if not keys:
        return None
    # the resources the OS counters saw the job's processes not use are moved as in the operations' vectors
    idle = ("disk",) * (profile.storage_idle is not None) + ("network",) * profile.network_idle
    stack_vectors = idle_corrected(resolution, idle)
    python, calls = _Tally(), _Tally()
    within: dict[str, _Tally] = {}
    total = waiting = jvm = jvm_waiting = 0.0
    for key, _bucket, stack, count in samples.rows():
        if key not in keys or _the_hooks_own(samples.frames, samples.stacks[stack]):
            continue
        frames = samples.stacks[stack]
        vector = stack_vectors.get(stack) or ResourceVector.of(waiting=1.0)
        function = resolution.stack_function.get(stack)
        name = function.qualified_name if function is not None else f"waiting in {resolution.stack_waiting_in.get(stack, 'plumbing')}"
        where = _where(samples.frames, frames, name) if function is not None else None
        if keys[key]:
            call = _program_call(samples.frames, frames)
            call_name = samples.frames[call].name if call is not None else name
            calls.add(call_name, _where(samples.frames, frames, call_name), vector, count)
            within.setdefault(call_name, _Tally()).add(name, where, vector, count)
            jvm += count
            jvm_waiting += count * vector.waiting
        else:
            python.add(name, where, vector, count)
        total += count
        waiting += count * vector.waiting
    if total <= 0:
        return None
    interval = samples.interval_s
    functions = [DriverFunction(name, where, seconds, vector)
                 for name, where, seconds, vector in python.top(TOP_FUNCTIONS, interval)]
    functions += [DriverFunction(name, where, seconds, vector, "jvm",
                                 tuple(DriverFunction(*f, runtime="jvm")
                                       for f in within[name].top(TOP_FUNCTIONS_IN_CALL, interval)))
                  for name, where, seconds, vector in calls.top(TOP_FUNCTIONS, interval)]
    functions.sort(key=lambda f: -f.seconds)
    return DriverWork(total * interval, waiting * interval, int(total), functions[:TOP_FUNCTIONS], jvm * interval,
                      jvm_waiting * interval)
