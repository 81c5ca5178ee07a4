"""The protobuf wire format, for the few messages the TensorFlow integration reads without protobuf: TSL's
``xplane.proto`` (the profile) and XLA's ``hlo.proto`` (what a compiled kernel was lowered from)."""

from __future__ import annotations

import struct
from collections.abc import Iterator

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
_SIGN = 1 << 63
DOUBLE = struct.Struct("<d")


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def signed(value: int) -> int:
    """An int64 field: negative numbers are sent as their 64-bit two's complement."""
    return value - (1 << 64) if value >= _SIGN else value


def fields(buf: bytes, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value, end of value) for each field in buf[pos:end]; for a
    length-delimited field the value is where its bytes start, for fixed-size ones where they start."""
    while pos < end:
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = varint(buf, pos)
            yield number, wire, value, pos
        elif wire == LENGTH:
            size, start = varint(buf, pos)
            pos = start + size
            yield number, wire, start, pos
        elif wire == FIXED64:
            yield number, wire, pos, pos + 8
            pos += 8
        elif wire == FIXED32:
            yield number, wire, pos, pos + 4
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} at byte {pos}")


def text(buf: bytes, start: int, end: int) -> str:
    return buf[start:end].decode("utf-8", errors="replace")


def metadata_name(buf: bytes, pos: int, end: int) -> tuple[int, str]:
    """A map entry ``int64 -> X{Event,Stat}Metadata``: (key, the metadata's name)."""
    key, name = 0, ""
    for number, _, at, stop in fields(buf, pos, end):
        if number == 1:
            key = signed(at)
        elif number == 2:
            for inner, _, start, inner_stop in fields(buf, at, stop):
                if inner == 2:
                    name = text(buf, start, inner_stop)
    return key, name


def stat_names(buf: bytes, pos: int, end: int) -> dict[int, str]:
    """An XPlane's stat metadata (field 5): id -> name."""
    return dict(metadata_name(buf, at, stop) for number, _, at, stop in fields(buf, pos, end) if number == 5)
