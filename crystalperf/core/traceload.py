"""Loading a trace file without holding it whole: the JSON is parsed as it is decompressed, and an operation's
task records are bounded while they stream by.

A trace that lists every task of a 1,000,000-task job is ~550 MB of JSON; ``json.loads`` of it and a pydantic
object per task took ~4.5 GB. Here the document is walked structurally (the top level, ``operations`` and
their ``children``, each operation's ``tasks``, the sample table's ``keys`` and columns) and every other value
is decoded by the standard library's C scanner, one bounded value at a time, so the text held at once is a
few megabytes. What is built is the document ``json.loads`` would give, with one difference: an operation
listing more than ``CRYSTALPERF_MAX_TASKS_PER_OPERATION`` tasks keeps a seeded uniform sample of them (always
with its slowest task), every task validated and folded into exact totals on the way: ``task_count``, the
metric sums in ``metrics``, ``failed_tasks``/``killed_tasks`` and ``tasks_sampled`` in ``attributes`` (what
a hook bounding its memory writes, schema 1.4, which the whole analysis reads). Its samples are then keyed by
the operation alone (the analysis reads no task from a key) and sample rows that became the same row are
added up. A trace below the bound loads as ``json.loads`` + :func:`crystalperf.core.trace.parse_trace`
would load it.
"""

from __future__ import annotations

import codecs
import json
import math
import random
import re
import zlib
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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

    def more(self, at_least: int = 1) -> bool:
        """Read at least ``at_least`` more characters (fewer at the end); False when none came."""
        if self.pos:
            dropped = self.buf[: self.pos]
            newlines = dropped.count("\n")
            if newlines:
                self.lines += newlines
                self.last_line_start = self.base + dropped.rindex("\n") + 1
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
            char = self.skip()
            self.pos += 1
            if char == "]":
                return
            if char != ",":
                self.pos -= 1
                raise self.error("Expecting ',' delimiter")
            if self.skip() == "]":  # a trailing comma
                raise self.error("Expecting value")

    def opens(self, char: str) -> bool:
        """Whether the value at ``pos`` starts with ``char``; consumes it if so."""
        if self.skip() == char:
            self.pos += 1
            return True
        return False


class _Reservoir:
    """An operation's tasks once there are more than the bound: each validated, folded into the totals, and
    offered to a seeded uniform sample (algorithm R) that always keeps the slowest task."""

    def __init__(self, where: str, seed: str, cap: int, path: Path) -> None:
        self.where = where
        self.cap = cap
        self.path = path
        self.rng = random.Random(zlib.crc32(seed.encode("utf-8", "surrogatepass")))
        self.kept: list[tuple[int, tr.Task]] = []
        self.seen = 0
        self.sums: dict[str, float] = {}
        self.failed = 0
        self.killed = 0
        self.slowest: tuple[float, int, tr.Task] | None = None

    def add(self, raw: Any) -> None:
        index = self.seen
        task = _task(raw, f"{self.where}.tasks.{index}", self.path)
        self.seen += 1
        sums = self.sums
        for name, value in task.metrics.items():
            sums[name] = sums.get(name, 0.0) + value
        if task.status == "failed":
            self.failed += 1
        elif task.status == "killed":
            self.killed += 1
        busy = task.metrics.get(tr.METRIC_RUN_TIME, task.duration)
        if self.slowest is None or busy > self.slowest[0]:
            self.slowest = (busy, index, task)
        if len(self.kept) < self.cap:
            self.kept.append((index, task))
        else:
            j = self.rng.randrange(self.seen)
            if j < self.cap:
                self.kept[j] = (index, task)

    def tasks(self) -> list[tr.Task]:
        kept = self.kept
        if self.slowest is not None and all(t is not self.slowest[2] for _, t in kept):
            kept[self.rng.randrange(len(kept))] = (self.slowest[1], self.slowest[2])
        kept.sort(key=lambda pair: pair[0])
        return [t for _, t in kept]


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
        for _ in text.elements():
            # Deeper than the schema allows: decoded as it is, for the validation to refuse with its own words.
            if depth > tr.MAX_DEPTH + 1 or text.skip() != "{":
                found.append(text.value())
                continue
            op = text.whole()
            if isinstance(op, dict):
                found.append(self.bounded(op, f"{where}.{len(found)}", depth))
            else:
                text.pos += 1
                found.append(self.operation(f"{where}.{len(found)}", depth))
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
        text = self.text
        listed: list[Any] = []
        reservoir: _Reservoir | None = None
        names = self.names
        for _ in text.elements():
            raw = text.value()
            if isinstance(raw, dict):
                metrics = raw.get("metrics")
                if isinstance(metrics, dict):
                    raw["metrics"] = {names.setdefault(k, k): v for k, v in metrics.items()}
            if reservoir is not None:
                reservoir.add(raw)
                continue
            listed.append(raw)
            if len(listed) > self.cap:
                reservoir = self._reservoir(where, op)
                for earlier in listed:
                    reservoir.add(earlier)
                listed = []
        return (None, reservoir) if reservoir is not None else (listed, None)

    def _fold(self, op: dict[str, Any], reservoir: _Reservoir) -> None:
        """What a hook bounding its memory writes (schema 1.4): a sample of the tasks, how many ran, their
        totals. Fields of the wrong type are left as they are, for the validation to name."""
        op["tasks"] = reservoir.tasks()
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
                for _ in text.elements():
                    table.add(text.value())
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
            if not isinstance(found, array) or not self._int_run(found):
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
    remap = table.remap
    if any(k < 0 or k >= len(remap) for k in (min(key_col, default=0), max(key_col, default=0))):
        return  # a row of a key that does not exist: the validation names it
    merged_keys = set(table.merged.values())
    index = list(range(len(table.keys)))  # one int object per key, shared by the rows
    rows: dict[tuple[int, int, int], int] = {}
    buckets: dict[int, int] = {}
    new_key: list[int] = []
    new_bucket: list[int] = []
    new_stack: list[int] = []
    new_count: list[int] = []
    for k, b, s, c in zip(key_col, bucket_col, stack_col, count_col, strict=True):
        k = remap[k]
        if k in merged_keys:
            row = rows.get((k, b, s))
            if row is not None and 0 < c and 0 < new_count[row] <= tr.MAX_INDEX - c:
                new_count[row] += c
                continue
            rows.setdefault((k, b, s), len(new_key))
        new_key.append(index[k])
        new_bucket.append(buckets.setdefault(b, b))
        new_stack.append(s)
        new_count.append(c)
    samples["key"], samples["bucket"], samples["stack"], samples["count"] = new_key, new_bucket, new_stack, new_count


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

