"""The ``crystalperf`` command.

``analyze`` and ``predict`` live here; the models and the integrations add their own subcommands
through the ``crystalperf.commands`` entry point group (a ``register(subparsers)`` function each), so
the core never imports a framework. Bad input ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from crystalperf import __version__
from crystalperf.core import limits
from crystalperf.core.errors import BadInputError, CrystalPerfError, one_line

log = logging.getLogger("crystalperf")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse prints the whole usage; one line naming the problem is what we promise.
        sys.stderr.write(f"{one_line(self.prog)}: error: {one_line(message)}\n")
        raise SystemExit(EXIT_BAD_INPUT)


def _cmd_analyze(args: argparse.Namespace) -> int:
    from crystalperf.core.analysis import analyze_path
    from crystalperf.core.report.terminal import TerminalRenderer

    classifier = _classifier(args.classifier)
    out = _out_dir(args.out) if args.out else None
    result = analyze_path(args.trace, out, classifier=classifier, source_roots=args.source_root or [],
                          reclassify=args.reclassify, attribution=args.attribution)
    if not args.quiet:
        TerminalRenderer(width=_width()).print(result.report, _console())
        for path in result.files:
            sys.stdout.write(f"wrote {one_line(str(path))}\n")
    return EXIT_OK


def _out_dir(out: str) -> Path:
    """``--out``: a directory that exists or can be made; anything else is one line naming it."""
    return limits.writable_directory(Path(out), "--out", "output directory")


def _cmd_predict(args: argparse.Namespace) -> int:
    from crystalperf.core.analysis import analyze
    from crystalperf.core.predict import Changes
    from crystalperf.core.trace import load_trace
    from crystalperf.core.units import format_seconds

    changes = Changes.parse(args.set or [], args.trace)
    trace = load_trace(args.trace)
    try:
        result = analyze(trace, classifier=_classifier(args.classifier), scenarios=[changes])
    except BadInputError as exc:
        raise BadInputError(exc.problem, args.trace) from None
    prediction = result.predictions[0]
    if args.json:
        sys.stdout.write(json.dumps(prediction.as_dict(), indent=2) + "\n")
        return EXIT_OK
    c = prediction.crystalperf
    sys.stdout.write(
        f"{changes.describe()}: predicted runtime {format_seconds(c.runtime_s)} "
        f"(band {format_seconds(c.fast_end_s)} – {format_seconds(c.slow_end_s)}; "
        f"traced {format_seconds(prediction.baseline_runtime_s)}, speed-up {prediction.speedup:.2f}x)\n"
        f"  baselines: linear scaling {format_seconds(prediction.linear.runtime_s)}, "
        f"task replay without vectors {format_seconds(prediction.replay.runtime_s)}\n"
    )
    for note in prediction.notes:
        sys.stdout.write(f"  note: {note}\n")
    return EXIT_OK


def _cmd_diff(args: argparse.Namespace) -> int:
    from crystalperf.core import compare
    from crystalperf.core.report.diff import diff_html, print_diff

    threshold = compare.parse_percent(args.fail_if_slower) if args.fail_if_slower is not None else None
    classifier = _classifier(args.classifier)
    result = compare.diff(compare.load_run(args.a, classifier=classifier),
                          compare.load_run(args.b, classifier=classifier))
    _write_outputs(result, args, diff_html)
    print_diff(result, _console())
    if threshold is not None and compare.exceeds(result, threshold):
        sys.stdout.write(f"B is more than {threshold:g}% slower than A\n")
        return EXIT_FAILURE
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from crystalperf.core import compare
    from crystalperf.core.report.diff import print_validation, validation_html

    classifier = _classifier(args.classifier)
    traced = compare.load_run(args.trace, classifier=classifier, need_trace=True)
    rerun = compare.load_run(args.rerun, classifier=classifier)
    result = compare.validate(traced, rerun, classifier=classifier)
    _write_outputs(result, args, validation_html)
    print_validation(result, _console())
    return EXIT_OK


def _write_outputs(result: dict[str, Any], args: argparse.Namespace, html: Any) -> None:
    """``--json PATH`` and ``--html PATH``; a path that cannot be written is bad input, named."""
    from crystalperf.core import atomic
    from crystalperf.core.compare import to_json

    for path, text in ((args.json, to_json), (args.html, html)):
        if not path:
            continue
        try:
            atomic.write_bytes(Path(path), text(result).encode("utf-8", "replace"))
        except OSError as exc:
            raise BadInputError(f"cannot write: {exc.strerror or exc}", path) from None


class LoggedApplication(Protocol):
    """What a trace catalog (entry points ``crystalperf.trace_catalogs``) says about one application whose
    logs it found: ``catalog(path) -> list[LoggedApplication]``, ``path`` being what the format's reader reads."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def start(self) -> float | None: ...  # epoch seconds
    @property
    def status(self) -> str: ...  # "complete" or "in progress"
    @property
    def size(self) -> int: ...  # bytes
    @property
    def path(self) -> Path: ...


def _load(group: str, name: str, what: str) -> Any:
    found = _entry_points(group)
    if name not in found:
        return None
    try:
        return found[name].load()
    except ImportError as exc:
        raise BadInputError(f"the {name} {what} cannot be loaded: {exc}") from None


def _cmd_import(args: argparse.Namespace) -> int:
    read = _load("crystalperf.trace_readers", args.format, "reader")
    if read is None:
        known = ", ".join(sorted(_entry_points("crystalperf.trace_readers"))) or "none installed"
        raise BadInputError(f"unknown trace format {args.format!r} (known: {known})")
    source = Path(args.path)
    if not limits.exists(source):
        raise BadInputError("no such file or directory", source)
    choosing = args.list or args.app is not None or args.all
    apps: list[LoggedApplication] | None = None
    if choosing or limits.is_directory(source):  # a directory may hold many applications' logs (a History Server's)
        catalog = _load("crystalperf.trace_catalogs", args.format, "catalog")
        if catalog is None and choosing:
            raise BadInputError(f"the {args.format} format cannot list applications "
                                "(--list, --app and --all need a crystalperf.trace_catalogs entry point)")
        apps = list(catalog(source)) if catalog is not None else None
    if apps is not None and choosing:
        return _import_chosen(args, read, source, apps)
    if apps is not None and len(apps) > 1:
        raise BadInputError(f"{len(apps)} applications' logs are here: name one with --app ID "
                            "(--list lists them) or import them all with --all", source)
    if apps is not None and len(apps) == 1:
        source = apps[0].path  # a directory holding one application's log: that log
    out = Path(args.out) if args.out else source.parent / "crystalperf-trace.json.gz"
    _import_one(read, source, out, args.analyze)
    return EXIT_OK


def _import_chosen(args: argparse.Namespace, read: Any, source: Path, apps: list[LoggedApplication]) -> int:
    """``--list``, ``--app ID`` or ``--all`` over the applications a catalog found."""
    if args.list:
        if not apps:
            sys.stderr.write(f"crystalperf: no {args.format} logs in {source}\n")
        for app in apps:
            sys.stdout.write(f"{one_line(app.id, 200)}  {one_line(app.name or '-', 200)}  {_utc(app.start)}  "
                             f"{app.status}  {_size(app.size)}\n")
        return EXIT_OK
    if args.app is not None:
        chosen = [a for a in apps if args.app in (a.id, a.path.name)]
        if not chosen:
            known = ", ".join(a.id for a in apps) or "none"
            raise BadInputError(f"no application {args.app!r} here (found: {known})", source)
        app = chosen[0]
        out = Path(args.out) if args.out else app.path.parent / "crystalperf-trace.json.gz"
        _import_one(read, app.path, out, args.analyze)
        return EXIT_OK
    if not apps:
        raise BadInputError(f"no {args.format} logs here", source)
    # One directory per application, named after it: each holds the usual crystalperf-trace.json.gz (and
    # with --analyze its report), so `crystalperf analyze DIR/<app>` works as on any other trace.
    root = Path(args.out) if args.out else Path("crystalperf-traces")
    status = EXIT_OK
    for app in apps:
        try:
            _import_one(read, app.path, root / _safe_name(app.id) / "crystalperf-trace.json.gz", args.analyze)
        except BadInputError as exc:  # one bad log must not stop the others
            sys.stderr.write(f"crystalperf: error: {one_line(str(exc))}\n")
            status = EXIT_BAD_INPUT
    return status


def _import_one(read: Any, source: Path, out: Path, analyze: bool) -> None:
    from crystalperf.core.trace import save_trace

    trace = read(source)
    if limits.is_directory(out) or not _names_a_trace_file(out):
        out = out / "crystalperf-trace.json.gz"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        save_trace(trace, out)
    except OSError as exc:
        raise BadInputError(f"cannot write the trace: {exc.strerror or exc}", out) from None
    for warning in trace.warnings:
        sys.stderr.write(f"crystalperf: warning: {one_line(warning, 1000)}\n")
    sys.stdout.write(f"wrote {one_line(str(out))}\n")
    if analyze:
        from crystalperf.core.analysis import analyze_path
        from crystalperf.core.report.terminal import TerminalRenderer

        result = analyze_path(out, out.parent)
        TerminalRenderer(width=_width()).print(result.report, _console())


def _names_a_trace_file(path: Path) -> bool:
    """``--out t1`` is a directory to make, as ``analyze --out`` takes one: only a name ending in ``.json`` or
    ``.json.gz`` is the trace file itself, so the reports written beside it never land in its parent unasked."""
    return path.name.endswith((".json", ".json.gz"))


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".") or "app"


def _utc(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def _classifier(name: str | None):  # type: ignore[no-untyped-def]
    from crystalperf.core.attribution.classify import load_classifier

    try:
        return load_classifier(name)
    except ValueError as exc:
        raise BadInputError(str(exc)) from None


def _width() -> int:
    try:
        return max(80, min(160, os.get_terminal_size().columns))
    except OSError:
        return 110


def _console():  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(width=_width(), highlight=False, soft_wrap=False)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="crystalperf", description="Where the time of a dataflow job went, and what-if.")
    parser.add_argument("--version", action="version", version=f"crystalperf {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what happens")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("analyze", help="write crystalperf-report.json/.html for a trace and print a summary")
    p.add_argument("trace", help="crystalperf-trace.json[.gz], or a directory holding one")
    p.add_argument("--out", help="directory for the report files (default: the trace's directory)")
    p.add_argument("--classifier", help="classifier entry point (default: neural if installed, else keyword)")
    p.add_argument("--source-root", action="append", help="extra source directory/jar for JVM frames")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary on stdout")
    p.add_argument("--reclassify", action="store_true",
                   help="locate and classify every stack here instead of using what the trace embeds from its "
                        "job-end analysis (the report may then differ from the one written at job end)")
    p.add_argument("--attribution", choices=("evidence", "paper"), default="evidence",
                   help="evidence (default): measured time first, then thread states and plumbing frames, then "
                        "the classifiers; paper: the paper's method (first located frame, classifier only), to "
                        "compare")
    p.set_defaults(func=_cmd_analyze)

    p = sub.add_parser("predict", help="predict the runtime under resource changes")
    p.add_argument("trace")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a changed resource: cores, executors, parallelism, slots, cpu_speed, cpu_share, "
                        "memory (4g), network (1gbit), disk (200MB/s), rtt (+10ms), device (cpu|gpu), gpu_speedup")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.add_argument("--classifier")
    p.set_defaults(func=_cmd_predict)

    p = sub.add_parser("diff", help="compare two runs of a job: what changed and what explains it")
    p.add_argument("a", help="the first run: a trace, a crystalperf-report.json, or a directory holding one")
    p.add_argument("b", help="the second run (the one compared against A)")
    p.add_argument("--html", metavar="PATH", help="also write the comparison as a self-contained HTML page")
    p.add_argument("--json", metavar="PATH", help="also write the comparison as JSON")
    p.add_argument("--fail-if-slower", metavar="P%",
                   help="exit with status 1 when B's runtime exceeds A's by more than P per cent (for CI)")
    p.add_argument("--classifier")
    p.set_defaults(func=_cmd_diff)

    p = sub.add_parser("validate", help="check a what-if prediction from TRACE against a rerun's measurement")
    p.add_argument("trace", help="the traced run predictions are made from")
    p.add_argument("rerun", help="a trace (or report) of the same job run with other resources")
    p.add_argument("--html", metavar="PATH", help="also write the result as a self-contained HTML page")
    p.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    p.add_argument("--classifier")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("import", help="turn a framework's own logs into a crystalperf trace")
    p.add_argument("format", help="trace reader, e.g. spark-eventlog (entry points crystalperf.trace_readers)")
    p.add_argument("path", help="the log file or directory, or a directory of many applications' logs")
    p.add_argument("--out", help="trace file (a name ending in .json or .json.gz) or directory (any other "
                                 "name; made if missing; default: next to the input); with --all the "
                                 "directory that gets one sub-directory per application (default ./crystalperf-traces)")
    p.add_argument("--analyze", action="store_true", help="also write the report and print a summary")
    choose = p.add_mutually_exclusive_group()
    choose.add_argument("--list", action="store_true", help="list the applications whose logs are in PATH")
    choose.add_argument("--app", metavar="ID", help="import this application's log from PATH")
    choose.add_argument("--all", action="store_true", help="import every application's log in PATH")
    p.set_defaults(func=_cmd_import)

    for ep in sorted(_entry_points("crystalperf.commands").values(), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as exc:  # one broken plug-in must not take the whole CLI down
            log.debug("command %s not available: %s", ep.name, exc)
    return parser


def _entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    try:
        return {ep.name: ep for ep in metadata.entry_points(group=group)}
    except Exception:  # a broken distribution's metadata must not take the CLI down
        return {}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="crystalperf: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.func(args))
    except BadInputError as exc:
        sys.stderr.write(f"crystalperf: error: {one_line(str(exc))}\n")
        return EXIT_BAD_INPUT
    except CrystalPerfError as exc:
        sys.stderr.write(f"crystalperf: error: {one_line(str(exc))}\n")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of our output went away (`crystalperf analyze ... | head`)
        _silence_stdout()
        return EXIT_FAILURE
    except Exception as exc:
        # A bug, not bad input: still one line (the details with -v), and a status that says so.
        if args.verbose:
            log.exception("internal error")
        sys.stderr.write(f"crystalperf: internal error: {one_line(f'{type(exc).__name__}: {exc}', 1000)} "
                         "(please report it, with the input if you can; -v shows the details)\n")
        return EXIT_FAILURE


def _silence_stdout() -> None:
    # Python flushes stdout at exit and would report the broken pipe again; point it at /dev/null.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
