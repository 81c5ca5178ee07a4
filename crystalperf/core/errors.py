"""Typed errors shared by the core, the models and the integrations."""

from __future__ import annotations

from pathlib import Path


class CrystalPerfError(Exception):
    """Base class of every error crystalperf raises on purpose."""


class BadInputError(CrystalPerfError):
    """Input the user gave us is unusable: the CLI prints one line and exits with status 2."""

    def __init__(self, problem: str, path: str | Path | None = None) -> None:
        self.problem = problem
        self.path = str(path) if path is not None else None
        super().__init__(f"{self.path}: {problem}" if self.path else problem)


class UnsupportedSchemaError(BadInputError):
    """A trace written by a newer major schema version, or not a crystalperf trace at all."""


class FrameworkNotInstalledError(CrystalPerfError, ImportError):
    """An integration was used without its framework; the message names the extra to install."""

    def __init__(self, framework: str, extra: str, detail: str = "") -> None:
        self.framework = framework
        self.extra = extra
        message = f"{framework} is not installed: pip install 'crystalperf[{extra}]'"
        if detail:
            message += f" ({detail})"
        super().__init__(message)


class UnsupportedFrameworkVersionError(CrystalPerfError):
    """The framework is installed but outside the version range the integration supports; the message
    names the range and the command that installs a supported version."""

    def __init__(self, framework: str, installed: str, supported: str, extra: str) -> None:
        self.framework = framework
        self.installed = installed
        self.supported = supported
        self.extra = extra
        super().__init__(
            f"{framework} {installed} is installed, but crystalperf's {framework} integration supports "
            f"{supported}: pip install 'crystalperf[{extra}]' installs a supported version"
        )


class IntegrationSetupError(CrystalPerfError):
    """A framework hook cannot be used as installed (its jar missing or stale, a JVM started without it);
    the message names the fix."""


# Characters that must not reach a terminal as they are: C0/C1 controls (escape sequences, carriage return,
# bell), line and paragraph separators, and the bidirectional overrides that make text read other than it is.
_INVISIBLE = frozenset(
    [*range(0x00, 0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F),
     *range(0x2066, 0x206A), 0xFEFF]
)


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if code in _INVISIBLE:
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    if 0xD800 <= code <= 0xDFFF:  # a byte of a file name that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"
    return ch


def printable(text: str, limit: int | None = None) -> str:
    """``text`` safe to print: control characters, bidirectional overrides and undecodable bytes escaped
    (``\\n``, ``\\x1b``, ``\\u202e``), and cut to ``limit`` characters with a mark when longer."""
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 1)]
        cut = True
    else:
        cut = False
    if text.isprintable():
        out = text
    else:
        out = "".join(_escape_char(ch) for ch in text)
    return out + "…" if cut else out


def one_line(text: str, limit: int | None = 4000) -> str:
    """One printable line (see :func:`printable`): what the CLI's error lines are made of."""
    return printable(text, limit)
