"""The trace schema's version: the one this crystalperf writes, and how a document's version is read and shown.

Compatibility rule: a reader accepts any document with the same major ``schema_version`` (minor versions only add
optional fields) and rejects a newer major version or a foreign document with one clear line."""

from __future__ import annotations

SCHEMA_VERSION = "1.13"
SCHEMA_MAJOR = 1
SCHEMA_ID = f"urn:crystalperf:trace:{SCHEMA_VERSION}"

# Digits a major version may have: more are no version this reader or a later one writes, and Python refuses to
# convert a number of thousands of digits.
_MAJOR_DIGITS = 9


def major_version(version: str) -> int | None:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() and len(head) <= _MAJOR_DIGITS else None


def shown_version(version: object) -> str:
    """A schema_version as an error line may show it: at most 40 characters of it."""
    text = repr(version) if not isinstance(version, str) else version
    return text if len(text) <= 40 else f"{text[:40]}... ({len(text)} characters)"
