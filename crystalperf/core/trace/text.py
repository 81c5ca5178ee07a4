"""The trace file's text as a window over a stream: decompressed and decoded in bounded pieces, scanned by the
standard library's C scanner one bounded value at a time (``crystalperf.core.trace.load`` walks the document's
structure over it)."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crystalperf.core import limits
from crystalperf.core.errors import BadInputError

_DECODER = json.JSONDecoder()
SCAN = _DECODER.scan_once  # type: ignore[attr-defined]
WHITESPACE = re.compile(r"[ \t\n\r]*")
# A run of plain JSON integers (no leading zeros, at most 18 digits: they fit an int64) separated by commas.
INT_RUN = re.compile(r"[ \t\n\r]*-?(?:0|[1-9]\d{0,17})(?:[ \t\n\r]*,[ \t\n\r]*-?(?:0|[1-9]\d{0,17}))*")
_NUMBER_TAIL = frozenset("0123456789.eE+-")
# A scanner failure this close to the end of the text read so far may be the text being cut, not the document.
_CUT_MARGIN = 16
TEXT_CHUNK = 1 << 20
LOOKAHEAD = 1 << 18

class JsonError(Exception):
    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


def text_chunks(path: Path) -> Iterator[str]:
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
        block = handle.read(TEXT_CHUNK)
        if not block:
            return
        read += len(block)
        if read > maximum:  # a file growing while read is cut at the limit, not read on forever
            raise BadInputError(f"trace file grew past the limit of {limits.size_text(maximum)} "
                                f"({limits.MAX_TRACE_BYTES.env}) while read", path)
        yield block


class Text:
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

    def error(self, message: str, position: int | None = None) -> JsonError:
        return JsonError(message, self.base + (self.pos if position is None else position))

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
            self.pos = WHITESPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def whole(self) -> Any:
        """The value at ``pos`` when it is whole within the next ``LOOKAHEAD`` characters, else None (with
        ``pos`` unchanged): most operations are small, and one C call decodes each."""
        if len(self.buf) - self.pos < LOOKAHEAD and not self.done:
            self.more(LOOKAHEAD)
        try:
            found, end = SCAN(self.buf, self.pos)
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
                found, end = SCAN(self.buf, self.pos)
            except StopIteration as stop:
                failed_at = self.base + stop.value
                if self.done or not self.more(max(TEXT_CHUNK, len(self.buf) - self.pos)):
                    raise JsonError("Expecting value", failed_at) from None
                continue
            except json.JSONDecodeError as exc:
                failed_at = self.base + exc.pos
                near_end = exc.pos >= len(self.buf) - _CUT_MARGIN or exc.msg.startswith("Unterminated string")
                if self.done or not near_end or not self.more(max(TEXT_CHUNK, len(self.buf) - self.pos)):
                    raise JsonError(exc.msg, failed_at) from None
                continue
            if not self.done and self._may_go_on(found, end):
                self.more(max(TEXT_CHUNK, len(self.buf) - self.pos))
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
        ``LOOKAHEAD`` characters, decoded by one C call (the scanner then shares the keys' strings); ``pos``
        after the last one. None (``pos`` unchanged) where there is none such: the caller reads one element.

        The text up to a '}' decodes as the elements of an array only when that '}' ends an element (a '}' in a
        string, or one that closes an object inside an element, leaves the array unclosed), and each element
        decodes as it would alone. Where the array ends before that '}', the elements up to its ']' are read."""
        if self.base + self.pos < self.no_run_before:
            return None
        if len(self.buf) - self.pos < LOOKAHEAD and not self.done:
            self.more(LOOKAHEAD)
        buf, pos = self.buf, self.pos
        limit = min(len(buf), pos + LOOKAHEAD)
        cut = buf.rfind("}", pos, limit) + 1
        for _ in range(3):  # the last '}' may close an object inside an element: an earlier one then
            if cut <= pos:
                break
            try:
                found, end = SCAN("[" + buf[pos:cut] + "]", 0)
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
