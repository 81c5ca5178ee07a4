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

import gzip
import math
import re
import zlib
from array import array
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from crystalperf.core import atomic, collector, limits
from crystalperf.core.errors import BadInputError, UnsupportedSchemaError
from crystalperf.core.trace import schema as tr
from crystalperf.core.trace import text as jsontext
from crystalperf.core.trace.tasks import Reservoir

_SAMPLE_COLUMNS = ("key", "bucket", "stack", "count")
class _Loader:
    def __init__(self, text: jsontext.Text, path: Path, cap: int) -> None:
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
                big = text.base + text.pos - start > jsontext.LOOKAHEAD
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
        reservoir: Reservoir | None = None
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

    def _reservoir(self, where: str, op: dict[str, Any]) -> Reservoir:
        seed = op.get("id") if isinstance(op.get("id"), str) else where
        return Reservoir(where, str(seed), self.cap, self.path)

    def tasks(self, where: str, op: dict[str, Any]) -> tuple[list[Any] | None, Reservoir | None]:
        """The operation's task list as decoded, or (None, the reservoir) once it passed the bound."""
        listed: list[Any] = []
        reservoir: Reservoir | None = None
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

    def _fold(self, op: dict[str, Any], reservoir: Reservoir) -> None:
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
        ``jsontext.TEXT_CHUNK`` characters, appended to ``column`` when they are all integers that fit it, decoded by
        one C call; ``pos`` at that ']' or ','. False (``pos`` unchanged) otherwise: :meth:`_int_run` then reads
        them one run at a time."""
        text = self.text
        if len(text.buf) - text.pos < jsontext.TEXT_CHUNK and not text.done:
            text.more(jsontext.TEXT_CHUNK)
        buf, pos = text.buf, text.pos
        limit = min(len(buf), pos + jsontext.TEXT_CHUNK)
        cut = buf.find("]", pos, limit)
        if cut < 0:
            cut = buf.rfind(",", pos, limit)  # the number before a ',' is whole
        if cut <= pos:
            return False
        try:
            found, end = jsontext.SCAN("[" + buf[pos:cut] + "]", 0)
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
            match = jsontext.INT_RUN.match(text.buf, text.pos)
            if match is None:
                if not text.done and len(text.buf) - text.pos < 64 and text.more():
                    continue
                return 0
            end = match.end()
            after = jsontext.WHITESPACE.match(text.buf, end).end()  # type: ignore[union-attr]
            whole = (after < len(text.buf) and text.buf[after] in ",]") or (after >= len(text.buf) and text.done)
            if not whole:
                # The last number may be cut by the end of the text read so far, or go on as a float (1.5, 2e3)
                # or a long integer: json decodes that one.
                end = text.buf.rfind(",", text.pos, end)
                if end < 0:
                    if after >= len(text.buf) and text.more(jsontext.TEXT_CHUNK):
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


_SPARK_EVENT = re.compile(rb'^\s*\{\s*"Event"\s*:\s*"(?:SparkListener|org\.apache\.spark\.)')


def not_json_problem(path: Path, line: int, column: int, message: str) -> str:
    """The one line for a file that is not one JSON document: a Spark event log (JSON lines, one event each) is
    named as one, with the command that reads it."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(512)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as handle:
                head = handle.read(512)
    except (OSError, EOFError, zlib.error):  # a damaged gzip member is OSError or zlib.error
        head = b""
    if _SPARK_EVENT.match(head):
        return (f"a Spark event log, not a crystalperf trace: read it with `crystalperf import spark-eventlog "
                f"{path} --analyze`")
    return f"not valid JSON (truncated or corrupt?) at line {line} column {column}: {message}"


def load_document(path: Path) -> Any:
    """The decoded document of a trace file, with the task records of each operation bounded (see the module);
    :class:`BadInputError` with one line on anything unreadable."""
    cap = limits.MAX_TASKS_PER_OPERATION.get()
    text = jsontext.Text(jsontext.text_chunks(path))
    try:
        return _Loader(text, path, cap).document()
    except jsontext.JsonError as exc:
        line, column = text.where(exc.position)
        raise BadInputError(not_json_problem(path, line, column, exc.message), path) from None
    except ValueError as exc:  # an integer of thousands of digits (Python's int conversion limit)
        raise BadInputError(f"not a crystalperf trace ({exc})", path) from None
    except RecursionError:
        raise BadInputError("not a crystalperf trace (JSON nested too deeply)", path) from None


def parse_trace(document: Any, path: str | Path | None = None) -> tr.Trace:
    """Validate a decoded JSON document as a Trace, with one-line errors."""
    if not isinstance(document, dict):
        raise UnsupportedSchemaError("not a crystalperf trace (the top level is not a JSON object)", path)
    version = document.get("schema_version")
    if version is None:
        raise UnsupportedSchemaError("not a crystalperf trace (no schema_version field)", path)
    if not isinstance(version, str) or tr.major_version(version) is None:
        raise UnsupportedSchemaError(
            f"not a crystalperf trace (schema_version {tr.shown_version(version)!r} is malformed)", path)
    if tr.major_version(version) != tr.SCHEMA_MAJOR:
        raise UnsupportedSchemaError(
            f"trace schema version {tr.shown_version(version)} is not supported; this crystalperf reads "
            f"{tr.SCHEMA_MAJOR}.x "
            f"(upgrade crystalperf to read newer traces)",
            path,
        )
    try:
        return tr.Trace.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "document"
        more = f" (+{exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise BadInputError(f"invalid trace at {where}: {first.get('msg', 'invalid')}{more}", path) from None
    except RecursionError:
        raise BadInputError("invalid trace: operations nested too deeply", path) from None


def load_trace(path: str | Path) -> tr.Trace:
    """Read a trace file (``.json`` or gzip-compressed, detected by content). An operation listing more than
    ``CRYSTALPERF_MAX_TASKS_PER_OPERATION`` tasks is loaded as a hook bounding its memory writes it (schema
    1.4): a seeded uniform sample of its tasks, ``task_count`` and the exact totals (``core.trace.load``)."""
    path = Path(path)
    if limits.is_directory(path):
        for name in tr.TRACE_FILENAMES:
            if limits.is_regular_file(path / name):
                path = path / name
                break
        else:
            raise BadInputError(f"no {' or '.join(tr.TRACE_FILENAMES)} in this directory", path)
    # Millions of small objects are made here and none is garbage: the cyclic collector's passes over them would
    # cost a third of the load of a big trace.
    with collector.paused():
        # Streamed: the text is never whole in memory, and an operation's task records are bounded
        # (CRYSTALPERF_MAX_TASKS_PER_OPERATION, docs/limits.md); below that bound, what json.loads gives.
        document = load_document(path)
        return parse_trace(document, path)


def save_trace(trace: tr.Trace, path: str | Path) -> Path:
    """Write a trace; a ``.gz`` suffix compresses it. The file appears whole or not at all (``core.atomic``)."""
    path = Path(path)
    data = trace.to_json().encode("utf-8")
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=6)
    return atomic.write_bytes(path, data)
