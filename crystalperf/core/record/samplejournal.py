"""An append-only spool of a live :class:`~crystalperf.core.record.sampling.SampleTable` and per-task figures.

A process that must leave its samples on disk after every unit of work (a PySpark worker after each task:
it may be killed at any moment after it) appends one JSON line per flush with only what changed: the
frames, stacks and keys interned since the previous line (their ids continue), the rows touched with their
current counts, and the tasks whose figures changed with their current values. A flush costs what the
task added, not the size of the table. Lines are written whole with one ``write`` on an ``O_APPEND`` file;
a reader ignores a torn last line.

The file is compacted (rewritten atomically as one line holding everything: unique temporary file, fsync,
rename) when it grows past ``compact_factor`` times its last compacted size (plus ``compact_slack_bytes``),
and when the table merged its time buckets, so its size stays bounded by the table's own byte budget.

Format (``crystalperf-sample-journal`` version 1): the first line is the header ``{"format", "version",
"origin", "interval_s", "bucket_s"}``; every other line may hold ``frames``, ``stacks``, ``states``,
``keys`` (appended), ``rows`` (``[key, bucket, stack, count]``, the latest count of a row wins), ``held``
(``[key, stack, count, bucket]``: samples waiting for a row, the latest list wins), ``tasks``
(``[operation, task, {name: seconds}]``, the latest wins), ``dropped`` (the latest wins) and ``hook`` (what the
hook cost in the process so far, a trace ``HookProcess`` document; the latest wins).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crystalperf.core import atomic
from crystalperf.core import trace as tr
from crystalperf.core.record.sampletable import SampleTable

log = logging.getLogger(__name__)

FORMAT = "crystalperf-sample-journal"
VERSION = 1
# A file, or a line, larger than this is not read (a hostile or corrupt spool must not exhaust memory).
MAX_READ_BYTES = 256 * 1024 * 1024

TaskFigures = dict[tuple[str, str], dict[str, float]]


class SampleJournal:
    """Writes a table's changes, and per-task figures, to ``path`` (see the module's docstring)."""

    def __init__(self, path: Path, table: SampleTable, *, compact_factor: float = 4.0,
                 compact_slack_bytes: int = 1024 * 1024) -> None:
        self.path = Path(path)
        self.table = table
        self.compact_factor = compact_factor
        self.compact_slack_bytes = compact_slack_bytes
        self._written = (0, 0, 0)  # frames, stacks, keys already in the file
        self._bucket_s = table.bucket_s
        self._size = 0
        self._compacted_size = 0
        self._fd: int | None = None
        table.track_changes()

    def flush(self, tasks: TaskFigures, changed_tasks: set[tuple[str, str]], hook: tr.HookProcess | None = None) -> None:
        """Append what changed since the previous flush (compacting when due). ``tasks`` holds every task's
        figures; ``changed_tasks`` the ones to write now; ``hook`` what the hook cost so far."""
        if self._fd is None or self.table.bucket_s != self._bucket_s or (
                self._size > self.compact_factor * self._compacted_size + self.compact_slack_bytes):
            self.compact(tasks, hook)
            return
        with self.table._lock:
            frames, stacks, keys = self._written
            record: dict[str, Any] = {}
            held = self.table.held_rows()  # first: it may intern an [other] stack that this line must carry
            if len(self.table.frames) > frames:
                record["frames"] = [f.model_dump(mode="json", exclude_none=True) for f in self.table.frames[frames:]]
            if len(self.table.stacks) > stacks:
                record["stacks"] = [list(s) for s in self.table.stacks[stacks:]]
                record["states"] = self.table.states[stacks:]
            if len(self.table.keys) > keys:
                record["keys"] = [k.model_dump(mode="json", exclude_none=True) for k in self.table.keys[keys:]]
            touched = self.table.take_changes()
            if touched:
                record["rows"] = [[k, b, s, self.table.rows[(k, b, s)]] for k, b, s in sorted(touched)
                                  if (k, b, s) in self.table.rows]
            record["held"] = held
            record["dropped"] = self.table.dropped
            self._written = (len(self.table.frames), len(self.table.stacks), len(self.table.keys))
        if changed_tasks:
            record["tasks"] = [[op, task, tasks[(op, task)]] for op, task in sorted(changed_tasks)
                               if (op, task) in tasks]
        if hook is not None:
            record["hook"] = hook.model_dump(mode="json", exclude_none=True)
        self._append(_line(record))

    def compact(self, tasks: TaskFigures, hook: tr.HookProcess | None = None) -> None:
        """Rewrite the file atomically as its header and one line holding everything."""
        with self.table._lock:
            held = self.table.held_rows()
            samples = self.table.to_samples(include_held=False)
            self.table.take_changes()
            self._written = (len(samples.frames), len(samples.stacks), len(samples.keys))
            self._bucket_s = self.table.bucket_s
        header = {"format": FORMAT, "version": VERSION, "origin": samples.origin,
                  "interval_s": samples.interval_s, "bucket_s": samples.bucket_s}
        body = {
            "frames": [f.model_dump(mode="json", exclude_none=True) for f in samples.frames],
            "stacks": samples.stacks, "states": samples.states or [""] * len(samples.stacks),
            "keys": [k.model_dump(mode="json", exclude_none=True) for k in samples.keys],
            "rows": [list(r) for r in samples.rows()], "held": held, "dropped": samples.dropped,
            "tasks": [[op, task, figures] for (op, task), figures in sorted(tasks.items())],
        }
        if hook is not None:
            body["hook"] = hook.model_dump(mode="json", exclude_none=True)
        data = _line(header) + _line(body)
        self.close()
        atomic.write_bytes(self.path, data)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._size = self._compacted_size = len(data)

    def _append(self, data: bytes) -> None:
        assert self._fd is not None
        os.write(self._fd, data)
        self._size += len(data)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _line(record: dict[str, Any]) -> bytes:
    # names are valid UTF-8 already (the table cleans them); "replace" keeps a line writable whatever came
    return (json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8", "replace")


@dataclass
class JournalContents:
    samples: tr.StackSamples | None
    tasks: TaskFigures = field(default_factory=dict)
    torn: bool = False  # the last line was cut off (the writer was killed mid-line) and was left out
    hook: tr.HookProcess | None = None  # what the hook cost in the writing process, at its last flush


def read_journal(path: Path, max_bytes: int = MAX_READ_BYTES) -> JournalContents:
    """What a journal holds; ``ValueError`` naming the problem when it is not one (or not a readable one)."""
    path = Path(path)
    if path.stat().st_size > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes")
    lines = path.read_bytes().split(b"\n")
    try:
        header = json.loads(lines[0])
    except (ValueError, RecursionError):
        raise ValueError("no journal header") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} file")
    frames: list[Any] = []
    stacks: list[Any] = []
    states: list[Any] = []
    keys: list[Any] = []
    rows: dict[tuple[int, int, int], int] = {}
    held: list[Any] = []
    tasks: TaskFigures = {}
    dropped = 0
    torn = False
    hook: Any = None
    body = lines[1:]
    for number, raw in enumerate(body):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            if number >= len(body) - 2:  # the last line (before the final newline) was being written
                torn = True
                break
            raise ValueError(f"line {number + 2} is not JSON") from None
        if not isinstance(record, dict):
            raise ValueError(f"line {number + 2} is not a JSON object")
        frames.extend(record.get("frames") or [])
        stacks.extend(record.get("stacks") or [])
        states.extend(record.get("states") or [])
        keys.extend(record.get("keys") or [])
        for key, bucket, stack, count in record.get("rows") or []:
            rows[(int(key), int(bucket), int(stack))] = int(count)
        if "held" in record:
            held = list(record["held"] or [])
        for operation, task, figures in record.get("tasks") or []:
            tasks[(str(operation), str(task))] = {str(k): float(v) for k, v in dict(figures).items()}
        dropped = int(record.get("dropped") or dropped)
        hook = record.get("hook", hook)
    for key, stack, count, bucket in held:
        row = (int(key), int(bucket), int(stack))
        rows[row] = rows.get(row, 0) + int(count)
    cost = _hook(hook)
    items = sorted(rows.items())
    if not items:
        return JournalContents(None, tasks, torn, cost)
    samples = tr.StackSamples.model_validate({
        "origin": header["origin"], "interval_s": header["interval_s"], "bucket_s": header["bucket_s"],
        "frames": frames, "stacks": stacks, "states": states if any(states) else [], "keys": keys,
        "key": [k for (k, _, _), _ in items], "bucket": [b for (_, b, _), _ in items],
        "stack": [s for (_, _, s), _ in items], "count": [c for _, c in items], "dropped": dropped})
    return JournalContents(samples, tasks, torn, cost)


def _hook(document: Any) -> tr.HookProcess | None:
    """A journal's hook cost; None when there is none or it does not validate (the samples still count)."""
    if document is None:
        return None
    try:
        return tr.HookProcess.model_validate(document)
    except ValueError:
        log.warning("crystalperf: a journal's hook cost is not valid; left out")
        return None
