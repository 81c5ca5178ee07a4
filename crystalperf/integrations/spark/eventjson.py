"""One line of a Spark event log as the event object the reader folds into its state.

Most of a big log is two kinds of line: ``SparkListenerTaskStart`` (read for nothing but its count) and
``SparkListenerTaskEnd``, ~5 KB each in Spark 4, most of it the task's ``Accumulables`` the reader never uses.
``json.loads`` builds every object of such a line (about 45 us a line on a 2-core VM: 45 s for a log of a
million tasks). Where msgspec is installed (the ``spark`` extra installs it) these lines are decoded into
only the fields the reader takes, the rest validated and skipped unbuilt; a line of any other kind, and a
line msgspec will not decode the same way (``NaN``, a number out of range, a field of another type), is read
by ``json.loads`` as before. Either way the reader sees the same values for the fields it reads.

Spark's ``JsonProtocol`` writes ``"Event"`` as the first field of every event: the kind is read from there; a
line that starts otherwise is read whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from typing import Any

Event = dict[str, Any]

TASK_END = "SparkListenerTaskEnd"
_KIND = re.compile(r'\s*\{\s*"Event"\s*:\s*"([^"\\]*)"')
# Top-level times the reader's clock reads from any event (EventLogState.observe).
_TIMES = ("Timestamp", "Submission Time", "Completion Time")
# What the reader takes from a task's end (reader._task_end).
_TASK_INFO = ("Task ID", "Index", "Attempt", "Executor ID", "Host", "Launch Time", "Finish Time", "Failed",
              "Killed")


def whole(line: str) -> Event | None:
    """The line as an event object, or None for a line that is not one (not JSON, or JSON of another shape)."""
    line = line.strip()
    if not line:
        return None
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, a number of thousands of digits, nesting too deep
        return None
    return event if isinstance(event, dict) else None


def _partial_decoders() -> tuple[Callable[[str], Event], Callable[[str], Event], tuple[type[Exception], ...]] | None:
    """(task end, any other event's head, the errors they raise), or None without msgspec."""
    try:
        import msgspec
    except ImportError:
        return None

    def fields(names: Collection[str]) -> list[tuple[str, Any, Any]]:
        return [(f"f{i}", Any, msgspec.field(name=name, default=None)) for i, name in enumerate(names)]

    task_info = msgspec.defstruct("TaskInfo", fields(_TASK_INFO))
    task_end = msgspec.defstruct("TaskEnd", [
        *fields(("Event", "Stage ID", "Task Metrics", *_TIMES)),
        ("info", task_info | None, msgspec.field(name="Task Info", default=None))])
    head = msgspec.defstruct("Head", fields(("Event", *_TIMES)))
    decode_end = msgspec.json.Decoder(task_end).decode
    decode_head = msgspec.json.Decoder(head).decode
    end_names = ("Event", "Stage ID", "Task Metrics", *_TIMES)
    head_names = ("Event", *_TIMES)

    def end(line: str) -> Event:
        decoded = decode_end(line)
        event = {name: getattr(decoded, f"f{i}") for i, name in enumerate(end_names)}
        info = decoded.info
        if info is not None:
            event["Task Info"] = {name: getattr(info, f"f{i}") for i, name in enumerate(_TASK_INFO)}
        return event

    def other(line: str) -> Event:
        decoded = decode_head(line)
        return {name: getattr(decoded, f"f{i}") for i, name in enumerate(head_names)}

    return end, other, (msgspec.DecodeError, msgspec.ValidationError)


_PARTIAL = _partial_decoders()


def decoder(handled: Collection[str]) -> Callable[[str], Event | None]:
    """The line decoder for a reader that handles the event kinds ``handled``: task ends and kinds it does not
    handle decoded partly (where msgspec is installed), every other line whole."""
    if _PARTIAL is None:
        return whole
    end, other, errors = _PARTIAL
    handles_task_end = TASK_END in handled

    def decode(line: str) -> Event | None:
        found = _KIND.match(line)
        if found is not None:
            kind = found.group(1)
            try:
                if kind == TASK_END and handles_task_end:
                    return end(line)
                if kind not in handled:
                    return other(line)
            except errors:
                pass  # read whole: json names it bad, or reads what msgspec will not
        return whole(line)

    return decode
