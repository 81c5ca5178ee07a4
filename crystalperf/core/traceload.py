"""Loading a trace file without holding it whole: the JSON is parsed as it is decompressed, and an operation's
task records are bounded while they stream by.

A trace that lists every task of a 1,000,000-task job is ~550 MB of JSON; ``json.loads`` of it and a pydantic
object per task took ~4.5 GB. Here the document is walked structurally (the top level, ``operations`` and
their ``children``, each operation's ``tasks``, the sample table's ``keys`` and columns) and every other value
is decoded by the standard library's C scanner, one bounded value at a time, so the text held at once is a
few megabytes. What is built is the document ``json.loads`` would give, with one difference: an operation
listing more than ``CRYSTALPERF_MAX_TASKS_PER_OPERATION`` tasks keeps a seeded uniform sample of them (always
with its slowest task), every task checked and folded into exact totals on the way: ``task_count``, the
metric sums in ``metrics``, ``failed_tasks``/``killed_tasks`` and ``tasks_sampled`` in ``attributes`` (what
a hook bounding its memory writes, schema 1.4, which the whole analysis reads). A task record the model surely
accepts as it is (the types and bounds it checks, checked by hand) is validated only if it stays in the sample;
any other is validated at once, so a bad task anywhere is named as before. Its samples are then keyed by the
operation alone (the analysis reads no task from a key) and sample rows that became the same row are added
up. Runs of task records and sample keys, and of sample columns' integers, are decoded by one C call each.
A trace below the bound loads as ``json.loads`` + :func:`crystalperf.core.trace.parse_trace` would load it.
"""

from __future__ import annotations

import codecs
import json
import math
import random
import re
import zlib
from array import array
from collections.abc import Callable, Iterator
from operator import add, itemgetter
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from crystalperf.core import limits
from crystalperf.core import trace as tr
from crystalperf.core.errors import BadInputError

_DECODER = json.JSONDecoder()
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]
_WHITESPACE = re.compile(r"[ \t\n\r]*")
# A run of plain JSON integers (no leading zeros, at most 18 digits: they fit an int64) separated by commas.
_INT_RUN = re.compile(r"[ \t\n\r]*-?(?:0|[1-9]\d{0,17})(?:[ \t\n\r]*,[ \t\n\r]*-?(?:0|[1-9]\d{0,17}))*")
_NUMBER_TAIL = frozenset("0123456789.eE+-")
# A scanner failure this close to the end of the text read so far may be the text being cut, not the document.
_CUT_MARGIN = 16
_TEXT_CHUNK = 1 << 20
_LOOKAHEAD = 1 << 18
_SAMPLE_COLUMNS = ("key", "bucket", "stack", "count")
# A task record the Task model surely accepts as it is (see _PlainTasks) holds these fields (in the order the
# model writes them; absent, one reads as the default below) and no other: a field the model gains is not among
# them, and a record holding it is left to the model.
_TASK_NAMES = ("id", "index", "attempt", "executor", "host", "slot", "start", "end", "status", "metrics")
_TASK_FIELDS = frozenset(_TASK_NAMES)
_NO_METRICS: dict[str, float] = {}
_TASK_DEFAULTS = (None, None, 0, None, None, None, None, None, "success", _NO_METRICS)
_TASK_STATUSES = frozenset(get_args(tr.Task.model_fields["status"].annotation))
_MAX_TIME, _MAX_INDEX, _MAX_QUANTITY = tr.MAX_TIME, tr.MAX_INDEX, tr.MAX_QUANTITY


class _JsonError(Exception):
    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


def _text_chunks(path: Path) -> Iterator[str]:
    """The trace's text, decompressed and decoded in bounded pieces, within the size limits."""
    with limits.open_regular(path, limits.MAX_TRACE_BYTES, "trace file") as handle:
        try:
            size = limits.file_size(handle)
            head = handle.read(2)
            blocks: Iterator[bytes]
            if head == b"\x1f\x8b":
                handle.seek(0)
                blocks = limits.gunzip_stream(handle, size, path)
            else:
                maximum = limits.MAX_DECOMPRESSED_BYTES.get()
                if size > maximum:
                    raise BadInputError(f"trace of {limits.size_text(size)} is larger than the limit of "
                                        f"{limits.size_text(maximum)} ({limits.MAX_DECOMPRESSED_BYTES.env})", path)
                blocks = _plain_blocks(handle, head, limits.MAX_TRACE_BYTES.get(), path)
            decoder = codecs.getincrementaldecoder("utf-8")()
            for block in blocks:
                yield decoder.decode(block)
            yield decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise BadInputError("not a crystalperf trace (not UTF-8 text)", path) from None
        except OSError as exc:
            raise BadInputError(f"cannot read: {exc.strerror or exc}", path) from None


def _plain_blocks(handle: Any, head: bytes, maximum: int, path: Path) -> Iterator[bytes]:
    read = len(head)
    yield head
    while True:
        block = handle.read(_TEXT_CHUNK)
        if not block:
            return
        read += len(block)
        if read > maximum:  # a file growing while read is cut at the limit, not read on forever
            raise BadInputError(f"trace file grew past the limit of {limits.size_text(maximum)} "
                                f"({limits.MAX_TRACE_BYTES.env}) while read", path)
        yield block


class _Text:
    """A window on the streamed text: what is parsed is at ``pos``; consumed text is dropped on refills."""

    def __init__(self, chunks: Iterator[str]) -> None:
        self.chunks = chunks
        self.buf = ""
        self.pos = 0
        self.base = 0  # offset of buf[0] in the whole text
        self.lines = 0  # newlines in the text before buf
        self.last_line_start = 0  # offset in the whole text where the line of buf[0] starts
        self.done = False
        self.no_run_before = 0  # offset in the whole text before which run() does not try again

    def more(self, at_least: int = 1) -> bool:
        """Read at least ``at_least`` more characters (fewer at the end); False when none came."""
        if self.pos:
            last = self.buf.rfind("\n", 0, self.pos)  # most traces are one line: a count only where there are more
            if last >= 0:
                self.lines += self.buf.count("\n", 0, self.pos)
                self.last_line_start = self.base + last + 1
            self.base += self.pos
            self.buf = self.buf[self.pos:]
            self.pos = 0
        pieces = [self.buf]
        got = 0
        while got < at_least and not self.done:
            piece = next(self.chunks, None)
            if piece is None:
                self.done = True
                break
            pieces.append(piece)
            got += len(piece)
        self.buf = "".join(pieces)
        return got > 0

    def error(self, message: str, position: int | None = None) -> _JsonError:
        return _JsonError(message, self.base + (self.pos if position is None else position))

    def where(self, position: int) -> tuple[int, int]:
        """Line and column (1-based, as ``json`` gives them) of an offset in the whole text."""
        local = position - self.base
        head = self.buf[: max(0, local)]
        newlines = head.count("\n")
        if newlines:
            return self.lines + newlines + 1, local - head.rindex("\n")
        return self.lines + 1, position - self.last_line_start + 1

    def skip(self) -> str:
        """Skip whitespace; the next character, '' at the end of the text."""
        if self.pos < len(self.buf) and self.buf[self.pos] not in " \t\n\r":
            return self.buf[self.pos]
        while True:
            self.pos = _WHITESPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def whole(self) -> Any:
        """The value at ``pos`` when it is whole within the next ``_LOOKAHEAD`` characters, else None (with
        ``pos`` unchanged): most operations are small, and one C call decodes each."""
        if len(self.buf) - self.pos < _LOOKAHEAD and not self.done:
            self.more(_LOOKAHEAD)
        try:
            found, end = _SCAN(self.buf, self.pos)
        except (StopIteration, ValueError, RecursionError):
            return None  # cut by the window, or broken: read it piece by piece, which names what is wrong
        self.pos = end
        return found

    def expect(self, char: str, message: str) -> None:
        if self.skip() != char:
            raise self.error(message)
        self.pos += 1

    def value(self) -> Any:
        """The JSON value at ``pos`` (after whitespace), decoded by the C scanner; the text window grows until
        the value is whole in it."""
        if not self.skip():
            raise self.error("Expecting value")
        while True:
            try:
                found, end = _SCAN(self.buf, self.pos)
            except StopIteration as stop:
                failed_at = self.base + stop.value
                if self.done or not self.more(max(_TEXT_CHUNK, len(self.buf) - self.pos)):
                    raise _JsonError("Expecting value", failed_at) from None
                continue
            except json.JSONDecodeError as exc:
                failed_at = self.base + exc.pos
                near_end = exc.pos >= len(self.buf) - _CUT_MARGIN or exc.msg.startswith("Unterminated string")
                if self.done or not near_end or not self.more(max(_TEXT_CHUNK, len(self.buf) - self.pos)):
                    raise _JsonError(exc.msg, failed_at) from None
                continue
            if not self.done and self._may_go_on(found, end):
                self.more(max(_TEXT_CHUNK, len(self.buf) - self.pos))
                continue
            self.pos = end
            return found

    def _may_go_on(self, found: Any, end: int) -> bool:
        """Whether a value that ends where the text read so far ends might be longer (a number cut short)."""
        if not isinstance(found, (int, float)):
            return False
        run = end
        while run < len(self.buf) and self.buf[run] in _NUMBER_TAIL:
            run += 1
        return run >= len(self.buf)

    def key(self) -> str:
        if self.skip() != '"':
            raise self.error("Expecting property name enclosed in double quotes")
        name = self.value()
        self.expect(":", "Expecting ':' delimiter")
        return name  # type: ignore[no-any-return]

    def members(self) -> Iterator[str]:
        """The keys of the object at ``pos`` ('{' already consumed); the caller reads each key's value."""
        if self.skip() == "}":
            self.pos += 1
            return
        while True:
            yield self.key()
            char = self.skip()
            self.pos += 1
            if char == "}":
                return
            if char != ",":
                self.pos -= 1
                raise self.error("Expecting ',' delimiter")

    def elements(self) -> Iterator[None]:
        """One step per element of the array at ``pos`` ('[' already consumed); the caller reads each."""
        if self.skip() == "]":
            self.pos += 1
            return
        while True:
            yield None
            if not self._array_goes_on():
                return

    def _array_goes_on(self) -> bool:
        """After an array element: consumes ',' (True) or the closing ']' (False)."""
        char = self.skip()
        self.pos += 1
        if char == "]":
            return False
        if char != ",":
            self.pos -= 1
            raise self.error("Expecting ',' delimiter")
        if self.skip() == "]":  # a trailing comma
            raise self.error("Expecting value")
        return True

    def items(self) -> Iterator[Any]:
        """The elements of the array at ``pos`` ('[' already consumed), decoded: runs of objects by :meth:`run`,
        any other element (or where a run cannot be decoded) one at a time, by :meth:`value`."""
        if self.skip() == "]":
            self.pos += 1
            return
        while True:
            run = self.run()
            if run is None:
                yield self.value()
            else:
                yield from run
            if not self._array_goes_on():
                return

    def run(self) -> list[Any] | None:
        """The elements from ``pos`` (an element's start) up to an element that ends with '}' within the next
        ``_LOOKAHEAD`` characters, decoded by one C call (the scanner then shares the keys' strings); ``pos``
        after the last one. None (``pos`` unchanged) where there is none such: the caller reads one element.

        The text up to a '}' decodes as the elements of an array only when that '}' ends an element (a '}' in a
        string, or one that closes an object inside an element, leaves the array unclosed), and each element
        decodes as it would alone. Where the array ends before that '}', the elements up to its ']' are read."""
        if self.base + self.pos < self.no_run_before:
            return None
        if len(self.buf) - self.pos < _LOOKAHEAD and not self.done:
            self.more(_LOOKAHEAD)
        buf, pos = self.buf, self.pos
        limit = min(len(buf), pos + _LOOKAHEAD)
        cut = buf.rfind("}", pos, limit) + 1
        for _ in range(3):  # the last '}' may close an object inside an element: an earlier one then
            if cut <= pos:
                break
            try:
                found, end = _SCAN("[" + buf[pos:cut] + "]", 0)
            except (StopIteration, ValueError, RecursionError):
                cut = buf.rfind("}", pos, cut - 1) + 1
                continue
            if not isinstance(found, list) or not found:
                break
            # end - 2: where the array's own ']' is, when it came first
            self.pos = cut if end == cut - pos + 2 else pos + end - 2
            return found
        self.no_run_before = self.base + limit  # one element at a time up to there, not a failed try per element
        return None

    def opens(self, char: str) -> bool:
        """Whether the value at ``pos`` starts with ``char``; consumes it if so."""
        if self.skip() == char:
            self.pos += 1
            return True
        return False


class _Reservoir:
    """An operation's tasks once there are more than the bound: each checked, folded into the totals, and offered
    to a seeded uniform sample (algorithm R) that always keeps the slowest task. A task record the Task model
    surely accepts as it is (:class:`_PlainTasks`) is kept as decoded and validated only if it stays in the sample;
    any other is validated at once, which names what is wrong with it."""

    def __init__(self, where: str, seed: str, cap: int, path: Path) -> None:
        self.where = where
        self.cap = cap
        self.path = path
        self.rng = random.Random(zlib.crc32(seed.encode("utf-8", "surrogatepass")))
        self.bits = self.rng.getrandbits
        self.plain = _PlainTasks()
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


class _PlainTasks:
    """Which decoded task records the Task model surely accepts as they are. Called with a record: its fields
    (as ``_TASK_NAMES`` lists them, an absent one as the model reads it) where it is a JSON object of the model's
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
            self.fields = None if keys == _TASK_NAMES else itemgetter(
                *(keys.index(name) if name in keys else len(keys) + i for i, name in enumerate(_TASK_NAMES)))
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


class _Loader:
    def __init__(self, text: _Text, path: Path, cap: int) -> None:
        self.text = text
        self.path = path
        self.cap = cap
        self.names: dict[str, str] = {}  # metric names, one string each
        self.metric_keys: tuple[str, ...] = ()  # the metric names of the last task interned, as read ...
        self.metric_names: tuple[str, ...] = ()  # ... and as interned
        self.sampled_ids: set[str] = set()  # operations whose tasks were sampled here
        self.operations_read = False

    # -- the document ----------------------------------------------------------------------------------

    def document(self) -> Any:
        text = self.text
        if text.skip() == "\ufeff":
            raise text.error("Unexpected UTF-8 BOM (decode using utf-8-sig)")
        if not text.opens("{"):
            found = text.value()
            self._end()
            return found
        document: dict[str, Any] = {}
        for name in text.members():
            if name == "operations" and text.opens("["):
                document[name] = self.operations("operations", 1)
                self.operations_read = True
            elif name == "samples" and text.opens("{"):
                document[name] = self.samples()
            else:
                document[name] = text.value()
        self._end()
        samples = document.get("samples")
        if isinstance(samples, dict):
            _finish_samples(samples, self.sampled_ids)
        return document

    def _end(self) -> None:
        if self.text.skip():
            raise self.text.error("Extra data")

    # -- operations --------------------------------------------------------------------------------------

    def operations(self, where: str, depth: int) -> list[Any]:
        text = self.text
        found: list[Any] = []
        big = False  # whether the operation before was too big to decode whole: a try would scan a megabyte
        for _ in text.elements():
            # Deeper than the schema allows: decoded as it is, for the validation to refuse with its own words.
            if depth > tr.MAX_DEPTH + 1 or text.skip() != "{":
                found.append(text.value())
                continue
            op = None if big else text.whole()
            if isinstance(op, dict):
                found.append(self.bounded(op, f"{where}.{len(found)}", depth))
            else:
                start = text.base + text.pos
                text.pos += 1
                found.append(self.operation(f"{where}.{len(found)}", depth))
                big = text.base + text.pos - start > _LOOKAHEAD
        return found

    def bounded(self, op: dict[str, Any], where: str, depth: int) -> dict[str, Any]:
        """An operation decoded whole: its task lists bounded as :meth:`operation` bounds them."""
        children = op.get("children")
        if isinstance(children, list) and depth <= tr.MAX_DEPTH:
            for i, child in enumerate(children):
                if isinstance(child, dict):
                    self.bounded(child, f"{where}.children.{i}", depth + 1)
        tasks = op.get("tasks")
        if isinstance(tasks, list) and len(tasks) > self.cap:
            reservoir = self._reservoir(where, op)
            for raw in tasks:
                reservoir.add(raw)
            self._fold(op, reservoir)
        return op

    def operation(self, where: str, depth: int) -> dict[str, Any]:
        text = self.text
        op: dict[str, Any] = {}
        reservoir: _Reservoir | None = None
        for name in text.members():
            if name == "children" and text.opens("["):
                op[name] = self.operations(f"{where}.children", depth + 1)
            elif name == "tasks" and text.opens("["):
                op[name], reservoir = self.tasks(where, op)
            else:
                op[name] = text.value()
        if reservoir is not None and op.get("tasks") is None:
            self._fold(op, reservoir)
        return op

    def _reservoir(self, where: str, op: dict[str, Any]) -> _Reservoir:
        seed = op.get("id") if isinstance(op.get("id"), str) else where
        return _Reservoir(where, str(seed), self.cap, self.path)

    def tasks(self, where: str, op: dict[str, Any]) -> tuple[list[Any] | None, _Reservoir | None]:
        """The operation's task list as decoded, or (None, the reservoir) once it passed the bound."""
        listed: list[Any] = []
        reservoir: _Reservoir | None = None
        for raw in self.text.items():
            if reservoir is not None:
                reservoir.add(raw)
                continue
            listed.append(raw)
            if len(listed) > self.cap:
                reservoir = self._reservoir(where, op)
                for earlier in listed:
                    reservoir.add(earlier)
                listed = []
        if reservoir is not None:
            return None, reservoir
        return [self.intern(raw) for raw in listed], None

    def intern(self, raw: Any) -> Any:
        """A task record kept, its metric names made the strings the other tasks' use (thousands of tasks held
        would otherwise hold thousands of copies of each name)."""
        if isinstance(raw, dict):
            metrics = raw.get("metrics")
            if isinstance(metrics, dict):
                keys = tuple(metrics)
                if keys != self.metric_keys:
                    names = self.names
                    self.metric_keys = keys
                    self.metric_names = tuple(names.setdefault(k, k) for k in keys)
                raw["metrics"] = dict(zip(self.metric_names, metrics.values(), strict=True))
        return raw

    def _fold(self, op: dict[str, Any], reservoir: _Reservoir) -> None:
        """What a hook bounding its memory writes (schema 1.4): a sample of the tasks, how many ran, their
        totals. Fields of the wrong type are left as they are, for the validation to name."""
        op["tasks"] = reservoir.tasks(self.intern)
        listed = reservoir.seen
        declared = op.get("task_count")
        # A hook's own sample already larger than the bound: its totals stand, the sample is thinned.
        presampled = type(declared) is int and declared > listed
        if declared is None or type(declared) is int:
            op["task_count"] = max(declared or 0, listed)
        metrics = op.setdefault("metrics", {})
        if isinstance(metrics, dict):
            scale = declared / listed if presampled else 1.0  # type: ignore[operator]
            for name, total in reservoir.sums.items():
                if presampled and name in metrics:
                    continue
                metrics[name] = total * scale if math.isfinite(total * scale) else total
        attributes = op.setdefault("attributes", {})
        if isinstance(attributes, dict):
            attributes.setdefault(
                "tasks_sampled", f"{len(op['tasks'])} of {op.get('task_count', listed)} "
                f"({limits.MAX_TASKS_PER_OPERATION.env}, when the trace was loaded)")
            if reservoir.failed:
                attributes.setdefault("failed_tasks", str(reservoir.failed))
            if reservoir.killed:
                attributes.setdefault("killed_tasks", str(reservoir.killed))
        if isinstance(op.get("id"), str):
            self.sampled_ids.add(op["id"])

    # -- samples -------------------------------------------------------------------------------------------

    def samples(self) -> dict[str, Any]:
        text = self.text
        samples: dict[str, Any] = {}
        for name in text.members():
            if name in _SAMPLE_COLUMNS and text.opens("["):
                samples[name] = self.column()
            elif name == "keys" and text.opens("["):
                # Known sampled operations: their keys are merged as they come (a million keys of a million
                # tasks would be a million dicts). Otherwise (samples before operations) at the end.
                table = _Keys(self.sampled_ids if self.operations_read else None)
                for key in text.items():
                    table.add(key)
                samples[name] = table
            else:
                samples[name] = text.value()
        return samples

    def column(self) -> array[int] | list[Any]:
        """A column of sample rows: plain integers go into an array (8 bytes each, no object per row), read in
        runs; any other value makes it a list, decoded as json decodes it."""
        text = self.text
        found: array[int] | list[Any] = array("q")
        if text.skip() == "]":
            text.pos += 1
            return found
        while True:
            if not isinstance(found, array) or not (self._int_chunk(found) or self._int_run(found)):
                if isinstance(found, array):
                    found = found.tolist()
                found.append(text.value())
            char = text.skip()
            if char == "]":
                text.pos += 1
                return found
            if char != ",":
                raise text.error("Expecting ',' delimiter")
            text.pos += 1
            if text.skip() == "]":
                raise text.error("Expecting value")

    def _int_chunk(self, column: array[int]) -> bool:
        """The elements from ``pos`` (an element's start) up to the column's ']' or the last ',' within the next
        ``_TEXT_CHUNK`` characters, appended to ``column`` when they are all integers that fit it, decoded by
        one C call; ``pos`` at that ']' or ','. False (``pos`` unchanged) otherwise: :meth:`_int_run` then reads
        them one run at a time."""
        text = self.text
        if len(text.buf) - text.pos < _TEXT_CHUNK and not text.done:
            text.more(_TEXT_CHUNK)
        buf, pos = text.buf, text.pos
        limit = min(len(buf), pos + _TEXT_CHUNK)
        cut = buf.find("]", pos, limit)
        if cut < 0:
            cut = buf.rfind(",", pos, limit)  # the number before a ',' is whole
        if cut <= pos:
            return False
        try:
            found, end = _SCAN("[" + buf[pos:cut] + "]", 0)
            if end != cut - pos + 2 or not found or not {int}.issuperset(map(type, found)):
                return False
            column.extend(array("q", found))  # built apart first: an integer too large for it changes nothing
        except (StopIteration, ValueError, RecursionError, OverflowError):
            return False
        text.pos = cut
        return True

    def _int_run(self, column: array[int]) -> int:
        """Plain integers from ``pos`` (an element's start) appended to ``column``, as many as are surely whole
        in the text read so far; ``pos`` after the last one. How many (0: the element is no plain integer)."""
        text = self.text
        while True:
            match = _INT_RUN.match(text.buf, text.pos)
            if match is None:
                if not text.done and len(text.buf) - text.pos < 64 and text.more():
                    continue
                return 0
            end = match.end()
            after = _WHITESPACE.match(text.buf, end).end()  # type: ignore[union-attr]
            whole = (after < len(text.buf) and text.buf[after] in ",]") or (after >= len(text.buf) and text.done)
            if not whole:
                # The last number may be cut by the end of the text read so far, or go on as a float (1.5, 2e3)
                # or a long integer: json decodes that one.
                end = text.buf.rfind(",", text.pos, end)
                if end < 0:
                    if after >= len(text.buf) and text.more(_TEXT_CHUNK):
                        continue
                    return 0
            run = text.buf[text.pos:end].split(",")
            column.extend(map(int, run))
            text.pos = end
            return len(run)


class _Keys:
    """The sample keys as they are read. A key of an operation whose tasks were sampled loses its task and
    becomes the one key of that operation (and thread role): ``remap`` gives each key read its new index."""

    def __init__(self, sampled: set[str] | None) -> None:
        self.sampled = sampled
        self.keys: list[Any] = []
        self.remap = array("q")
        self.merged: dict[tuple[Any, ...], int] = {}

    def add(self, key: Any) -> None:
        if self.sampled is None or not (isinstance(key, dict) and "task" in key
                                        and isinstance(key.get("operation"), str)
                                        and key["operation"] in self.sampled):
            self.remap.append(len(self.keys))
            self.keys.append(key)
            return
        if len(key) == 2:  # the operation and the task alone: the common case, without a sort
            operation = key["operation"]
            identity: tuple[Any, ...] = (("operation", operation),)
            index = self.merged.get(identity)
            if index is None:
                index = self.merged[identity] = len(self.keys)
                self.keys.append({"operation": operation})
            self.remap.append(index)
            return
        key = {k: v for k, v in key.items() if k != "task"}
        try:
            identity = tuple(sorted(key.items()))
            index = self.merged.setdefault(identity, len(self.keys))
        except TypeError:  # an unhashable extra field: kept apart
            index = len(self.keys)
        if index == len(self.keys):
            self.keys.append(key)
        self.remap.append(index)

    def changed(self) -> bool:
        return bool(self.merged)

    def rekeyed(self, sampled: set[str]) -> _Keys:
        """These keys as they would have been read knowing the sampled operations."""
        again = _Keys(sampled)
        for key in self.keys:
            again.add(key)
        return again


def _finish_samples(samples: dict[str, Any], sampled: set[str]) -> None:
    """The sample table as the models read it: keys of sampled operations merged (rows that then count the
    same key, bucket and stack become one row), columns as lists."""
    table = samples.get("keys")
    if isinstance(table, _Keys):
        if sampled and table.sampled is None:
            table = table.rekeyed(sampled)
        samples["keys"] = table.keys
        columns = [samples.get(name) for name in _SAMPLE_COLUMNS]
        if table.changed() and all(isinstance(c, array) for c in columns) \
                and len({len(c) for c in columns}) == 1:  # type: ignore[arg-type]
            _merge_rows(samples, table, *columns)  # type: ignore[arg-type]
    for name in _SAMPLE_COLUMNS:
        if isinstance(samples.get(name), array):
            samples[name] = samples[name].tolist()


def _merge_rows(samples: dict[str, Any], table: _Keys, key_col: array[int], bucket_col: array[int],
                stack_col: array[int], count_col: array[int]) -> None:
    """Each row under its key's new index, in order; a row of a merged key that counts the same bucket and stack
    as an earlier one is added to it while the count stays valid (any other row stays a row of its own)."""
    remap = table.remap
    merged_keys = set(table.merged.values())
    try:
        columns = _merged_columns(table, merged_keys, key_col, bucket_col, stack_col, count_col)
    except ImportError:  # numpy (in the base install) missing: row by row
        columns = None
    if columns == ():
        return
    if columns is not None:
        samples["key"], samples["bucket"], samples["stack"], samples["count"] = columns
        return
    if any(k < 0 or k >= len(remap) for k in (min(key_col, default=0), max(key_col, default=0))):
        return  # a row of a key that does not exist: the validation names it
    limit = tr.MAX_INDEX
    index = list(range(len(table.keys)))  # one int object per key, shared by the rows
    buckets: dict[int, int] = {}
    rows: dict[tuple[int, int, int], int] = {}  # (key, bucket, stack) of a merged key: the row that counts it
    get = rows.get
    new_key: list[int] = []
    new_bucket: list[int] = []
    new_stack: list[int] = []
    new_count: list[int] = []
    add_key, add_bucket, add_stack, add_count = new_key.append, new_bucket.append, new_stack.append, new_count.append
    same_bucket = buckets.setdefault
    for k, b, s, c in zip(map(remap.__getitem__, key_col), bucket_col, stack_col, count_col, strict=True):
        if k in merged_keys:
            row = (k, b, s)
            at = get(row)
            if at is None:
                rows[row] = len(new_count)
            elif 0 < c and 0 < new_count[at] <= limit - c:
                new_count[at] += c
                continue
        add_key(index[k])
        add_bucket(same_bucket(b, b))
        add_stack(s)
        add_count(c)
    samples["key"], samples["bucket"], samples["stack"], samples["count"] = new_key, new_bucket, new_stack, new_count


def _merged_columns(table: _Keys, merged_keys: set[int], key_col: array[int], bucket_col: array[int],
                    stack_col: array[int], count_col: array[int]) -> tuple[list[int], ...] | None:
    """What :func:`_merge_rows` makes of the columns, by whole-column operations, where every row of a merged key
    adds up (counts of at least 1, their total within ``MAX_INDEX``) and the rows' (key, stack, bucket) fit an
    int64 code; None otherwise, for the row by row rule; () where a row's key does not exist (left as it is, for
    the validation to name)."""
    import numpy as np

    if not len(key_col):
        return None
    read = np.frombuffer(key_col, dtype=np.int64)
    if int(read.min()) < 0 or int(read.max()) >= len(table.remap):
        return ()
    key = np.frombuffer(table.remap, dtype=np.int64)[read]
    bucket = np.frombuffer(bucket_col, dtype=np.int64)
    stack = np.frombuffer(stack_col, dtype=np.int64)
    count = np.frombuffer(count_col, dtype=np.int64)
    is_merged = np.zeros(len(table.keys), dtype=bool)
    is_merged[sorted(merged_keys)] = True
    merged = is_merged[key]
    everything = bool(merged.all())
    rows = np.arange(len(key)) if everything else np.flatnonzero(merged)
    if not len(rows):
        return None
    m_key, m_bucket, m_stack, m_count = (key, bucket, stack, count) if everything else \
        (key[rows], bucket[rows], stack[rows], count[rows])
    if int(m_count.min()) < 1 or float(m_count.sum(dtype=np.float64)) > tr.MAX_INDEX / 2:
        return None  # a count that does not add up, or totals near the bound: the row by row rule decides
    if int(m_bucket.min()) < 0 or int(m_stack.min()) < 0:
        return None
    stacks, buckets = int(m_stack.max()) + 1, int(m_bucket.max()) + 1
    if len(table.keys) * stacks * buckets >= 2**63:
        return None
    # Rows of one (key, stack, bucket) are one group: sorted by code (stably, so a group's first row is its
    # earliest), each group's count added up (exact: the total is below 2**53) and kept where it first came.
    code = m_key * stacks
    code += m_stack
    code *= buckets
    code += m_bucket
    order = np.argsort(code, kind="stable")
    code = code[order]
    starts = np.empty(len(code), dtype=bool)
    starts[0] = True
    np.not_equal(code[1:], code[:-1], out=starts[1:])
    del code
    group_starts = np.flatnonzero(starts)
    del starts
    totals = np.add.reduceat(m_count[order], group_starts)
    first = order[group_starts]
    del order, group_starts
    apart = np.flatnonzero(~merged)
    at = np.concatenate((rows[first], apart))  # where each row of the result first came
    order = np.argsort(at, kind="stable")
    new_key = np.concatenate((m_key[first], key[apart]))[order]
    new_bucket = np.concatenate((m_bucket[first], bucket[apart]))[order]
    new_stack = np.concatenate((m_stack[first], stack[apart]))[order]
    new_count = np.concatenate((totals, count[apart]))[order]
    index = list(range(len(table.keys)))  # one int object per key, and per bucket, shared by the rows
    bucket_values, bucket_index = np.unique(new_bucket, return_inverse=True)
    return (list(map(index.__getitem__, new_key.tolist())),
            list(map(bucket_values.tolist().__getitem__, bucket_index.ravel().tolist())),
            new_stack.tolist(), new_count.tolist())


def load_document(path: Path) -> Any:
    """The decoded document of a trace file, with the task records of each operation bounded (see the module);
    :class:`BadInputError` with one line on anything unreadable."""
    cap = limits.MAX_TASKS_PER_OPERATION.get()
    text = _Text(_text_chunks(path))
    try:
        return _Loader(text, path, cap).document()
    except _JsonError as exc:
        line, column = text.where(exc.position)
        raise BadInputError(
            f"not valid JSON (truncated or corrupt?) at line {line} column {column}: {exc.message}", path
        ) from None
    except ValueError as exc:  # an integer of thousands of digits (Python's int conversion limit)
        raise BadInputError(f"not a crystalperf trace ({exc})", path) from None
    except RecursionError:
        raise BadInputError("not a crystalperf trace (JSON nested too deeply)", path) from None

