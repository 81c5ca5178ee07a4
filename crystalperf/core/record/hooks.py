"""What every framework hook shares: never break the user's job.

``guarded`` wraps hook code: its errors are logged and swallowed, unless ``CRYSTALPERF_TESTING=1``
(tests must see them). The job end (``crystalperf.core.finish.finish_job``) writes the trace, then the report.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ParamSpec, TypeVar

if TYPE_CHECKING:
    pass

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
