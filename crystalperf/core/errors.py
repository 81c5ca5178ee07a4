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
