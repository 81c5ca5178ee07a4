"""Parsing and printing of sizes and bandwidths as users write them (``4g``, ``512MiB``, ``1gbit``,
``200MB/s``). Sizes are bytes; bandwidths bytes per second."""

from __future__ import annotations

import math
import re

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)
_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?)(i?)(bit|bps|b|byte|bytes)?(?:/s|ps)?\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
# Longer than any size or rate a person writes: a 400-digit number is a mistake or an attack, not a size.
MAX_TEXT = 40


def _number(text: str, what: str, examples: str) -> None:
    if len(text) > MAX_TEXT:
        raise ValueError(f"cannot read {text[:MAX_TEXT]!r}... as a {what}: longer than {MAX_TEXT} characters "
                         f"(examples: {examples})")


def parse_size(text: str) -> int:
    """``4g``, ``4G``, ``4GB``, ``4GiB`` -> bytes. Memory sizes follow the JVM's convention: the
    plain and ``B`` forms are binary (``4g`` = 4 GiB), as in ``spark.executor.memory``."""
    _number(text, "size", "512m, 4g, 2GiB, 1048576")
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"cannot read {text!r} as a size (examples: 512m, 4g, 2GiB, 1048576)")
    number, prefix, _binary, _b = match.groups()
    value = float(number) * 1024 ** _POWERS[prefix.lower()]
    if not math.isfinite(value):
        raise ValueError(f"size {text!r} is too large")
    return int(value)


def parse_bandwidth(text: str) -> float:
    """``1gbit``, ``100mbit``, ``10Gbps`` (bits) or ``200MB/s``, ``200m`` (bytes) -> bytes/s.

    Network speeds are decimal (1 Gbit/s = 10**9 bit/s); byte rates with an ``i`` are binary."""
    _number(text, "bandwidth", "1gbit, 100mbit, 200MB/s")
    match = _RATE.match(text)
    if not match:
        raise ValueError(f"cannot read {text!r} as a bandwidth (examples: 1gbit, 100mbit, 200MB/s)")
    number, prefix, binary, unit = match.groups()
    value = float(number) * (1024 if binary else 1000) ** _POWERS[prefix.lower()]
    if not math.isfinite(value):
        raise ValueError(f"bandwidth {text!r} is too large")
    if value <= 0:
        raise ValueError(f"bandwidth {text!r} must be positive")
    # 'bit', 'bps' and a lower-case 'b' are bits (Mb/s); 'B', 'byte(s)' or no unit are bytes.
    if unit is not None and (unit.lower() in ("bit", "bps") or unit == "b"):
        return value / 8.0
    return value


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(us|µs|ms|s)\s*$", re.IGNORECASE)
_DURATION_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_duration(text: str) -> float:
    """``10ms``, ``0.5 ms``, ``250us``, ``0.01s`` -> seconds (a unit is required: a bare number is ambiguous)."""
    _number(text, "duration", "10ms, 250us, 0.01s")
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"cannot read {text!r} as a duration (examples: 10ms, 250us, 0.01s)")
    value = float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
    if not math.isfinite(value):
        raise ValueError(f"duration {text!r} is too large")
    return value


def format_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def format_bandwidth(bps: float) -> str:
    bits = bps * 8
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.3g} {unit}"
    return f"{bits:.3g} bit/s"


def format_byte_rate(bps: float) -> str:
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} B/s"


def format_duration(s: float) -> str:
    """Seconds in a sentence: two decimals from a tenth of a second, milliseconds below (a step of 3 ms is not
    "0.00 s")."""
    if s >= 0.1 or s == 0:
        return f"{s:.2f} s"
    return f"{s * 1000:.2g} ms"


def format_seconds(s: float) -> str:
    if s >= 120:
        return f"{s / 60:.1f} min"
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1000:.0f} ms"
