"""The contract every framework integration implements.

Each ``integrations/<framework>/`` package has the same files for the same roles (see
``docs/architecture.md``): ``__init__.py`` re-exports only; ``config.py`` holds the settings helpers and
the package's :class:`Integration`; the hook (``callback.py``, or ``java/`` + ``pydaemon.py``);
``reader.py`` (the framework's native files -> parts); ``assemble.py`` (parts -> ``Trace``); ``finish.py``
(job end: merge, write, analyse), started as ``python -m crystalperf.integrations.<framework>.finish`` by
every hook; ``cli.py``; and ``whatif.py`` where the framework brings its own resource model.

The framework itself is never imported here: the version comes from the installed distribution's metadata.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from crystalperf.core import trace as tr
from crystalperf.core.errors import (
    BadInputError,
    FrameworkNotInstalledError,
    IntegrationSetupError,
    UnsupportedFrameworkVersionError,
)
from crystalperf.integrations.jars import SHARED_HASH_ENTRY, jar_hash, sources_hash

log = logging.getLogger("crystalperf")

Version = tuple[int, ...]


def parse_version(text: str) -> Version:
    """The release numbers a version string starts with (``4.1.0rc1`` -> ``(4, 1, 0)``); () for none."""
    found = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    return tuple(int(part) for part in found.group(1).split(".")) if found else ()


def _dotted(version: Version) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class Integration:
    """What crystalperf knows about one framework: how it is installed, which versions the hook supports
    (``minimum`` <= version < ``below``, the same range as the extra's pin), and its bundled jar."""

    name: str  # the extra's name and the package's: crystalperf.integrations.<name>
    module: str  # the framework's top-level Python module
    distributions: tuple[str, ...]  # the PyPI distributions that provide it, preferred first
    minimum: Version
    below: Version
    jar: str | None = None  # file name of the bundled jar in the package, if the hook is Java
    # what-if keys that resize a job of this framework (the trace's environment.scaling when it has none)
    scaling: tuple[str, ...] = ("cores",)

    @property
    def extra(self) -> str:
        return self.name

    @property
    def package(self) -> str:
        return f"crystalperf.integrations.{self.name}"

    @property
    def supported(self) -> str:
        return f"{self.distributions[0]}>={_dotted(self.minimum)},<{_dotted(self.below)}"

    def version(self) -> str | None:
        """The installed framework's version; None when it is not installed ("unknown" when its
        distribution metadata is missing, e.g. a framework on PYTHONPATH)."""
        try:
            if importlib.util.find_spec(self.module) is None:
                return None
        except (ImportError, ValueError):
            return None
        for distribution in self.distributions:
            try:
                return metadata.version(distribution)
            except metadata.PackageNotFoundError:
                continue
        return "unknown"

    def check(self) -> str:
        """The installed version, after checking the hook supports it; a typed error naming the fix otherwise."""
        version = self.version()
        if version is None:
            raise FrameworkNotInstalledError(self.module, self.extra)
        release = parse_version(version)
        if release and not (self.minimum <= release[: len(self.minimum)] and release < self.below):
            raise UnsupportedFrameworkVersionError(self.module, version, self.supported, self.extra)
        return version

    def jar_path(self) -> Path:
        """The bundled jar, checked to exist and to match the Java sources shipped beside it."""
        if self.jar is None:
            raise IntegrationSetupError(f"the {self.name} integration has no jar")
        package = resources.files(self.package)
        resource = package / self.jar
        path = Path(str(resource))
        if not resource.is_file() or not path.is_file():
            raise IntegrationSetupError(f"{path} is missing: reinstall crystalperf (pip install 'crystalperf[{self.extra}]')")
        built_from = jar_hash(resource)
        if built_from is None:
            raise IntegrationSetupError(f"{path} is damaged: reinstall crystalperf, or rebuild it with python hatch_build.py")
        current = sources_hash(package / "java")
        # the Java sources every hook compiles in sit beside the integration packages
        shared = sources_hash(resources.files(self.package.rpartition(".")[0]) / "java") if "." in self.package else None
        if (current is not None and current != built_from) or (
                shared is not None and shared != jar_hash(resource, SHARED_HASH_ENTRY)):
            raise IntegrationSetupError(f"{path} does not match its Java sources: rebuild it with python hatch_build.py")
        return path

    def finish_command(self, *args: str, python: str | None = None) -> list[str]:
        """The command that finishes a job of this framework (what every hook starts at job end)."""
        return [python or sys.executable, "-m", f"{self.package}.finish", *args]


def run_finish(command: list[str], log_path: Path, *, timeout_s: float | None = None) -> int | None:
    """Run a finish command with its output appended to log_path; its exit status, or None when it was
    still running after timeout_s (it is left to finish on its own, detached from the caller's session)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log.warning("crystalperf: the analysis goes on in the background (pid %d); see %s", process.pid, log_path)
        return None


EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
REPORT_JSON = "crystalperf-report.json"


def write_trace_and_report(trace: tr.Trace, out_dir: Path, *, analyze: bool = True) -> int:
    """The last step of every finish: write the trace, then the report; the exit status of the finish
    (1, with the reason on stderr, when either could not be written)."""
    from crystalperf.core.finish import finish_job

    if finish_job(trace, out_dir, analyze=analyze) is None:
        sys.stderr.write(f"crystalperf: error: the trace was not written to {out_dir}\n")
        return EXIT_FAILURE
    if analyze and not (out_dir / REPORT_JSON).is_file():
        sys.stderr.write(f"crystalperf: error: the report was not written to {out_dir} (the trace was)\n")
        return EXIT_FAILURE
    return EXIT_OK


# Tests only (with CRYSTALPERF_TESTING=1): seconds a hook's finish process sleeps first, to show the job's end does
# not wait for it.
SLOW_FINISH_ENV = "CRYSTALPERF_TEST_FINISH_DELAY_S"


def finish_main(integration: Integration, add_arguments: Callable[[argparse.ArgumentParser], None],
                run: Callable[[argparse.Namespace], int], argv: Sequence[str] | None = None) -> int:
    """``python -m crystalperf.integrations.<fw>.finish``: the same arguments as the ``<fw>-finish``
    subcommand, log lines on stderr, bad input as one line and exit status 2."""
    parser = argparse.ArgumentParser(prog=f"python -m {integration.package}.finish",
                                     description=f"job end of {integration.name}: write the trace and the report")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    delay = os.environ.get(SLOW_FINISH_ENV) if os.environ.get("CRYSTALPERF_TESTING") == "1" else None
    if delay:
        import time

        time.sleep(float(delay))
    try:
        return run(args)
    except BadInputError as exc:
        sys.stderr.write(f"crystalperf: error: {exc}\n")
        return EXIT_BAD_INPUT


def _budget_share(text: str) -> float:
    from crystalperf.core.record.budget import parse_share

    value = parse_share(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1")
    return value


def add_cpu_budget_option(parser: argparse.ArgumentParser) -> None:
    """``--cpu-budget``: the hook's CPU budget, a share in [0, 1] (anything else: one line, exit 2)."""
    parser.add_argument("--cpu-budget", type=_budget_share, default=None,
                        help="the hook's CPU budget, a share of the cores each process may use (default 0.01; "
                             "0 keeps the sampling interval whatever it costs)")


def register_finish_command(subparsers: argparse._SubParsersAction, integration: Integration, help: str) -> None:
    """``crystalperf <fw>-finish``: the job end a hook runs, by hand (after a crash, or with --no-analysis
    first); the same arguments and code as ``python -m crystalperf.integrations.<fw>.finish``."""
    finish = importlib.import_module(f"{integration.package}.finish")
    parser = subparsers.add_parser(f"{integration.name}-finish", help=help)
    finish.add_arguments(parser)
    parser.set_defaults(func=finish.run)
