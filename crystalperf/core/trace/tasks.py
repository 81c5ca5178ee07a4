"""An operation's task records as they stream by: checked, folded into exact totals, and kept as a seeded
uniform sample when there are more than the limit (``crystalperf.core.trace.load``)."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from operator import add, itemgetter
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from crystalperf.core.errors import BadInputError
from crystalperf.core.trace import schema as tr

# A task record the Task model surely accepts as it is (see PlainTasks) holds these fields (in the order the
# model writes them; absent, one reads as the default below) and no other: a field the model gains is not among
# them, and a record holding it is left to the model.
TASK_NAMES = ("id", "index", "attempt", "executor", "host", "slot", "start", "end", "status", "metrics")
_TASK_FIELDS = frozenset(TASK_NAMES)
_NO_METRICS: dict[str, float] = {}
_TASK_DEFAULTS = (None, None, 0, None, None, None, None, None, "success", _NO_METRICS)
_TASK_STATUSES = frozenset(get_args(tr.Task.model_fields["status"].annotation))
_MAX_TIME, _MAX_INDEX, _MAX_QUANTITY = tr.MAX_TIME, tr.MAX_INDEX, tr.MAX_QUANTITY

class Reservoir:
    """An operation's tasks once there are more than the bound: each checked, folded into the totals, and offered
    to a seeded uniform sample (algorithm R) that always keeps the slowest task. A task record the Task model
    surely accepts as it is (:class:`PlainTasks`) is kept as decoded and validated only if it stays in the sample;
    any other is validated at once, which names what is wrong with it."""

    def __init__(self, where: str, seed: str, cap: int, path: Path) -> None:
        self.where = where
        self.cap = cap
        self.path = path
        self.rng = random.Random(zlib.crc32(seed.encode("utf-8", "surrogatepass")))
        self.bits = self.rng.getrandbits
        self.plain = PlainTasks()
        self.kept: list[tuple[int, Any]] = []  # (index, a plain task record or a tr.Task)
        self.seen = 0
        self._sums: dict[str, float] = {}
        # The running totals of the metrics named as the last task named them (most tasks name the same ones in
        # the same order): each task's values are added by one C loop, in the order the tasks came, as one by one.
        self.names: tuple[str, ...] = ()
        self.totals: list[float] = []
        self.failed = 0
        self.killed = 0
        self.slowest: tuple[float, int, Any] | None = None

    def add(self, raw: Any) -> None:
        index = self.seen
        item: Any
        plain = self.plain(raw)
        if plain is not None:
            item = raw
            start, end, status, metrics = plain[6:]
        else:
            item = _task(raw, f"{self.where}.tasks.{index}", self.path)
            metrics, status, start, end = item.metrics, item.status, item.start, item.end
        self.seen = index + 1
        names = tuple(metrics)
        if names != self.names:
            self._flush()
            self.names = names
            self.totals = [self._sums.get(name, 0.0) for name in names]
        self.totals = list(map(add, self.totals, metrics.values()))
        if status != "success":
            if status == "failed":
                self.failed += 1
            elif status == "killed":
                self.killed += 1
        busy = metrics.get(tr.METRIC_RUN_TIME)
        if busy is None:
            busy = end - start
        if self.slowest is None or busy > self.slowest[0]:
            self.slowest = (busy, index, item)
        if index < self.cap:
            self.kept.append((index, item))
        else:
            # rng.randrange(index + 1), as Random draws it, without its two Python calls
            seen = index + 1
            bits = seen.bit_length()
            j = self.bits(bits)
            while j >= seen:
                j = self.bits(bits)
            if j < self.cap:
                self.kept[j] = (index, item)

    def _flush(self) -> None:
        self._sums.update(zip(self.names, self.totals, strict=True))

    @property
    def sums(self) -> dict[str, float]:
        """Each metric's total over the tasks added."""
        self._flush()
        return self._sums

    def tasks(self, intern: Callable[[Any], Any]) -> list[tr.Task]:
        """The sample, in the order the tasks came, validated (``intern`` shares the metric names' strings)."""
        kept = self.kept
        if self.slowest is not None and all(t is not self.slowest[2] for _, t in kept):
            kept[self.rng.randrange(len(kept))] = (self.slowest[1], self.slowest[2])
        kept.sort(key=lambda pair: pair[0])
        return [t if isinstance(t, tr.Task) else _task(intern(t), f"{self.where}.tasks.{i}", self.path)
                for i, t in kept]


class PlainTasks:
    """Which decoded task records the Task model surely accepts as they are. Called with a record: its fields
    (as ``TASK_NAMES`` lists them, an absent one as the model reads it) where it is a JSON object of the model's
    fields alone, each of a type the model reads without a conversion (but from an integer to a float) and
    within its bounds, and its metrics' magnitudes add up to at most ``MAX_QUANTITY`` (so each is finite and
    within it; a bool counts as 0 or 1, as the model reads it). None for anything else, which the model then
    accepts after all or names what is wrong with."""

    def __init__(self) -> None:
        # The fields of the last record, and where its values are (None: all of them, in the model's order): the
        # records of a run share their keys' strings, so the next one's keys compare by identity.
        self.keys: tuple[str, ...] | None = None
        self.fields: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None

    def __call__(self, raw: Any) -> tuple[Any, ...] | None:
        if type(raw) is not dict:
            return None
        keys = tuple(raw)
        if keys != self.keys:
            if not _TASK_FIELDS.issuperset(keys):
                return None
            # where each field is in the record's values, else in the defaults after them
            self.fields = None if keys == TASK_NAMES else itemgetter(
                *(keys.index(name) if name in keys else len(keys) + i for i, name in enumerate(TASK_NAMES)))
        self.keys = keys
        values = tuple(raw.values()) if self.fields is None else self.fields(tuple(raw.values()) + _TASK_DEFAULTS)
        task_id, index, attempt, executor, host, slot, start, end, status, metrics = values
        # Types first where a comparison would not tell (a float for an int, a number for a string); start, end
        # and status are of a type the model reads where the comparisons below hold (a bool is a number to it).
        if type(task_id) is not str or type(attempt) is not int or type(metrics) is not dict \
                or (index is not None and type(index) is not int) or (slot is not None and type(slot) is not int) \
                or (executor is not None and type(executor) is not str) \
                or (host is not None and type(host) is not str):
            return None
        try:
            if not -_MAX_TIME <= start <= end <= _MAX_TIME or status not in _TASK_STATUSES \
                    or not 0 <= attempt <= _MAX_INDEX \
                    or (index is not None and not -_MAX_INDEX <= index <= _MAX_INDEX) \
                    or (slot is not None and not -_MAX_INDEX <= slot <= _MAX_INDEX) \
                    or (metrics and not sum(map(abs, metrics.values())) <= _MAX_QUANTITY):
                return None
        except (TypeError, OverflowError):  # not a number, an unhashable status, an integer too large for a float
            return None
        return values


def _task(raw: Any, where: str, path: Path) -> tr.Task:
    try:
        return tr.Task.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        inner = ".".join(str(p) for p in first.get("loc", ()))
        more = f" (+{exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise BadInputError(f"invalid trace at {where}{'.' + inner if inner else ''}: "
                            f"{first.get('msg', 'invalid')}{more}", path) from None
