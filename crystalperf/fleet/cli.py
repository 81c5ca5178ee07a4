"""``crystalperf fleet PATH...``: every application under the paths analysed, as a table, a page and a summary.

Registered through the ``crystalperf.commands`` entry points, as the models' and the integrations' subcommands
are. Bad input (a path that does not exist, a date that is not one, pyarrow missing) is one line and exit 2
before anything is analysed; a log that cannot be analysed is a row of the table with its error, never the end
of the run.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import re
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from crystalperf.core import atomic, limits
from crystalperf.core.errors import BadInputError, FrameworkNotInstalledError, one_line
from crystalperf.core.units import format_seconds, parse_size
from crystalperf.fleet import pool
from crystalperf.fleet.cache import Cache, Result, fingerprint
from crystalperf.fleet.discover import discover
from crystalperf.fleet.page import render
from crystalperf.fleet.row import Source, error_row
from crystalperf.fleet.summary import FleetSummary, print_summary
from crystalperf.fleet.table import TableWriter, require_pyarrow

log = logging.getLogger(__name__)

TABLE = "crystalperf-fleet.parquet"
PAGE = "crystalperf-fleet.html"
WORKER_LOG = "crystalperf-fleet.log"
LOCAL = "local"
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([dhm])$")
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0}


def parse_since(text: str, now: float | None = None) -> int:
    """``--since``: an ISO date or time (local time unless it names a zone), or an age (``7d``, ``12h``, ``30m``);
    epoch nanoseconds."""
    value = text.strip()
    relative = _RELATIVE.match(value)
    if relative:
        seconds = float(relative.group(1)) * _UNITS[relative.group(2)]
        return int(((time.time() if now is None else now) - seconds) * 1e9)
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise BadInputError(f"--since {one_line(text, 100)!r} is not a date (2026-11-30, 2026-11-30T08:00) "
                            "or an age (7d, 12h, 30m)") from None
    return int(moment.timestamp() * 1e9)


def engines() -> dict[str, metadata.EntryPoint]:
    try:
        return {ep.name: ep for ep in metadata.entry_points(group="crystalperf.fleet_engines")}
    except Exception:  # a broken distribution's metadata: the local engine still runs
        return {}


def _engine(name: str) -> pool.Engine:
    if name == LOCAL:
        return pool.analyse
    found = engines()
    if name not in found:
        known = ", ".join([LOCAL, *sorted(found)])
        raise BadInputError(f"unknown engine {name!r} (known: {known})")
    try:
        engine: pool.Engine = found[name].load()
    except ImportError as exc:
        raise BadInputError(f"the {name} engine cannot be loaded: {exc}") from None
    return engine


class Progress:
    """Counts and an ETA on stderr: a bar on a terminal, a line every ``every_s`` seconds elsewhere."""

    def __init__(self, total: int, *, quiet: bool, every_s: float = 10.0) -> None:
        self.total = total
        self.done = 0
        self.errors = 0
        self.started = time.monotonic()
        self.last = self.started
        self.every_s = every_s
        self.quiet = quiet or total == 0
        self.bar: Any = None
        if not self.quiet and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn("analysing"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[errors]} errors"), TimeElapsedColumn(),
                                TextColumn("ETA"), TimeRemainingColumn(), console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("fleet", total=total, errors=0)
            self.bar.start()

    def advance(self, result: Result) -> None:
        self.done += 1
        self.errors += bool(result.row.get("error"))
        if self.bar is not None:
            self.bar.update(self.task, advance=1, errors=self.errors)
            return
        now = time.monotonic()
        if not self.quiet and (now - self.last >= self.every_s or self.done == self.total):
            self.last = now
            elapsed = now - self.started
            left = elapsed / self.done * (self.total - self.done)
            sys.stderr.write(f"crystalperf fleet: {self.done:,}/{self.total:,} analysed ({self.errors:,} errors), "
                             f"{format_seconds(elapsed)} so far, about {format_seconds(left)} left\n")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _say(text: str, quiet: bool) -> None:
    if not quiet:
        sys.stderr.write(f"crystalperf fleet: {text}\n")


def run(paths: Sequence[str], *, out: Path, cache_dir: Path | None = None, since_ns: int | None = None,
        engine: str = LOCAL, options: pool.Options | None = None, quiet: bool = False) -> tuple[FleetSummary,
                                                                                              list[Path]]:
    """A fleet run: analyse what the cache does not hold, then write the table and the page from every result.
    The summary and the files written."""
    require_pyarrow()
    options = options or pool.Options()
    analyse = _engine(engine)
    out = limits.writable_directory(out, "--out")
    cache_dir = limits.writable_directory(cache_dir or out / "cache", "--cache")
    if options.log is None:
        options.log = out / WORKER_LOG
    if not options.limits:
        options.limits = pool.limits_in_force()
    sources = discover(paths, since_ns=since_ns, skip=[out, cache_dir])
    cache = Cache(cache_dir, fingerprint(options.classifier, options.limits))
    todo = [s for s in sources if cache.get(s) is None]
    _say(f"{len(sources):,} logs: {len(sources) - len(todo):,} unchanged since they were analysed, "
         f"{len(todo):,} to analyse ({engine} engine)", quiet)
    progress = Progress(len(todo), quiet=quiet)
    try:
        for result in _checked(analyse(todo, options), todo):
            cache.put(result)
            progress.advance(result)
    except KeyboardInterrupt:
        progress.close()
        sys.stderr.write(f"crystalperf fleet: interrupted after {progress.done:,} of {len(todo):,}; what was analysed "
                         "is kept: the same command resumes\n")
        raise
    finally:
        progress.close()
    summary = FleetSummary(analysed=len(todo))
    table = out / TABLE
    writer = TableWriter(table)
    try:
        for source in sources:
            kept = cache.get(source, for_table=True)
            row = kept.row if kept is not None else error_row(source, "not analysed: the engine returned no "
                                                                          "result for it (the next run tries again)")
            writer.add(row)
            summary.add(row)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    page = out / PAGE
    title = ", ".join(str(p) for p in paths)
    atomic.write_bytes(page, render(summary, title=one_line(title, 200)).encode("utf-8", "replace"))
    return summary, [table, page]


def _checked(results: Iterator[Result], todo: list[Source]) -> Iterator[Result]:
    """An engine's results, each for a log it was given."""
    wanted = {s.path for s in todo}
    for result in results:
        if result.source.path in wanted:
            yield result
        else:
            log.warning("the engine returned a result for a log it was not given: %s", result.source.path)


def _cmd_fleet(args: argparse.Namespace) -> int:
    from rich.console import Console

    options = pool.Options(classifier=args.classifier, timeout_s=args.timeout, jobs=args.jobs)
    if args.max_memory:
        try:
            options.max_rss = parse_size(args.max_memory)
        except ValueError:
            raise BadInputError(f"--max-memory {one_line(args.max_memory, 100)!r} is not a size (2g, 512m)") from None
    if args.jobs is not None and args.jobs < 1:
        raise BadInputError("--jobs must be at least 1")
    if args.timeout <= 0:
        raise BadInputError("--timeout must be a positive number of seconds")
    conf = {}
    for item in args.conf or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInputError(f"--conf {one_line(item, 100)!r} is not KEY=VALUE")
        conf[key] = value
    options.engine = {"master": args.master, "conf": conf}
    since = parse_since(args.since) if args.since else None
    try:
        summary, files = run(args.paths, out=Path(args.out), cache_dir=Path(args.cache) if args.cache else None,
                             since_ns=since, engine=args.engine, options=options, quiet=args.quiet)
    except FrameworkNotInstalledError as exc:
        raise BadInputError(str(exc)) from None
    if not args.quiet:
        width = max(80, min(160, shutil.get_terminal_size((110, 24)).columns))
        print_summary(summary, Console(width=width, highlight=False, soft_wrap=False), [str(f) for f in files],
                      top=args.top)
    return 0


def register_fleet(sub: Any) -> None:
    """Entry point ``crystalperf.commands: fleet``."""
    p = sub.add_parser("fleet", help="analyse every application under the paths: a Parquet table, an HTML page "
                                     "ranking them by machine-hours saved, and a summary")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="a History Server event-log directory, a directory of crystalperf traces, or one log")
    p.add_argument("--out", default="crystalperf-fleet",
                   help=f"directory for {TABLE}, {PAGE} and the cache (default ./crystalperf-fleet)")
    p.add_argument("--cache", help="directory of the results kept between runs (default OUT/cache)")
    p.add_argument("--since", metavar="DATE", help="only logs modified since DATE (2026-11-30, 2026-11-30T08:00) "
                                                   "or within an age (7d, 12h)")
    p.add_argument("--engine", default=LOCAL, help="local (default: a process pool on this machine) or spark "
                                                   "(a PySpark job on the configured master)")
    p.add_argument("--jobs", type=int, help="local engine: analyses at once (default: one per CPU, as memory allows)")
    p.add_argument("--timeout", type=float, default=pool.DEFAULT_TIMEOUT_S,
                   help="seconds one analysis may take (default 600)")
    p.add_argument("--max-memory", metavar="SIZE", help="memory one analysis may hold, e.g. 2g (the default)")
    p.add_argument("--master", help="spark engine: the master URL (default: Spark's configuration)")
    p.add_argument("--conf", action="append", metavar="KEY=VALUE", help="spark engine: a Spark property")
    p.add_argument("--classifier", help="classifier entry point (default: as crystalperf analyze)")
    p.add_argument("--top", type=int, default=10, help="applications in the terminal's ranking (default 10)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress and no summary")
    p.set_defaults(func=_cmd_fleet)
