"""The sample table every sampler and every merge fills: (key, time bucket, stack) -> count, with frames, stacks
and keys interned once and referred to by id, bounded in bytes. Past the budget new stacks fold into an
``[other]`` stack, new tasks into their operation's ``[other]`` task and time buckets merge, so the count of
samples per operation stays exact and only their detail is lost (counted in ``dropped``). Names and file names are
made valid UTF-8 and bounded in length as they are added."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable

from crystalperf.core import trace as tr

log = logging.getLogger(__name__)

# What a stack, frame or key folds into once a table's byte budget is spent: the samples stay counted for
# their key (and their thread state), only their detail is gone.
OTHER = "[other]"
# Bounds on what one frame may hold, in characters: a generated name or path must not eat the budget alone.
MAX_NAME_CHARS = 500
MAX_FILE_CHARS = 1000
# Frames kept per stack (the innermost ones: the analysis attributes a sample by its top frames).
MAX_STACK_DEPTH = 256
# A live sampler's budget; an environment variable overrides it for every sampler of the process.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
MAX_BYTES_ENV = "CRYSTALPERF_SAMPLER_MAX_BYTES"
# Tables built while assembling or merging recorded samples hold what samplers already bounded.
ASSEMBLY_MAX_BYTES = 512 * 1024 * 1024
# Buckets a table keeps before a spent budget makes it merge neighbouring buckets (doubling their width).
_MIN_BUCKETS = 64

# Estimated CPython sizes (bytes) of what the table keeps per entry, measured with tracemalloc
# (bench/sampler_memory.py): the model object, the interning dict's entry and key, the list slot.
_FRAME_BYTES = 1300
_STACK_BYTES = 250
_STACK_FRAME_BYTES = 16  # a reference in the interning key's tuple and one in the stack's list
_KEY_BYTES = 900
_ROW_BYTES = 200


def clean_text(text: str, limit: int) -> str:
    """``text`` as valid UTF-8 text of at most ``limit`` characters.

    A file name the file system gave as undecodable bytes arrives surrogate-escaped; such a string cannot be
    written as UTF-8, so one of them in a sampled frame would make the whole trace unwritable. Its bytes
    are kept readable as backslash escapes (``\\xff``)."""
    if not text.isascii():
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a lone surrogate that no file system produced: escape it as such
            raw = text.encode("utf-8", "surrogatepass")
        text = raw.decode("utf-8", "backslashreplace")
    if len(text) > limit:
        text = text[: max(0, limit - 1)] + "\u2026"
    return text


def max_bytes_from_env(default: int = DEFAULT_MAX_BYTES) -> int:
    """The samplers' byte budget: ``CRYSTALPERF_SAMPLER_MAX_BYTES`` when it is a positive integer."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    if raw:
        log.warning("crystalperf: ignoring %s=%r (not a positive number of bytes)", MAX_BYTES_ENV, raw)
    return default


class SampleTable:
    """Interned frames/stacks/keys and aggregated counts: a StackSamples under construction.

    Memory is bounded in bytes (``max_bytes``, estimated as entries are interned) and in rows (``max_rows``).
    Once the budget is spent, nothing new is interned, but every sample is still counted for its key:

    - a new frame or stack folds into the ``[other]`` stack of the sample's thread state;
    - a new task of an operation folds into that operation's ``[other]`` task (one per operation and role);
    - a new row first merges neighbouring time buckets (the bucket width doubles) while the table spans
      more than 64 buckets, then goes to the key's row of the ``[other]`` stack in its bucket where that
      exists, else it is held per key and written at the key's latest bucket.

    ``dropped`` counts the samples that lost detail this way (their stack, task or time); the total per
    operation is exact.
    """

    def __init__(self, origin: float, bucket_s: float = 1.0, interval_s: float = 0.1, max_rows: int = 10**9,
                 *, max_bytes: int | None = ASSEMBLY_MAX_BYTES, max_depth: int = MAX_STACK_DEPTH) -> None:
        self.origin = origin
        self.bucket_s = bucket_s
        self.interval_s = interval_s
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.frames: list[tr.Frame] = []
        self._frame_ids: dict[tuple[str, str | None, int | None, str], int] = {}
        self.stacks: list[list[int]] = []
        self.states: list[str] = []  # per stack: the thread state it was sampled in ("" unknown)
        self._stack_ids: dict[tuple[tuple[int, ...], str], int] = {}
        self.keys: list[tr.SampleKey] = []
        self._key_ids: dict[tuple[str, str | None, str | None], int] = {}
        self.rows: dict[tuple[int, int, int], int] = {}
        self.dropped = 0
        self.bytes = 0  # the estimated size of what is interned and aggregated
        self._other_frame: int | None = None
        self._other_stacks: dict[str, int] = {}
        # (key, thread state) -> [samples that found no row, the latest bucket they were taken in]
        self._held: dict[tuple[int, str], list[int]] = {}
        self._max_bucket = 0
        self._changes: set[tuple[int, int, int]] | None = None  # rows touched since take_changes()
        self._lock = threading.RLock()

    @property
    def full(self) -> bool:
        """The byte budget is spent: nothing new is interned."""
        return self.max_bytes is not None and self.bytes >= self.max_bytes

    def _fits(self, cost: int) -> bool:
        return self.max_bytes is None or self.bytes + cost <= self.max_bytes

    def frame_id(self, name: str, file: str | None, line: int | None, language: str = "python",
                 module: str | None = None) -> int:
        """The frame's id; the ``[other]`` frame's once the budget is spent."""
        ident = (name, file, line, language)
        found = self._frame_ids.get(ident)
        if found is not None:
            return found
        with self._lock:
            name = clean_text(name, MAX_NAME_CHARS)
            file = clean_text(file, MAX_FILE_CHARS) if file is not None else None
            module = clean_text(module, MAX_NAME_CHARS) if module is not None else None
            cost = _FRAME_BYTES + len(name) + len(file or "") + len(module or "")
            if not self._fits(cost):
                return self.other_frame()
            return self._intern_frame(ident, name, file, line, language, module, cost)

    def _intern_frame(self, ident: tuple[str, str | None, int | None, str], name: str, file: str | None,
                      line: int | None, language: str, module: str | None, cost: int) -> int:
        found = self._frame_ids.get(ident)
        if found is None:
            found = self._frame_ids[ident] = len(self.frames)
            self.frames.append(tr.Frame(name=name, file=file, line=line, language=language,  # type: ignore[arg-type]
                                        module=module))
            self.bytes += cost
        return found

    @property
    def other_frame_id(self) -> int | None:
        """The ``[other]`` frame's id, None while the budget has folded nothing."""
        return self._other_frame

    def other_frame(self) -> int:
        """The frame that stands for the frames and stacks the budget left out (interned past the budget:
        it is one frame)."""
        if self._other_frame is None:
            self._other_frame = self._intern_frame((OTHER, None, None, "unknown"), OTHER, None, None, "unknown",
                                                   None, _FRAME_BYTES)
        return self._other_frame

    def other_stack(self, state: str = "") -> int:
        """The stack of the samples whose own stack the budget left out, one per thread state."""
        found = self._other_stacks.get(state)
        if found is None:
            with self._lock:
                found = self._other_stacks[state] = self._intern_stack((self.other_frame(),), state)
        return found

    def _intern_stack(self, frames: tuple[int, ...], state: str) -> int:
        found = self._stack_ids.get((frames, state))
        if found is None:
            found = self._stack_ids[(frames, state)] = len(self.stacks)
            self.stacks.append(list(frames))
            self.states.append(state)
            self.bytes += _STACK_BYTES + _STACK_FRAME_BYTES * len(frames)
        return found

    def stack_id(self, frame_ids: Iterable[int], state: str = "") -> int:
        """The id of a stack sampled in a thread state: the same frames in two states are two stacks. At most
        ``max_depth`` frames (the innermost) are kept; a new stack past the budget, or one holding a frame
        the budget left out, is the ``[other]`` stack of its state."""
        frames = tuple(frame_ids)[: self.max_depth]
        found = self._stack_ids.get((frames, state))
        if found is not None:
            return found
        with self._lock:
            if (self._other_frame is not None and self._other_frame in frames) or not self._fits(
                    _STACK_BYTES + _STACK_FRAME_BYTES * len(frames)):
                return self.other_stack(state)
            return self._intern_stack(frames, state)

    def key_id(self, key: tr.SampleKey) -> int:
        """The key's id; past the budget a new task's samples go to its operation's ``[other]`` task."""
        ident = (key.operation, key.task, key.thread)
        found = self._key_ids.get(ident)
        if found is not None:
            return found
        with self._lock:
            operation = clean_text(key.operation, MAX_NAME_CHARS)
            task = clean_text(key.task, MAX_NAME_CHARS) if key.task is not None else None
            thread = clean_text(key.thread, MAX_NAME_CHARS) if key.thread is not None else None
            cost = _KEY_BYTES + len(operation) + len(task or "") + len(thread or "")
            if not self._fits(cost) and task is not None and task != OTHER:
                # An operation's own samples are never folded into another's: only the task detail goes.
                return self.key_id(tr.SampleKey(operation=key.operation, task=OTHER, thread=key.thread))
            found = self._key_ids[ident] = len(self.keys)
            if (operation, task, thread) != ident:
                key = tr.SampleKey(operation=operation, task=task, thread=thread)
            self.keys.append(key)
            self.bytes += cost
            return found

    def add(self, key: tr.SampleKey, stack: int, when: float, count: int = 1) -> None:
        with self._lock:
            key_index = self.key_id(key)
            # a sample whose stack or task was folded by the interning above has lost detail already
            folded = stack in self._other_stacks.values() or (
                key.task is not None and key.task != OTHER and self.keys[key_index].task == OTHER)
            bucket = max(0, int((when - self.origin) / self.bucket_s))
            row = (key_index, bucket, stack)
            if row not in self.rows and not (len(self.rows) < self.max_rows and self._fits(_ROW_BYTES)):
                while self.max_bytes is not None and self._max_bucket >= _MIN_BUCKETS and not self._fits(_ROW_BYTES):
                    self._merge_buckets()
                    bucket = max(0, int((when - self.origin) / self.bucket_s))
                    row = (key_index, bucket, stack)
            if folded:
                self.dropped += count
            if row in self.rows:
                self.rows[row] += count
                if self._changes is not None:
                    self._changes.add(row)
            elif len(self.rows) < self.max_rows and self._fits(_ROW_BYTES):
                self._new_row(row, count)
            else:
                self._fold_row(key_index, bucket, self.state_of(stack), count, counted=folded)

    def _fold_row(self, key_index: int, bucket: int, state: str, count: int, *, counted: bool) -> None:
        """Count samples that have no row left for them: in the key's ``[other]`` row of the bucket, else held
        per key and state until :meth:`to_samples`."""
        if not counted:
            self.dropped += count
        other = (key_index, bucket, self.other_stack(state))
        if other in self.rows:
            self.rows[other] += count
            if self._changes is not None:
                self._changes.add(other)
            return
        held = self._held.get((key_index, state))
        if held is None:
            self._held[(key_index, state)] = [count, bucket]
        else:
            held[0] += count
            held[1] = max(held[1], bucket)

    def _new_row(self, row: tuple[int, int, int], count: int) -> None:
        self.rows[row] = count
        if self._changes is not None:
            self._changes.add(row)
        self.bytes += _ROW_BYTES
        self._max_bucket = max(self._max_bucket, row[1])

    def state_of(self, stack: int) -> str:
        return self.states[stack] if 0 <= stack < len(self.states) else ""

    def _merge_buckets(self) -> None:
        """Halve the time resolution: neighbouring buckets' rows merge, which frees rows of a long run."""
        merged: dict[tuple[int, int, int], int] = {}
        for (key, bucket, stack), count in self.rows.items():
            row = (key, bucket // 2, stack)
            merged[row] = merged.get(row, 0) + count
        self.bytes -= _ROW_BYTES * (len(self.rows) - len(merged))
        self.rows = merged
        if self._changes is not None:  # every row moved: whoever follows the changes rewrites them all
            self._changes = set(merged)
        self.bucket_s *= 2
        self._max_bucket //= 2
        for held in self._held.values():
            held[1] //= 2

    def track_changes(self) -> None:
        """Start recording which rows change (for an incremental writer: :meth:`take_changes`)."""
        with self._lock:
            if self._changes is None:
                self._changes = set()

    def take_changes(self) -> set[tuple[int, int, int]]:
        """The rows added or counted since the previous call (empty unless :meth:`track_changes` was called)."""
        with self._lock:
            changes, self._changes = self._changes or set(), set() if self._changes is not None else None
            return changes

    def held_rows(self) -> list[list[int]]:
        """Samples that found no row of their own: ``[key, stack, count, bucket]``, written at that bucket."""
        with self._lock:
            return [[key, self.other_stack(state), count, bucket]
                    for (key, state), (count, bucket) in self._held.items()]

    def to_samples(self, *, include_held: bool = True) -> tr.StackSamples:
        with self._lock:
            rows = dict(self.rows)
            for key, stack, count, bucket in self.held_rows() if include_held else []:
                row = (key, bucket, stack)
                rows[row] = rows.get(row, 0) + count
            items = sorted(rows.items())
            return tr.StackSamples(
                interval_s=self.interval_s, bucket_s=self.bucket_s, origin=self.origin,
                frames=list(self.frames), stacks=[list(s) for s in self.stacks], keys=list(self.keys),
                states=list(self.states) if any(self.states) else [],
                key=[k for (k, _, _), _ in items], bucket=[b for (_, b, _), _ in items],
                stack=[s for (_, _, s), _ in items], count=[c for _, c in items], dropped=self.dropped,
            )


def folded_warning(samples: tr.StackSamples | None, what: str = "stack samples") -> str | None:
    """The trace warning for samples whose detail a memory bound left out (None when there are none)."""
    if samples is None or not samples.dropped:
        return None
    return (f"{samples.dropped} of {samples.total} {what} lost their stack, task or time detail to the sampler's "
            f"memory bound (counted under '{OTHER}'; totals per operation are exact)")
