"""The process that analyses a fleet's logs: ``python -m crystalperf.fleet.worker``.

It imports the analysis and loads the classifier once, then reads one log to analyse a line on its standard
input (a :class:`~crystalperf.fleet.row.Source` as JSON) and answers each with one line on its standard output
(a :class:`~crystalperf.fleet.cache.Result` as JSON). Each log is analysed in a child forked for it, which starts
with everything imported (a fresh interpreter would spend a second on the imports) and ends when the log is done,
so that one application's memory is never another's, and a crash, a hang or a runaway analysis ends only its own
row: the child is ended past ``--timeout`` seconds or ``--max-rss`` bytes resident, and its row says so.

The local engine (:mod:`.pool`) runs one worker per core; the Spark engine one per partition on the executors.
The limits in force (``docs/limits.md``) are the parent's: it passes them in the environment, with
``PYTHONHASHSEED=0`` (an analysis that iterates a set of names gives the same row in every worker) and
``CRYSTALPERF_PARALLEL=0`` (the workers already use the cores).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from crystalperf.core.errors import BadInputError, CrystalPerfError, one_line
from crystalperf.fleet.cache import Result, content_hash
from crystalperf.fleet.discover import TRACE
from crystalperf.fleet.row import Source, error_row, report_row

_READ_CHUNK = 1 << 16
_POLL_S = 0.1
# Set in every worker: the same row from every worker, and no second core taken by one analysis.
ENVIRONMENT = {"PYTHONHASHSEED": "0", "CRYSTALPERF_PARALLEL": "0", "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class Analyser:
    """What a worker holds for every analysis: the classifier and the readers it has loaded."""

    def __init__(self, classifier: str | None) -> None:
        from crystalperf.core.attribution.classify import load_classifier

        self.classifier = load_classifier(classifier)
        self.readers: dict[str, Callable[[Path], Any] | None] = {}
        try:
            self.entry_points = {ep.name: ep for ep in metadata.entry_points(group="crystalperf.trace_readers")}
        except Exception:  # a broken distribution's metadata: traces are still read
            self.entry_points = {}

    def reader(self, fmt: str) -> Callable[[Path], Any] | None:
        """The function that reads a log of this format into a trace (loaded here, before a child is forked,
        so that every later child has it), or None when no installed reader has that name."""
        if fmt not in self.readers:
            if fmt == TRACE:
                from crystalperf.core.trace import load_trace

                self.readers[fmt] = load_trace
            elif fmt in self.entry_points:
                try:
                    self.readers[fmt] = self.entry_points[fmt].load()
                except ImportError as exc:
                    raise BadInputError(f"the {fmt} reader cannot be loaded: {exc}") from None
            else:
                self.readers[fmt] = None
        return self.readers[fmt]

    def analyse(self, source: Source) -> dict[str, Any]:
        """The log's row; an error row when it cannot be read or analysed."""
        from crystalperf.core.analysis import analyze

        try:
            source = Source(source.path, source.format, source.size, source.mtime_ns, content_hash(source.path))
        except OSError as exc:
            return error_row(source, f"cannot read: {exc.strerror or exc}")
        try:
            read = self.reader(source.format)
            if read is None:
                return error_row(source, "not a crystalperf trace, and no installed reader claims it "
                                         "(crystalperf.trace_catalogs)")
            trace = read(Path(source.path))
            result = analyze(trace, classifier=self.classifier)
        except BadInputError as exc:
            problem = exc.problem if exc.path in (None, source.path) else str(exc)
            return error_row(source, one_line(problem, 1000))
        except CrystalPerfError as exc:
            return error_row(source, one_line(str(exc), 1000))
        except Exception as exc:  # noqa: BLE001 - a bug shows in its row, and the fleet goes on
            return error_row(source, one_line(f"internal error: {type(exc).__name__}: {exc}", 1000))
        tasks = sum(max(op.task_count or 0, len(op.tasks)) for op in trace.iter_operations() if not op.children)
        return report_row(source, result.report, tasks)


def _resident(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _child(analyser: Analyser, source: Source, write: int, parent: int) -> None:
    """In the forked child: analyse, write the row, and never return."""
    code = 1
    try:
        from crystalperf.core.parallel import end_with

        end_with(parent)
        data = json.dumps(analyser.analyse(source), allow_nan=False).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(write, view):]
        code = 0
    except BaseException:  # noqa: BLE001 - the worker writes the row of a child that failed
        pass
    finally:
        os._exit(code)


def _result(source: Source, row: dict[str, Any], **how: Any) -> Result:
    """A result whose source carries the content hash its row was made from (what the cache compares)."""
    return Result(dataclasses.replace(source, content_hash=row.get("content_hash")), row, **how)


def run_one(analyser: Analyser, source: Source, *, timeout_s: float, max_rss: int) -> Result:
    """Analyse one log in a child of its own, within ``timeout_s`` and ``max_rss``."""
    started = time.monotonic()
    if not hasattr(os, "fork"):  # no fork (Windows): analysed here, without the bounds
        return _result(source, analyser.analyse(source), seconds=time.monotonic() - started)
    with contextlib.suppress(BadInputError):  # loaded before the fork, for every later child to have
        analyser.reader(source.format)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        _child(analyser, source, write, os.getppid())
    os.close(write)
    chunks: list[bytes] = []
    failure = None
    largest_seen = 0
    deadline = started + timeout_s
    try:
        while True:
            ready, _, _ = select.select([read], [], [], _POLL_S)
            if ready:
                chunk = os.read(read, _READ_CHUNK)
                if not chunk:
                    break
                chunks.append(chunk)
                continue
            resident = _resident(pid)
            largest_seen = max(largest_seen, resident)
            if resident > max_rss:
                failure = (f"the analysis used more than {max_rss / 2**20:.0f} MiB of memory and was stopped "
                           "(--max-memory)")
            elif time.monotonic() > deadline:
                failure = f"the analysis took longer than {timeout_s:g} s and was stopped (--timeout)"
            if failure is not None:
                _kill(pid)
                break
    finally:
        os.close(read)
    _, status, usage = os.wait4(pid, 0)
    # The kernel folds each thread's page counts into the high-water mark in batches, so ru_maxrss can
    # trail the resident size we saw (and stopped the child at) by a few pages.
    peak = max(usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024), largest_seen)
    seconds = time.monotonic() - started
    if failure is None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        try:
            return _result(source, json.loads(b"".join(chunks)), seconds=seconds, peak_rss=peak)
        except ValueError:
            failure = "the analysis process wrote no row"
    if failure is None:
        how = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {os.WEXITSTATUS(status)}")
        failure = f"the analysis process ended with {how}"
    return Result(source, error_row(source, failure), retry=True, seconds=seconds, peak_rss=peak)


def serve(analyser: Analyser, lines: IO[str], out: IO[str], *, timeout_s: float, max_rss: int) -> None:
    """Answer each source line with its result line until the input ends."""
    for line in lines:
        if not line.strip():
            continue
        source = Source(**json.loads(line))
        result = run_one(analyser, source, timeout_s=timeout_s, max_rss=max_rss)
        out.write(result.to_json() + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crystalperf.fleet.worker")
    parser.add_argument("--classifier")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--max-rss", type=int, default=2 << 30)
    args = parser.parse_args(argv)
    # ^C reaches the whole process group: the parent decides what ends, and ends the workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from crystalperf.core.parallel import end_with

    end_with(os.getppid())
    analyser = Analyser(args.classifier)
    import crystalperf.core.analysis  # noqa: F401 - imported once here, not in every child

    # What is loaded now is shared with every child: kept out of the collector's passes, its pages stay shared.
    gc.collect()
    gc.freeze()
    serve(analyser, sys.stdin, sys.stdout, timeout_s=args.timeout, max_rss=args.max_rss)
    return 0


if __name__ == "__main__":
    sys.exit(main())
