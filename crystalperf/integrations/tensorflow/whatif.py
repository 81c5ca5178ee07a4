"""What-if models for TensorFlow training steps (registered as the ``tensorflow`` predictor; it touches
only TensorFlow traces and imports no TensorFlow).

Threads (``cores``): a step's kernels are not independent tasks a scheduler could spread over slots
(most depend on the previous one); each kernel is itself split over TF's intra-op thread pool. So the
step's CPU time scales as ``(1 - p) + p / T`` with ``T`` threads, where the parallel fraction ``p``
follows from ``U = 1 / ((1 - p) + p / T)``, where ``U`` is how many threads' work the window held per second.
Two measures bound it. From above, the CPU utilisation the callback measured (process CPU seconds / wall seconds,
less the input pipeline's kernels, which tf.data runs on its own threads): it counts all the pool threads' CPU time
as work, what a kernel's threads spend beyond one thread's work on it too. From below, the kernels that ran side by
side on the compute threads, each counted as one thread's work as if it gained nothing from its own intra-op
threads. The model takes the parallel fraction midway and the band spans both ends.

Storage and network (``disk``, ``network``): the input pipeline prefetches, so what a step waits for is
not the pipeline's I/O time but how far the pipeline's time per batch exceeds the step's compute. The
pipeline's work over the window (kernel time by kind, on ``P`` threads at once) gives its time per
batch ``T_in``; a bandwidth change rescales its disk part with the bytes the process really read from
storage (``D / B`` becomes ``D / B'``; the rest of the read time is latency and stays), and each step's
wait becomes ``max(0, gap + T_in' - T_in)``, where the gap is the measured wait, or, for a step that did
not wait, the (negative) slack ``T_in - compute``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from crystalperf.core.predict.base import Baseline, Changes, OpContext, TaskParts
from crystalperf.core.predict.io import (
    DISK_BUFFER_BYTES,
    DISK_BUFFER_OVERHEAD_S,
    NETWORK_BUFFER_BYTES,
    NETWORK_BUFFER_OVERHEAD_S,
    scale_io_time,
)
from crystalperf.core.profile.dag import ExecutionProfile

# With one traced thread nothing can be measured; dense kernels (convolution, matmul) split well.
ASSUMED_PARALLEL_FRACTION = 0.9
_SCALED_KINDS = ("op", "input", "step")
# An iterator call with a batch ready still costs this much; shorter waits are not the pipeline's limit.
WAIT_NOISE_S = 0.001
WAIT_NOISE_SHARE = 0.05


def parallel_fraction(utilization: float, threads: int) -> float:
    """p from ``U = 1 / ((1 - p) + p / T)``, clamped to [0, 1]."""
    if threads <= 1:
        return ASSUMED_PARALLEL_FRACTION
    u = min(max(utilization, 1.0), float(threads))
    return min(1.0, max(0.0, (1 - 1 / u) / (1 - 1 / threads)))


def _window_s(metrics: dict[str, float]) -> float:
    """The profiled window's wall seconds: its steps times their mean time."""
    return metrics.get("step_time_s", 0.0) * metrics.get("steps", 0.0)


def step_utilization(metrics: dict[str, float]) -> float | None:
    """The cores the training steps' own threads kept busy: the process's CPU utilisation over the window less
    the input pipeline's kernel time over it (tf.data's threads, whatever the intra-op pool's size)."""
    utilization = metrics.get("cpu_utilization")
    if not utilization:
        return None
    window = _window_s(metrics)
    pipeline = metrics.get("input_work_cpu_s", 0.0)
    return utilization - pipeline / window if window > 0 else utilization


def kernel_utilization(metrics: dict[str, float]) -> float | None:
    """The threads' work over the window counting each kernel as one thread's, however many threads of its own it
    used: the time the training thread neither ran a kernel nor waited for its input (the host's dispatch, one
    thread) plus the kernels' core-seconds (how many ran side by side, integrated), per second of the window. A
    lower bound on the utilisation by work alone."""
    busy, core_s = metrics.get("kernel_busy_s"), metrics.get("kernel_core_s")
    window = _window_s(metrics)
    if busy is None or core_s is None or window <= 0:
        return None
    waited = metrics.get("profiled_input_wait_fraction", metrics.get("input_wait_fraction", 0.0))
    host = max(0.0, window - busy - waited * window)
    return (host + core_s) / window


def amdahl_factor(p: float, threads: int, new_threads: int) -> float:
    """New over old CPU time of the step when the threads change."""
    return ((1 - p) + p / new_threads) / ((1 - p) + p / threads)


def new_wait(wait: float, compute: float, per_batch: float, new_per_batch: float) -> float:
    """A step's wait for input when the pipeline's time per batch changes (prefetching).

    A step that really waited is at the pipeline's limit: its wait follows the time per batch. Below a
    few percent of the step, the "wait" is the iterator call's own cost with a batch ready, which stays;
    the step waits longer only by what a slower pipeline no longer hides behind its compute (its slack
    ``per_batch - compute`` is negative while prefetching hides it)."""
    change = new_per_batch - per_batch
    if wait > max(WAIT_NOISE_S, WAIT_NOISE_SHARE * (wait + compute)):
        return max(0.0, wait + change)
    return wait + max(0.0, min(0.0, per_batch - compute) + change)


def _count(text: str | None, default: float | None, at_least: float) -> float | None:
    """A count an attribute of the trace states (a string, from any file): ``default`` unless a finite number of at
    least ``at_least``."""
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        return default
    return value if math.isfinite(value) and value >= at_least else default


class TensorFlowModel:
    """``cores`` (TF threads), ``disk`` and ``network`` (the prefetching input pipeline)."""

    name = "tensorflow"
    keys = frozenset({"cores", "disk", "network"})

    def __init__(self) -> None:
        self.factor = 1.0
        self.waits: dict[str, float] = {}
        self.band_factors: list[float] = []

    def scenarios(self, profile: ExecutionProfile, baseline: Baseline) -> list[dict[str, float | str]]:
        """The other device: what a training step would take there."""
        if profile.trace.application.framework != "tensorflow":
            return []
        return [{"device": "gpu" if baseline.device == "cpu" else "cpu"}]

    def prepare(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> list[str]:
        self.factor = 1.0
        self.waits = {}
        self.band_factors = []
        if profile.trace.application.framework != "tensorflow":
            return []
        notes: list[str] = []
        if "cores" in changes:
            notes.append(self._prepare_threads(profile, baseline, changes))
        if ("disk" in changes or "network" in changes) and "input_work_cpu_s" in profile.trace.metrics:
            notes.append(self._prepare_input(profile, baseline, changes))
        return notes

    def _prepare_threads(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> str:
        threads = baseline.cores_per_executor
        new_threads = int(changes.number("cores", threads))
        metrics = profile.trace.metrics
        utilization = step_utilization(metrics)
        if threads > 1 and utilization:
            # The utilisation counts all the pool threads' CPU time as work, what a kernel's threads spend beyond one
            # thread's work on it too, so it bounds the parallel fraction from above only.
            high = parallel_fraction(utilization, threads)
            low_utilization = kernel_utilization(metrics)
            if low_utilization is not None:
                low = parallel_fraction(min(low_utilization, utilization), threads)
                p = (low + high) / 2
                how = (f"midway between {low:.2f}, from the kernels that ran side by side (each worth one thread, "
                       f"{low_utilization:.2f} threads' work on average), and {high:.2f}, from the CPU utilisation "
                       f"{utilization:.2f} of {threads} threads (which counts all the pool's CPU time as work; "
                       "the input pipeline's own threads left out)")
            else:
                low, p = 0.0, high
                how = (f"from the measured CPU utilisation {utilization:.2f} of {threads} threads "
                       "(the input pipeline's own threads left out)")
            span = (low, high)
            band = f"; the band spans a parallel fraction of {low:.2f} to {high:.2f}"
        else:
            p = ASSUMED_PARALLEL_FRACTION
            how = "assumed (one traced thread: nothing to measure)"
            span = (0.0, 1.0)
            band = "; the band spans a parallel fraction of 0 to 1"
        self.factor = amdahl_factor(p, threads, new_threads)
        self.band_factors = [amdahl_factor(q, threads, new_threads) for q in span]
        return (f"TensorFlow threads {threads} -> {new_threads}: parallel fraction {p:.2f} {how}; "
                f"step CPU time x{self.factor:.2f} (Amdahl){band}")

    def band_variants(self) -> Iterator[None]:
        """The model in each state the band spans (the parallel fraction's ends), one per step; restored after."""
        factor = self.factor
        try:
            for alternative in self.band_factors:
                self.factor = alternative
                yield
        finally:
            self.factor = factor

    def _prepare_input(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> str:
        m = profile.trace.metrics
        steps = max(1.0, m.get("steps", 1.0))
        parallel = max(1.0, m.get("input_parallelism", 1.0))
        # Wall-clock seconds of the pipeline's work in the window (its threads ran `parallel` at once).
        cpu, disk, net = (m.get(k, 0.0) / parallel for k in ("input_work_cpu_s", "input_work_disk_s",
                                                             "input_work_network_s"))
        new_disk, new_net = disk, net
        how = ""
        b0 = b1 = baseline.disk_bandwidth
        if "disk" in changes:
            b1 = changes.number("disk", baseline.disk_bandwidth)
            read = m.get("input_read_bytes")
            if read:
                # The bytes are known: only their transfer depends on the bandwidth; the rest of the
                # read time (latency, system calls) stays.
                transfer = min(disk, read / b0)
                new_disk = disk - transfer + read / b1
                how = f"; {read / 1e6:.1f} MB read from storage in the window"
            elif read == 0:
                how = "; nothing was read from storage in the window (page cache): the disk does not matter"
            else:
                new_disk = scale_io_time(disk, b0, b1, DISK_BUFFER_BYTES, DISK_BUFFER_OVERHEAD_S)
        if "network" in changes:
            new_net = scale_io_time(net, baseline.network_bandwidth, changes.number("network", baseline.network_bandwidth),
                                    NETWORK_BUFFER_BYTES, NETWORK_BUFFER_OVERHEAD_S)
        per_batch = (cpu + disk + net) / steps
        new_per_batch = (cpu + new_disk + new_net) / steps
        tail_bytes = 0.0
        for step in profile.top.nodes.values():
            if step.op.kind != "step" or step.children is None:
                continue
            inputs = [c for c in step.children.nodes.values() if c.op.kind == "input"]
            batches = _count(step.op.attributes.get("steps"), 1.0, at_least=1.0) or 1.0  # the unprofiled steps: one op
            tail_read = _count(step.op.attributes.get("input_read_bytes"), None, at_least=0.0)
            for part in inputs:
                compute = step.op.duration - part.op.duration
                if tail_read is not None and b0 and b1:
                    tail_bytes += tail_read
                    # No profile says what the unprofiled steps' pipeline did; their bytes say what a device of
                    # another bandwidth changes, and the wait is what is left of them beyond the compute.
                    took = part.op.duration + compute
                    change = tail_read * (1 / b1 - 1 / b0) + (new_net - net) / steps * batches
                    self.waits[part.op.id] = new_wait(part.op.duration, compute, took, took + change)
                else:
                    self.waits[part.op.id] = new_wait(part.op.duration, compute, per_batch * batches,
                                                      new_per_batch * batches)
        if tail_bytes and "disk" in changes:
            how += f"; {tail_bytes / 1e6:.1f} MB read from storage in the steps not profiled"
        return (f"input pipeline: {cpu + disk + net:.2f} s over {steps:.0f} steps ({parallel:.1f} threads at once) "
                f"= {per_batch * 1000:.1f} ms per batch, {new_per_batch * 1000:.1f} ms after the change{how}; "
                f"steps wait only for what prefetching cannot hide behind their compute")

    @property
    def unchanged(self) -> bool:
        """Nothing to adjust in this scenario (not a TensorFlow trace, or no key of ours changed)."""
        return not self.waits and self.factor == 1.0

    def adjust(self, ctx: OpContext, parts: list[TaskParts]) -> list[TaskParts]:
        op = ctx.profile.op
        wait = self.waits.get(op.id)
        if wait is not None:
            # Still waiting, for as long as the changed pipeline makes it: no other change shortens a wait.
            return [TaskParts(0.0, 0.0, 0.0, wait) for _ in parts]
        if self.factor != 1.0 and op.kind in _SCALED_KINDS:
            for p in parts:
                p.cpu *= self.factor
        return parts
