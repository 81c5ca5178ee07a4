"""Job end: wait for the job's parts to hold final values, merge them, write the trace and the report.

The reporter starts ``python -m crystalperf.integrations.flink.finish PART [--out DIR] [--timeout S]``
(:meth:`Integration.finish_command`) detached in every process where a job ended; ``crystalperf
flink-finish`` runs the same code. Exit status: 0 written (or already current), 1 the trace could not be
written, 2 the part is not a crystalperf Flink metrics file.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from crystalperf.core.errors import BadInputError, CrystalPerfError
from crystalperf.core.finish import finish_job
from crystalperf.core.record.hooks import TRACE_NAME
from crystalperf.integrations.base import EXIT_FAILURE, EXIT_OK, finish_main
from crystalperf.integrations.flink.assemble import read_metrics
from crystalperf.integrations.flink.config import INTEGRATION
from crystalperf.integrations.flink.pyworkers import wait_for_spools
from crystalperf.integrations.flink.reader import load_part, wait_for_metrics


class TraceNotWrittenError(CrystalPerfError):
    """The trace of a finished job could not be written to its output directory."""


# An analysis of one job that holds its lock this long is stuck: the next one gives up rather than queue behind it
# for ever (the reporter's finishers are detached, but nobody should wait on a hung one).
LOCK_TIMEOUT_S = 600.0


@contextlib.contextmanager
def job_lock(part: Path) -> Iterator[None]:
    """Serialises the analyses of one job: on a cluster every process that saw the job end starts one.
    Raises :class:`TraceNotWrittenError` when another analysis held the lock for more than ``LOCK_TIMEOUT_S``."""
    import fcntl  # POSIX only, like the reporter's detached finisher; reading parts works anywhere

    job_id = part.name.removeprefix("crystalperf-flink-").split(".")[0]
    lock = part.parent / f"crystalperf-flink-{job_id}.lock"
    with open(lock, "a+b") as handle:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TraceNotWrittenError(
                        f"{lock}: another analysis of the job held this lock for more than {LOCK_TIMEOUT_S:g} s"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _finish_locked(metrics_path: Path, out: Path) -> Path:
    written = finish_job(read_metrics(metrics_path), out)
    if written is None:
        raise TraceNotWrittenError(f"{out}: the trace of {metrics_path.name} could not be written")
    return written


def finish(metrics_path: Path, out_dir: Path | None = None) -> Path:
    """Convert the reporter's file (merged with the job's other parts) into a trace and run the analysis;
    returns the trace path. Raises :class:`TraceNotWrittenError` when the trace could not be written."""
    metrics_path = Path(metrics_path)
    out = Path(out_dir) if out_dir is not None else metrics_path.parent
    with job_lock(metrics_path):
        return _finish_locked(metrics_path, out)


def _trace_job(path: Path) -> str | None:
    try:
        from crystalperf.core.trace import load_trace

        return load_trace(path).application.id
    except Exception:  # an unreadable or foreign trace is simply not current
        return None


def finish_when_complete(part: Path, out_dir: Path | None = None, timeout_s: float = 60.0) -> Path | None:
    """What the reporter runs when a job ended in its process: wait until the job's parts hold final values
    (other processes flush theirs every few seconds), then write the trace and report unless an analysis
    of the same parts already did. Returns the trace path, or None when it was already current."""
    part = Path(part)
    if not part.exists():
        raise BadInputError("no such crystalperf Flink metrics file", part)
    first = load_part(part)
    job_id = first.job_id
    parts = wait_for_metrics(part.parent, job_id or None, timeout_s=timeout_s)
    wait_for_spools(part.parent, first.end)
    out = Path(out_dir) if out_dir is not None else part.parent
    trace = out / TRACE_NAME
    # One lock for the check and the analysis: two finishers that both found the trace stale would otherwise
    # analyse the job twice, one after the other.
    with job_lock(part):
        newest = max((p.stat().st_mtime for p in parts if p.exists()), default=0.0)
        if trace.exists() and trace.stat().st_mtime > newest and _trace_job(trace) == job_id:
            return None
        return _finish_locked(part, out)


def run(args: argparse.Namespace) -> int:
    """Finish a job and say what happened on stdout (stderr and exit status 1 when the trace could not be
    written); :class:`BadInputError` propagates for the caller to report."""
    try:
        trace = finish_when_complete(args.part, args.out, timeout_s=args.timeout)
    except (TraceNotWrittenError, OSError) as exc:
        # OSError: finish_job re-raises its own failures under CRYSTALPERF_TESTING
        sys.stderr.write(f"crystalperf: error: the trace was not written: {exc}\n")
        return EXIT_FAILURE
    sys.stdout.write(f"crystalperf: {'wrote ' + str(trace) if trace else 'report already current'}\n")
    return EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("part", type=Path, help="a crystalperf-flink-<job_id>.<pid>.json file")
    parser.add_argument("--out", type=Path, default=None, help="report directory (default: the part's directory)")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the other processes' parts"
    )


def main(argv: Sequence[str] | None = None) -> int:
    return finish_main(INTEGRATION, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
