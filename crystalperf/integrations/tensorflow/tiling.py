"""A step's parts laid end to end so that they cover the step: how long each kernel group, the input wait and the
host's Python took of it. (No TensorFlow import here.)"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from crystalperf.core import trace as tr
from crystalperf.core.attribution.vectors import RESOURCES_ATTRIBUTE
from crystalperf.integrations.tensorflow.reader import OpEvent, Step

# Shorter stretches of a step outside every part are not worth an operation of their own.
HOST_GAP_S = 50e-6
# Kernels shorter than this share of their group's time don't define its span; groups with less than
# this share of the window's kernel time are folded into "other" -- except the optimizer update, which
# users look for even when it is small.
SIGNIFICANT_SHARE = 0.02
HOST_PART = "host (Python, dispatch)"
# The thread role of the training thread's samples inside the batch callbacks (Keras's and the program's): the
# host's Python of the step's tail, whose functions the op timeline does not show.
CALLBACKS_THREAD = "callbacks"
BATCH_CALLBACKS = frozenset(f"on_{phase}batch_{end}" for phase in ("", "train_", "test_", "predict_")
                            for end in ("begin", "end"))
# The condition of the while loop a step of several iterations (steps_per_execution) runs its train step in.
_LOOP_CONDITION = re.compile(r"^while/cond/_\d+/")


def busy_union(ops: Sequence[OpEvent]) -> float:
    """Wall time during which at least one of the kernels ran (kernels overlap across threads)."""
    busy = 0.0
    until = float("-inf")
    for op in sorted(ops, key=lambda o: o.start):
        end = op.start + op.duration
        if end > until:
            busy += end - max(op.start, until)
            until = end
    return busy


def span(ops: Sequence[OpEvent]) -> tuple[float, float]:
    """The group as one block of work: from its first significant kernel, as long as its kernels were
    busy. First-to-last would be wrong for groups whose kernels are scattered over the step (the
    optimizer's variable reads run at the very start, the step counter's update at the very end): the
    span would claim the whole step as that group's work."""
    busy = sum(o.duration for o in ops)
    significant = [o for o in ops if o.duration >= SIGNIFICANT_SHARE * busy] or list(ops)
    first = min(o.start for o in significant)
    return first, first + busy_union(ops)


def tile(children: list[tr.Operation], step: Step, sid: str) -> list[tr.Operation]:
    """Lay the step's parts end to end so that they cover the step exactly, in the order they began.

    A kernel group absorbs the gap before its next part (executor scheduling and dispatch between
    kernels is CPU work of the same computation); the input wait keeps its measured span; time before
    a wait that no kernel accounts for (Python, Keras bookkeeping) becomes a ``host`` part, and so does the
    step's tail after its last kernel where it is longer than that kernel group's own busy time: the step
    returns to Python then (Keras's loop, the callbacks), and a tail of tens of milliseconds after a layer's
    0.1 ms of kernels is the host's Python (or its wait for the interpreter's lock that input code in
    Python threads holds), not that layer's work. Covering
    the step matters for what-ifs: time outside every part would be kept constant, yet on a CPU
    training job it slows down with the CPU like the rest. Parts that ran concurrently (two kernels
    of different layers on two threads) are laid one after the other: the order is their data
    dependency, and the threads model accounts for parallelism.
    """
    ordered = sorted(children, key=lambda c: (c.start, c.end))
    tiled: list[tr.Operation] = []
    cursor = step.start

    def host(start: float, end: float) -> None:
        tiled.append(host_part(f"{sid}/host" + (f"-{len(tiled)}" if tiled else ""), start, end))

    for pos, child in enumerate(ordered):
        last = pos + 1 == len(ordered)
        if child.kind == "input" and child.start > cursor + HOST_GAP_S:
            host(cursor, child.start)
            cursor = child.start
        # The input wait keeps its measured end, and so does the last kernel group whose step runs on after it for
        # longer than its own span (its kernels' busy time): that tail is the host's (below).
        keeps_end = child.kind == "input" or (last and step.end - child.end > child.end - child.start)
        until = child.end if keeps_end else step.end if last else ordered[pos + 1].start
        child.start, child.end = cursor, max(cursor, min(until, step.end))
        cursor = child.end
        tiled.append(child)
    if step.end > cursor + HOST_GAP_S:
        host(cursor, step.end)
    return _chained(tiled)


def host_part(part_id: str, start: float, end: float) -> tr.Operation:
    """A stretch of the step in the host's Python (Keras's loop, callbacks, dispatch) that no kernel accounts for."""
    return tr.Operation(id=part_id, name=HOST_PART, kind="op", start=start, end=end,
                        attributes={"phase": "host", "placement": "host", RESOURCES_ATTRIBUTE: "cpu"})


def _chained(parts: list[tr.Operation]) -> list[tr.Operation]:
    """The parts, each one after the one before it."""
    for before, after in zip(parts, parts[1:], strict=False):
        after.parents = [before.id]
    return parts


def iteration_starts(ops: Sequence[OpEvent]) -> list[float]:
    """When each iteration of a step of several (``steps_per_execution``) began: the step's graph runs the train
    step in a while loop and evaluates its condition before each iteration (kernels under ``while/cond/_N/`` at
    the top of the graph), so each run of condition kernels after other kernels starts one. Empty or one start:
    a step of one iteration."""
    starts: list[float] = []
    in_condition = False
    for op in sorted(ops, key=lambda o: o.start):
        condition = _LOOP_CONDITION.match(op.node) is not None
        if condition and not in_condition:
            starts.append(op.start)
        in_condition = condition
    return starts


def tile_iterations(children: list[tr.Operation], ops: dict[str, list[OpEvent]], waits: Sequence[tuple[float, float]],
                     step: Step, sid: str, starts: Sequence[float]) -> list[tr.Operation]:
    """A step of several iterations laid out as the sum of its iterations: each iteration's parts are tiled as a
    step of their own (:func:`tile`: a group absorbs the dispatch before its next part, the host takes the
    iteration's tail), and each part lasts what it took over all the iterations, one after the other in the order
    the parts began, the host's time last. Tiled whole, a group's part would end within the first iteration and
    the later iterations would fall in the host's tail. ``ops``: each kernel part's kernels, by part id."""
    bounds = [step.start, *starts[1:], step.end]
    seconds: dict[str, float] = defaultdict(float)
    for low, high in zip(bounds, bounds[1:], strict=False):
        pieces = []
        for part in children:
            if part.kind == "input":
                inside = [(at, d) for at, d in waits if low <= at < high]
                if inside:
                    first = min(at for at, _ in inside)
                    pieces.append(part.model_copy(update={"start": first, "end": first + sum(d for _, d in inside)}))
                continue
            within = [op for op in ops.get(part.id, ()) if low <= op.start < high]
            if within:
                first, last = span(within)
                pieces.append(part.model_copy(update={"start": first, "end": last}))
        for piece in tile(pieces, Step(step.index, step.epoch, low, high), sid):
            seconds[HOST_PART if piece.name == HOST_PART else piece.id] += piece.end - piece.start
    laid: list[tr.Operation] = []
    cursor = step.start
    for part in sorted(children, key=lambda c: (c.start, c.end)):
        part.start, part.end = cursor, min(step.end, cursor + seconds.get(part.id, 0.0))
        cursor = part.end
        laid.append(part)
    if step.end > cursor + HOST_GAP_S:
        laid.append(host_part(f"{sid}/host", cursor, step.end))
    elif laid:
        laid[-1].end = step.end
    return _chained(laid)


def callback_parts(steps: Sequence[tr.Operation]) -> dict[str, str]:
    """Step id -> the id of its last host part (the step's tail, where the batch callbacks after crystalperf's begin
    run); steps without one are left out."""
    found: dict[str, str] = {}
    for step in steps:
        hosts = [c for c in step.children if c.name == HOST_PART]
        if hosts:
            found[step.id] = max(hosts, key=lambda c: (c.start, c.end)).id
    return found
