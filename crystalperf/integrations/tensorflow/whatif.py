"""What more (or fewer) TensorFlow threads buy: Amdahl's law with the parallel fraction measured in
the traced run.

A training step's kernels are not independent tasks a scheduler could spread over slots (most depend
on the previous one); each kernel is itself split over TF's intra-op thread pool. So the step's CPU
time scales as ``(1 - p) + p / T`` with ``T`` threads, where the parallel fraction ``p`` follows from
the CPU utilisation ``U`` the callback measured over the window (process CPU seconds / wall seconds):
``U = 1 / ((1 - p) + p / T)``. Registered as the ``tensorflow-threads`` predictor; it touches only
TensorFlow traces and imports no TensorFlow.
"""

from __future__ import annotations

from crystalperf.core.predict.base import Baseline, Changes, OpContext, TaskParts
from crystalperf.core.profile import ExecutionProfile

# With one traced thread nothing can be measured; dense kernels (convolution, matmul) split well.
ASSUMED_PARALLEL_FRACTION = 0.9
_SCALED_KINDS = ("op", "input", "step")


def parallel_fraction(utilization: float, threads: int) -> float:
    """p from ``U = 1 / ((1 - p) + p / T)``, clamped to [0, 1]."""
    if threads <= 1:
        return ASSUMED_PARALLEL_FRACTION
    u = min(max(utilization, 1.0), float(threads))
    return min(1.0, max(0.0, (1 - 1 / u) / (1 - 1 / threads)))


def amdahl_factor(p: float, threads: int, new_threads: int) -> float:
    """New over old CPU time of the step when the threads change."""
    return ((1 - p) + p / new_threads) / ((1 - p) + p / threads)


class ThreadsModel:
    """``cores=N`` for TensorFlow: TF's intra-/inter-op threads."""

    name = "tensorflow-threads"
    keys = frozenset({"cores"})

    def __init__(self) -> None:
        self.factor = 1.0

    def prepare(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> list[str]:
        self.factor = 1.0
        trace = profile.trace
        if trace.application.framework != "tensorflow" or "cores" not in changes:
            return []
        threads = baseline.cores_per_executor
        new_threads = int(changes.number("cores", threads))
        utilization = trace.metrics.get("cpu_utilization")
        if threads > 1 and utilization:
            p = parallel_fraction(utilization, threads)
            how = f"from the measured CPU utilisation {utilization:.2f} of {threads} threads"
        else:
            p = ASSUMED_PARALLEL_FRACTION
            how = "assumed (one traced thread: nothing to measure)"
        self.factor = amdahl_factor(p, threads, new_threads)
        return [f"TensorFlow threads {threads} -> {new_threads}: parallel fraction {p:.2f} {how}; "
                f"step CPU time x{self.factor:.2f} (Amdahl)"]

    def adjust(self, ctx: OpContext, parts: list[TaskParts]) -> list[TaskParts]:
        if self.factor != 1.0 and ctx.profile.op.kind in _SCALED_KINDS:
            for p in parts:
                p.cpu *= self.factor
        return parts
