"""Small trace builders with numbers simple enough to check by hand."""

from __future__ import annotations

from crystalperf.core import trace as tr


def op(id: str, start: float, end: float, parents: list[str] | None = None, **kw) -> tr.Operation:
    return tr.Operation(id=id, name=id, start=start, end=end, parents=parents or [], **kw)


def task(id: str, start: float, end: float, **metrics: float) -> tr.Task:
    return tr.Task(id=id, start=start, end=end, metrics=dict(metrics))


def make_trace(operations: list[tr.Operation], start: float = 0.0, end: float | None = None,
               samples: tr.StackSamples | None = None, **env) -> tr.Trace:
    end = end if end is not None else max(o.end for o in operations)
    return tr.Trace(
        application=tr.Application(framework="spark", id="app", start=start, end=end),
        environment=tr.Environment(**env),
        operations=operations,
        samples=samples,
    )
