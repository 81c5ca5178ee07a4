"""Spark's event-log compression codecs, read as streams of bytes with bounded memory.

Spark compresses event logs with ``spark.eventLog.compression.codec`` (zstd by default since Spark 4),
each codec with the Java library's own stream framing:

- ``zstd``: zstd-jni's ``ZstdOutputStream``, standard zstd frames (``zstandard`` decodes them);
- ``lz4``: lz4-java's ``LZ4BlockOutputStream``: blocks of ``"LZ4Block"``, a token (method | level),
  the compressed and the original length and an xxhash32 checksum (little-endian ints), then the
  block (raw LZ4 or stored); an empty block ends the stream;
- ``snappy``: xerial snappy-java's ``SnappyOutputStream``: ``\\x82SNAPPY\\x00``, two big-endian ints
  (version, compatible version), then chunks of a big-endian length and a raw snappy block;
- ``lzf``: ning compress-lzf's ``LZFOutputStream``: chunks ``ZV`` + type (0 stored, 1 compressed) +
  big-endian lengths, each chunk at most 64 KiB (decoded here in pure Python: slow, but rare);
- gzip (not a Spark codec, but what people compress old logs with) and plain text.

The framings are decoded here block by block; the LZ4 and snappy blocks themselves are decompressed by
``cramjam``. A codec is recognised by its magic bytes first, by the file's suffix second. Data that cannot
be decoded raises :class:`DamagedLogError` only after every byte decoded before it was delivered, so the
events before the damage are still read.

Only regular files are opened (a FIFO named as a log would block forever), and the decompressed stream stops
with one clear error past ``CRYSTALPERF_MAX_EVENTLOG_BYTES`` or a compression ratio no real log has
(``crystalperf.core.limits``): a compression bomb ends in seconds, not after the disk's worth of zeros.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from crystalperf.core import limits
from crystalperf.core.errors import BadInputError

PLAIN, GZIP, ZSTD, LZ4, SNAPPY, LZF = "plain", "gzip", "zstd", "lz4", "snappy", "lzf"

_LZ4_MAGIC = b"LZ4Block"
_LZ4_HEADER = struct.Struct("<BiiI")  # token, compressed length, original length, checksum
_LZ4_RAW, _LZ4_COMPRESSED = 0x10, 0x20
_SNAPPY_MAGIC = b"\x82SNAPPY\x00"
_SNAPPY_HEADER_LEN = len(_SNAPPY_MAGIC) + 8  # + version, compatible version
_LZF_STORED, _LZF_COMPRESSED = 0, 1
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_READ = 1 << 16  # compressed bytes read at a time where the framing does not say how many

# Spark's file suffixes (``<app>.<codec>``; ``.inprogress`` and ``.compact`` come after it).
_SUFFIXES = {".zstd": ZSTD, ".zst": ZSTD, ".lz4": LZ4, ".snappy": SNAPPY, ".lzf": LZF, ".gz": GZIP}
_NOT_CODEC = (".inprogress", ".compact")


class DamagedLogError(BadInputError):
    """Compressed event-log data that cannot be decoded. ``truncated`` when the file just ends early,
    as the file Spark is still writing does."""

    def __init__(self, problem: str, path: str | Path, *, truncated: bool = False) -> None:
        super().__init__(problem, path)
        self.truncated = truncated


# --- which codec -----------------------------------------------------------------------------------------

def codec_of(path: Path) -> str:
    """The codec of an event-log file: from its first bytes, else from its name."""
    with _open_raw(path) as raw:
        head = raw.read(len(_LZ4_MAGIC))
    if head.startswith(b"\x1f\x8b"):
        return GZIP
    if head.startswith(_ZSTD_MAGIC):
        return ZSTD
    if head.startswith(_LZ4_MAGIC):
        return LZ4
    if head.startswith(_SNAPPY_MAGIC):
        return SNAPPY
    if head[:2] == b"ZV" and head[2:3] in (b"\x00", b"\x01"):
        return LZF
    return codec_by_name(path.name)


def codec_by_name(name: str) -> str:
    """The codec a Spark event-log file name says (``app-1.lz4.inprogress`` -> lz4); plain if none."""
    stem = Path(name)
    while stem.suffix in _NOT_CODEC:
        stem = stem.with_suffix("")
    return _SUFFIXES.get(stem.suffix, PLAIN)


def _open_raw(path: Path) -> IO[bytes]:
    return limits.open_regular(path, limits.MAX_EVENTLOG_BYTES, "Spark event log")


def open_text(path: Path) -> IO[str]:
    """The event-log file as text, decompressed on the fly whatever its codec."""
    codec = codec_of(path)
    if codec == PLAIN:
        return io.TextIOWrapper(_open_raw(path), encoding="utf-8", errors="replace")  # type: ignore[arg-type]
    return io.TextIOWrapper(open_binary(path, codec), encoding="utf-8", errors="replace")


def open_binary(path: Path, codec: str | None = None) -> io.BufferedReader:
    """The decompressed bytes of an event-log file, as a buffered stream."""
    codec = codec or codec_of(path)
    raw = _open_raw(path)
    if codec == PLAIN:
        return raw  # type: ignore[return-value]
    bound = limits.BoundedStream(os.fstat(raw.fileno()).st_size, path, limits.MAX_EVENTLOG_BYTES)
    blocks = bound.wrap(_DECODERS[codec](raw, path))
    return io.BufferedReader(_BlockStream(blocks, raw), buffer_size=_READ)


class _BlockStream(io.RawIOBase):
    """A readable stream over an iterator of decompressed blocks (at most one block held at a time)."""

    def __init__(self, blocks: Iterator[bytes], raw: IO[bytes]) -> None:
        self._blocks = blocks
        self._raw = raw
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        # The next block is decoded only once the last one is used up: damage raises after the good data.
        while not self._pending:
            block = next(self._blocks, None)
            if block is None:
                return 0
            self._pending = memoryview(block)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


def _read_exactly(raw: IO[bytes], n: int, path: Path, codec: str, offset: int) -> bytes:
    data = raw.read(n)
    if len(data) < n:
        raise DamagedLogError(f"{codec} data ends in the middle of a block at byte {offset + len(data)} "
                              "(the file is truncated)", path, truncated=True)
    return data


def _library(name: str, path: Path, codec: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise BadInputError(f"{codec}-compressed event log: pip install {name} (or 'crystalperf[spark]') "
                            "to read it", path) from None


# --- the decoders: compressed file -> decompressed blocks ---------------------------------------------------

def _zstd_blocks(raw: IO[bytes], path: Path) -> Iterator[bytes]:
    zstandard = _library("zstandard", path, ZSTD)
    # A decompression object, not ``stream_reader``: only it tells a finished frame from a file that was
    # cut off (stream_reader ends quietly either way). Input goes in small pieces, so memory stays bounded.
    decompressor = zstandard.ZstdDecompressor()
    frame = decompressor.decompressobj()
    offset, in_frame = 0, False
    while chunk := raw.read(_READ // 4):
        while chunk:
            try:
                out = frame.decompress(chunk)
            except zstandard.ZstdError as exc:
                raise DamagedLogError(f"damaged zstd data near byte {offset}: {exc}", path) from None
            in_frame = True
            if out:
                yield out
            if not frame.eof:
                break
            # A frame ended; the rest of the chunk (if any) is the next frame (logs can be concatenated).
            chunk, frame, in_frame = frame.unused_data, decompressor.decompressobj(), False
        offset = raw.tell()
    if in_frame:
        raise DamagedLogError(f"zstd data ends in the middle of a frame at byte {offset} (the file is truncated)",
                              path, truncated=True)


def _lz4_blocks(raw: IO[bytes], path: Path) -> Iterator[bytes]:
    lz4 = _library("cramjam", path, LZ4).lz4
    offset = 0
    while True:
        magic = raw.read(len(_LZ4_MAGIC))
        if not magic:
            # LZ4BlockOutputStream ends with an empty block; without it the writer never finished.
            raise DamagedLogError(f"lz4 data ends at byte {offset} without its end block (the file is truncated)",
                                  path, truncated=True)
        if magic != _LZ4_MAGIC:
            if _LZ4_MAGIC.startswith(magic):
                raise DamagedLogError(f"lz4 data ends inside a block header at byte {offset} (the file is "
                                      "truncated)", path, truncated=True)
            raise DamagedLogError(f"damaged lz4 data: no LZ4Block header at byte {offset}", path)
        header = _read_exactly(raw, _LZ4_HEADER.size, path, LZ4, offset + len(magic))
        token, compressed, original, _checksum = _LZ4_HEADER.unpack(header)
        method, block_size = token & 0xF0, 1 << (10 + (token & 0x0F))
        if method not in (_LZ4_RAW, _LZ4_COMPRESSED) or not 0 <= original <= block_size \
                or not 0 <= compressed <= max(block_size, original) + block_size // 255 + 16:
            raise DamagedLogError(f"damaged lz4 data: impossible block header at byte {offset}", path)
        offset += len(magic) + _LZ4_HEADER.size
        if original == 0:
            # The end block. Spark reads concatenated streams on, so do we.
            if raw.read(1):
                raw.seek(-1, io.SEEK_CUR)
                continue
            return
        data = _read_exactly(raw, compressed, path, LZ4, offset)
        if method == _LZ4_RAW:
            block = data
        else:
            try:
                block = bytes(lz4.decompress_block(data, output_len=original))
            except Exception as exc:  # cramjam raises its own DecompressionError
                raise DamagedLogError(f"damaged lz4 block at byte {offset}: {exc}", path) from None
        # The checksum (xxhash32) is not verified: no xxhash here; the length check catches most damage.
        if len(block) != original:
            raise DamagedLogError(f"damaged lz4 block at byte {offset}: {len(block)} bytes instead of {original}",
                                  path)
        offset += compressed
        yield block


def _snappy_blocks(raw: IO[bytes], path: Path) -> Iterator[bytes]:
    snappy = _library("cramjam", path, SNAPPY).snappy
    header = raw.read(_SNAPPY_HEADER_LEN)
    if len(header) < _SNAPPY_HEADER_LEN and _SNAPPY_MAGIC.startswith(header[:len(_SNAPPY_MAGIC)]):
        raise DamagedLogError("snappy data ends inside its header (the file is truncated)", path, truncated=True)
    if not header.startswith(_SNAPPY_MAGIC):
        raise DamagedLogError("damaged snappy data: no SnappyOutputStream header", path)
    offset = _SNAPPY_HEADER_LEN
    while length_bytes := raw.read(4):
        if len(length_bytes) < 4:
            raise DamagedLogError(f"snappy data ends at byte {offset + len(length_bytes)} inside a chunk length "
                                  "(the file is truncated)", path, truncated=True)
        if length_bytes == _SNAPPY_MAGIC[:4]:
            # Another SnappyOutputStream's header: concatenated streams, as SnappyInputStream reads them.
            _read_exactly(raw, _SNAPPY_HEADER_LEN - 4, path, SNAPPY, offset + 4)
            offset += _SNAPPY_HEADER_LEN
            continue
        (length,) = struct.unpack(">i", length_bytes)
        if length < 0 or length > 1 << 28:
            raise DamagedLogError(f"damaged snappy data: impossible chunk length {length} at byte {offset}", path)
        data = _read_exactly(raw, length, path, SNAPPY, offset + 4)
        try:
            block = bytes(snappy.decompress_raw(data))
        except Exception as exc:  # cramjam raises its own DecompressionError
            raise DamagedLogError(f"damaged snappy chunk at byte {offset}: {exc}", path) from None
        offset += 4 + length
        yield block


def _lzf_blocks(raw: IO[bytes], path: Path) -> Iterator[bytes]:
    offset = 0
    while header := raw.read(3):
        if len(header) < 3:
            raise DamagedLogError(f"lzf data ends inside a chunk header at byte {offset} (the file is truncated)",
                                  path, truncated=True)
        if header[:2] != b"ZV" or header[2] not in (_LZF_STORED, _LZF_COMPRESSED):
            raise DamagedLogError(f"damaged lzf data: no ZV chunk header at byte {offset}", path)
        if header[2] == _LZF_STORED:
            (length,) = struct.unpack(">H", _read_exactly(raw, 2, path, LZF, offset + 3))
            offset += 5
            yield _read_exactly(raw, length, path, LZF, offset)
            offset += length
            continue
        length, original = struct.unpack(">HH", _read_exactly(raw, 4, path, LZF, offset + 3))
        offset += 7
        data = _read_exactly(raw, length, path, LZF, offset)
        try:
            yield lzf_decompress(data, original)
        except ValueError as exc:
            raise DamagedLogError(f"damaged lzf chunk at byte {offset}: {exc}", path) from None
        offset += length


def _gzip_blocks(raw: IO[bytes], path: Path) -> Iterator[bytes]:
    stream = gzip.GzipFile(fileobj=raw, mode="rb")
    while True:
        try:
            block = stream.read(_READ)
        except EOFError:
            raise DamagedLogError("gzip data ends before its end marker (the file is truncated)", path,
                                  truncated=True) from None
        except (OSError, zlib.error) as exc:
            raise DamagedLogError(f"damaged gzip data: {exc}", path) from None
        if not block:
            return
        yield block


_DECODERS: dict[str, Callable[[IO[bytes], Path], Iterator[bytes]]] = {
    ZSTD: _zstd_blocks, LZ4: _lz4_blocks, SNAPPY: _snappy_blocks, LZF: _lzf_blocks, GZIP: _gzip_blocks,
}


# --- LZF ---------------------------------------------------------------------------------------------------

def lzf_decompress(data: bytes, size: int) -> bytes:
    """One LZF block (liblzf's format, as compress-lzf writes it) decompressed to ``size`` bytes.

    Each control byte below 32 starts a literal run of control + 1 bytes; any other is a back reference:
    length = control >> 5 (7 means: add the next byte), plus 2; distance = ((control & 31) << 8) + the
    next byte + 1. Raises ValueError on data that does not decode to exactly ``size`` bytes.
    """
    out = bytearray()
    i, n = 0, len(data)
    try:
        while i < n:
            control = data[i]
            i += 1
            if control < 32:
                run = control + 1
                if i + run > n:
                    raise ValueError("a literal run goes past the end of the block")
                out += data[i:i + run]
                i += run
                continue
            length = control >> 5
            if length == 7:
                length += data[i]
                i += 1
            distance = ((control & 0x1F) << 8) + data[i] + 1
            i += 1
            length += 2
            start = len(out) - distance
            if start < 0:
                raise ValueError("a back reference points before the start of the block")
            if distance >= length:
                out += out[start:start + length]
            else:  # the copy overlaps what it writes: it repeats the last `distance` bytes
                pattern = bytes(out[start:])
                out += (pattern * (length // distance + 1))[:length]
    except IndexError:
        raise ValueError("the block ends inside a back reference") from None
    if len(out) != size:
        raise ValueError(f"{len(out)} bytes instead of {size}")
    return bytes(out)
