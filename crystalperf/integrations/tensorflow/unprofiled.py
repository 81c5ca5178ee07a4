"""The requested steps the profile did not cover, as one operation after the profiled ones (no TensorFlow import
here).

TensorFlow's profiler holds every event until it stops, and a tf.data pipeline of many small elements (a
``TextLineDataset`` batched by thousands) records thousands of events a step: the memory budget then ends the
window after a few steps. Those first steps often ran on batches prefetched before the window began, without
the input wait the rest of the fit had, so a report of them alone describes milliseconds of a fit that took
seconds. The callback times the steps still asked for; here they become one operation: the same model at the
same batch size computes each step about as long as the profiled ones did, so their compute is the profiled
steps' median compute, and the rest of their time is the wait for input, attributed as the profiled steps'
waits are (what the pipeline worked on, the devices the I/O counters saw busy then).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from crystalperf.core import trace as tr
from crystalperf.core.attribution.vectors import VECTOR_SOURCE_ATTRIBUTE
from crystalperf.integrations.tensorflow.reader import Unprofiled

UNPROFILED_COMPUTE = "training step (not profiled)"
# Steps of one model and batch size compute alike; a rerun's spread (about 5 % here) and the profiler's own cost
# are within this margin, so only time beyond it is taken as the wait for input.
COMPUTE_MARGIN = 0.1


def compute_per_step(steps: Sequence[tr.Operation]) -> float | None:
    """The median time a profiled step spent outside its input wait."""
    computes = [step.duration - sum(c.duration for c in step.children if c.kind == "input") for step in steps]
    return statistics.median(computes) if computes else None


def _compute_metrics(steps: Sequence[tr.Operation], seconds: float) -> dict[str, float]:
    """The measured split of the profiled steps' parts outside the input wait, scaled to ``seconds``."""
    parts = [c for step in steps for c in step.children if c.kind != "input"]
    run = sum(c.duration for c in parts)
    metrics = {tr.METRIC_RUN_TIME: seconds}
    for name in (tr.METRIC_CPU_TIME, tr.METRIC_DEVICE_TIME):
        measured = sum(c.metrics.get(name, 0.0) for c in parts)
        if measured > 0 and run > 0:
            metrics[name] = seconds * min(1.0, measured / run)
    return metrics


def unprofiled_operation(tail: Unprofiled, steps: Sequence[tr.Operation], input_attributes: dict[str, str],
                         read_bytes: float | None = None) -> tuple[tr.Operation, float] | None:
    """The unprofiled steps as one step-like operation (an input wait, then their compute), and its wait; None
    without profiled steps to take the compute from. ``input_attributes``: what the profiled input parts say the
    steps wait on (the pipeline's work); ``read_bytes``: what the process read from storage meanwhile."""
    per_step = compute_per_step(steps)
    if per_step is None or tail.count <= 0 or tail.seconds <= 0:
        return None
    compute = min(tail.seconds, tail.count * per_step * (1 + COMPUTE_MARGIN))
    wait = tail.seconds - compute
    sid = f"s{tail.first}-{tail.last}"
    start, end = tail.start, tail.start + tail.seconds
    waited = tr.Operation(
        id=f"{sid}/input", name="input pipeline (wait)", kind="input", start=start, end=start + wait,
        metrics={tr.METRIC_RUN_TIME: wait, tr.METRIC_WAIT_TIME: wait},
        attributes={**input_attributes, "placement": "host", VECTOR_SOURCE_ATTRIBUTE: "metrics"},
    )
    computed = tr.Operation(
        id=f"{sid}/compute", name=UNPROFILED_COMPUTE, kind="op", start=start + wait, end=end,
        metrics=_compute_metrics(steps, compute), parents=[waited.id],
        attributes={"phase": "step", "placement": "host", VECTOR_SOURCE_ATTRIBUTE: "metrics",
                    "compute_per_step_s": f"{per_step:.6f}"},
    )
    attributes = {"batch": f"{tail.first}-{tail.last}", "steps": str(tail.count), "profiled": "false"}
    if read_bytes is not None:
        attributes["input_read_bytes"] = f"{read_bytes:.0f}"
    operation = tr.Operation(
        id=sid, name=f"steps {tail.first}-{tail.last} (not profiled)", kind="step", start=start, end=end,
        children=[waited, computed], attributes=attributes,
    )
    return operation, wait


def unprofiled_warning(tail: Unprofiled, operation: tr.Operation, wait: float) -> str:
    per_step = float(operation.children[1].attributes["compute_per_step_s"])
    return (f"steps {tail.first}-{tail.last} ({tail.count} steps, {tail.seconds:.2f} s) were timed, not profiled: "
            f"their compute is taken at the profiled steps' median ({per_step * 1000:.1f} ms a step, "
            f"{COMPUTE_MARGIN:.0%} allowed beyond it), the rest ({wait:.2f} s) as waiting for input")
