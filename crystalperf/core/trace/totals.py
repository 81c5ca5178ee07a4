"""Figures of an operation's tasks, whether the hook recorded every task or a uniform sample of them with
``task_count`` and the exact totals (schema 1.4): how many ran, how long they took together, a metric's sum."""

from __future__ import annotations

from crystalperf.core.trace import schema as tr


def _metric(metrics: dict[str, float], name: str) -> float:
    value = metrics.get(name, 0.0)
    return value if value > 0 else 0.0


def task_count(op: tr.Operation) -> int:
    """Tasks the operation ran: ``task_count`` when the hook kept only a sample of them, else those listed."""
    return max(op.task_count or 0, len(op.tasks))


def task_scale(op: tr.Operation) -> float:
    """How many of the operation's tasks each recorded task stands for (1 when all were recorded)."""
    return task_count(op) / len(op.tasks) if op.tasks else 1.0


def metric_total(op: tr.Operation, name: str) -> float:
    """A metric summed over the operation's tasks (negative values as 0): the hook's exact total when it kept
    only a sample of the tasks, else the recorded tasks' sum scaled to all of them; the operation's own
    figure when it has no tasks."""
    if not op.tasks:
        return _metric(op.metrics, name)
    scale = task_scale(op)
    if scale > 1.0 and name in op.metrics:
        return _metric(op.metrics, name)
    return sum(_metric(t.metrics, name) for t in op.tasks) * scale


def task_seconds(op: tr.Operation) -> float:
    """Wall time of all the operation's tasks together (the sample's, scaled), or its span without tasks."""
    tasks = op.tasks
    if not tasks:
        return op.duration
    # t.end - t.start, not the duration property: asked of every operation often
    return sum([t.end - t.start for t in tasks]) * task_scale(op)
