"""Source location (paper §3.1/§4.1): from a sampled stack frame to the function's code and doc.

Locators are pluggable (entry point group ``crystalperf.source_locators``). For each stack, the core
scans from the top frame downward and takes the first frame some locator can resolve; native frames
are skipped so the scan continues below them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Protocol, runtime_checkable

from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.core.trace import Environment, Frame

log = logging.getLogger(__name__)

MAX_CLASSPATH = 4096  # classpath entries looked through for bytecode
MAX_SOURCE_ROOTS = 256


@dataclass
class LocateContext:
    """What a locator may use besides the frame: the job's classpath, user source roots, and a place
    to report per-frame problems (a corrupt jar, a missing file) without aborting the scan."""

    classpath: list[str] = field(default_factory=list)
    source_roots: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def from_environment(cls, env: Environment, extra_roots: Sequence[str] = ()) -> LocateContext:
        # Every unresolved frame looks through all of them: bounded, so a trace listing a million entries
        # cannot make the analysis stat files for hours (real classpaths have hundreds).
        return cls(classpath=list(env.classpath[:MAX_CLASSPATH]),
                   source_roots=[*extra_roots, *env.source_roots][:MAX_SOURCE_ROOTS])

    def report(self, problem: str) -> None:
        if len(self.problems) < 1000:  # bounded: a broken classpath must not flood memory
            self.problems.append(problem)


@runtime_checkable
class SourceLocator(Protocol):
    """Resolves frames of the languages it knows; returns None when it cannot."""

    name: str

    def locate(self, frame: Frame, context: LocateContext) -> FunctionSource | None: ...


def is_native(frame: Frame) -> bool:
    """Native frames (libc, JNI, the interpreter) never have source we can classify."""
    if frame.language == "native":
        return True
    return frame.name.startswith(("<native>", "[native]")) or frame.name in {"<unknown>", ""}


def installed_locators() -> list[SourceLocator]:
    """Every locator registered under the entry point group, in name order; broken ones are skipped."""
    locators: list[SourceLocator] = []
    for ep in sorted(metadata.entry_points(group="crystalperf.source_locators"), key=lambda e: e.name):
        try:
            obj = ep.load()
            locators.append(obj() if isinstance(obj, type) else obj)
        except Exception as exc:
            log.warning("source locator %s could not be loaded: %s", ep.name, exc)
    return locators


class FrameResolver:
    """Resolves interned frames once each, then scans stacks top-down (paper §4.1)."""

    def __init__(self, locators: Sequence[SourceLocator], context: LocateContext) -> None:
        self.locators = list(locators)
        self.context = context
        self._frame_cache: dict[int, FunctionSource | None] = {}

    def resolve_frame(self, index: int, frame: Frame) -> FunctionSource | None:
        if index in self._frame_cache:
            return self._frame_cache[index]
        found: FunctionSource | None = None
        if not is_native(frame):
            for locator in self.locators:
                try:
                    found = locator.locate(frame, self.context)
                except Exception as exc:  # one bad frame or jar must not stop the analysis
                    self.context.report(f"{locator.name}: {frame.name}: {type(exc).__name__}: {exc}")
                    found = None
                if found is not None:
                    break
        self._frame_cache[index] = found
        return found

    def resolve_stack(
        self, stack: Sequence[int], frames: Sequence[Frame], skip: Callable[[Frame], bool] | None = None
    ) -> tuple[int, FunctionSource] | None:
        """The first frame (from the top) whose source is available, with its index in ``frames``; frames
        ``skip`` accepts (synchronisation and scheduling plumbing) are passed over."""
        for index in stack:
            if skip is not None and skip(frames[index]):
                continue
            found = self.resolve_frame(index, frames[index])
            if found is not None:
                return index, found
        return None
