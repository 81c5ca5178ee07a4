"""The ``crystalperf`` command.

``analyze`` and ``predict`` live here; the models and the integrations add their own subcommands
through the ``crystalperf.commands`` entry point group (a ``register(subparsers)`` function each), so
the core never imports a framework. Bad input ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from crystalperf import __version__
from crystalperf.core.errors import BadInputError, CrystalPerfError

log = logging.getLogger("crystalperf")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse prints the whole usage; one line naming the problem is what we promise.
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_BAD_INPUT)


def _cmd_analyze(args: argparse.Namespace) -> int:
    from crystalperf.core.analysis import analyze_path
    from crystalperf.core.report.terminal import TerminalRenderer

    classifier = _classifier(args.classifier)
    out = Path(args.out) if args.out else None
    result = analyze_path(args.trace, out, classifier=classifier, source_roots=args.source_root or [])
    if not args.quiet:
        TerminalRenderer(width=_width()).print(result.report, _console())
        for path in result.files:
            sys.stdout.write(f"wrote {path}\n")
    return EXIT_OK


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
        f"(band {format_seconds(c.low_s or c.runtime_s)} – {format_seconds(c.high_s or c.runtime_s)}; "
        f"traced {format_seconds(prediction.baseline_runtime_s)}, speed-up {prediction.speedup:.2f}x)\n"
        f"  baselines: linear scaling {format_seconds(prediction.linear.runtime_s)}, "
        f"task replay without vectors {format_seconds(prediction.replay.runtime_s)}\n"
    )
    for note in prediction.notes:
        sys.stdout.write(f"  note: {note}\n")
    return EXIT_OK


def _cmd_import(args: argparse.Namespace) -> int:
    from crystalperf.core.trace import save_trace

    readers = _entry_points("crystalperf.trace_readers")
    if args.format not in readers:
        known = ", ".join(sorted(readers)) or "none installed"
        raise BadInputError(f"unknown trace format {args.format!r} (known: {known})")
    try:
        read = readers[args.format].load()
    except ImportError as exc:
        raise BadInputError(f"the {args.format} reader cannot be loaded: {exc}") from None
    source = Path(args.path)
    if not source.exists():
        raise BadInputError("no such file or directory", source)
    trace = read(source)
    out = Path(args.out) if args.out else source.parent / "crystalperf-trace.json.gz"
    if out.is_dir():
        out = out / "crystalperf-trace.json.gz"
    save_trace(trace, out)
    sys.stdout.write(f"wrote {out}\n")
    if args.analyze:
        from crystalperf.core.analysis import analyze_path
        from crystalperf.core.report.terminal import TerminalRenderer

        result = analyze_path(out, out.parent)
        TerminalRenderer(width=_width()).print(result.report, _console())
    return EXIT_OK


def _classifier(name: str | None):  # type: ignore[no-untyped-def]
    from crystalperf.core.classify import load_classifier

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
    p.set_defaults(func=_cmd_analyze)

    p = sub.add_parser("predict", help="predict the runtime under resource changes")
    p.add_argument("trace")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a changed resource: cores, executors, parallelism, slots, cpu_speed, cpu_share, "
                        "memory (4g), network (1gbit), disk (200MB/s), device (cpu|gpu), gpu_speedup")
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.add_argument("--classifier")
    p.set_defaults(func=_cmd_predict)

    p = sub.add_parser("import", help="turn a framework's own logs into a crystalperf trace")
    p.add_argument("format", help="trace reader, e.g. spark-eventlog (entry points crystalperf.trace_readers)")
    p.add_argument("path", help="the log file or directory")
    p.add_argument("--out", help="trace file or directory (default: next to the input)")
    p.add_argument("--analyze", action="store_true", help="also write the report and print a summary")
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
        sys.stderr.write(f"crystalperf: error: {exc}\n")
        return EXIT_BAD_INPUT
    except CrystalPerfError as exc:
        sys.stderr.write(f"crystalperf: error: {exc}\n")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
