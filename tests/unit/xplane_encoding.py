"""TSL's ``xplane.proto`` written by hand, for profiles the tests build event by event: the fields the reader
decodes (XSpace.planes 1; XPlane id 1, name 2, lines 3, event_metadata 4, stat_metadata 5; XLine name 2,
timestamp_ns 3, events 4; XEvent metadata_id 1, offset_ps 2, duration_ps 3, stats 4; XStat metadata_id 1,
str_value 5, ref_value 7)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def stat(metadata_id: int, value: int | str) -> bytes:
    """An event's stat: an int is a reference to a stat metadata (``ref_value``), a str a ``str_value``."""
    return field(4, field(1, metadata_id) + (field(7, value) if isinstance(value, int) else field(5, value)))


def line(name: str, events: Iterable[tuple[int, int, int, Sequence[bytes]]], timestamp_ns: int = 0) -> bytes:
    """A line of (event metadata id, offset ps, duration ps, encoded stats) events."""
    return field(2, name) + field(3, timestamp_ns) + b"".join(
        field(4, field(1, metadata) + field(2, offset_ps) + field(3, duration_ps) + b"".join(stats))
        for metadata, offset_ps, duration_ps, stats in events)


def plane(name: str, lines: Iterable[bytes], event_names: Mapping[int, str],
          stat_names: Mapping[int, str] | None = None) -> bytes:
    """An XSpace of one plane (concatenate several for more planes)."""
    body = (field(1, 1) + field(2, name) + b"".join(field(3, encoded) for encoded in lines)
            + b"".join(field(4, field(1, key) + field(2, field(1, key) + field(2, text)))
                       for key, text in event_names.items())
            + b"".join(field(5, field(1, key) + field(2, field(1, key) + field(2, text)))
                       for key, text in (stat_names or {}).items()))
    return field(1, body)
