"""What every framework hook shares: never break the user's job, and finish with the same analysis
the CLI runs.

``guarded`` wraps hook code: its errors are logged and swallowed, unless ``CRYSTALPERF_TESTING=1``
(tests must see them). ``finish_job`` writes the trace and then the report, and never raises.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from crystalperf.core import trace as tr

if TYPE_CHECKING:
    from crystalperf.core.analysis import Analysis

log = logging.getLogger("crystalperf")

P = ParamSpec("P")
R = TypeVar("R")
TESTING_ENV = "CRYSTALPERF_TESTING"
TRACE_NAME = "crystalperf-trace.json.gz"


def testing() -> bool:
    return os.environ.get(TESTING_ENV, "").lower() in ("1", "true", "yes")


@contextlib.contextmanager
def guard(what: str, logger: logging.Logger = log) -> Iterator[None]:
    """Run a block of hook code; its failure is logged (once, with the cause), never propagated."""
    try:
        yield
    except Exception as exc:
        if testing():
            raise
        logger.warning("crystalperf: %s failed (the job is not affected): %s: %s", what, type(exc).__name__, exc)
        logger.debug("crystalperf: %s failure details", what, exc_info=True)


def guarded(what: str, default: R | None = None, logger: logging.Logger = log) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    """Decorator form of :func:`guard`; the wrapped function returns ``default`` when it fails."""

    def wrap(func: Callable[P, R]) -> Callable[P, R | None]:
        @functools.wraps(func)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R | None:
            with guard(what, logger):
                return func(*args, **kwargs)
            return default

        return inner

    return wrap


def finish_job(trace: tr.Trace, out_dir: str | Path, *, analyze: bool = True) -> Path | None:
    """Write ``crystalperf-trace.json.gz`` into out_dir, then the report next to it.

    Returns the trace path, or None when even the trace could not be written. The analysis failing
    leaves the trace in place (it can be analysed later with ``crystalperf analyze``).
    """
    out = Path(out_dir)
    path: Path | None = None
    with guard(f"writing the trace to {out}"):
        out.mkdir(parents=True, exist_ok=True)
        path = tr.save_trace(trace, out / TRACE_NAME)
        log.info("crystalperf: trace written to %s", path)
    if path is not None and analyze:
        with guard("analysing the trace"):
            from crystalperf.core.analysis import analyze as analyse_trace
            from crystalperf.core.report import write_reports

            # The trace in memory is the one just written: no need to read it back for the analysis.
            result = analyse_trace(trace)
            result.files = write_reports(result.report, out)
            log.warning("crystalperf: %s Report: %s", result.report["bottleneck"]["sentence"],
                        out / "crystalperf-report.html")
            with guard("embedding the located functions in the trace"):
                _embed_what_was_used(result, path)
    return path


def _embed_what_was_used(result: Analysis, path: Path) -> None:
    """Write the trace again with the functions and vectors its analysis used (bounded), so that
    ``crystalperf analyze`` on another machine, without the framework or the job's files, gives this report."""
    from crystalperf.core.vectors import embed_resolution

    samples = result.trace.samples
    resolution = result.profile.resolution
    if samples is None or resolution is None or samples.resolution is not None:
        return
    samples.resolution = embed_resolution(samples, resolution, result.profile.classifier_version)
    tr.save_trace(result.trace, path)
