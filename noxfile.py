"""Test sessions, one per environment: the frameworks pin conflicting versions (protobuf, numpy...),
so each integration is tested in a virtualenv of its own. Each framework's tier installs what a user of it
installs (`.[spark]`, `.[tensorflow]`, `.[flink]`: the shipped sparse classifier needs no torch); the models
tier installs torch first from the pinned CPU build, so that nothing resolves it to a CUDA build."""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.sessions = ["lint", "unit", "package", "models", "spark", "tensorflow", "flink"]
nox.options.reuse_existing_virtualenvs = True
# A machine without one of the Pythons below runs what it has: nox skips the others and says so.
nox.options.error_on_missing_interpreters = False

# The framework-free core on the oldest Python of requires-python, the newest, and 3.11, where the pinned CPU
# build of torch exists and the other tiers run.
UNIT_PYTHONS = ["3.10", "3.11", "3.13"]
PYTHON = "3.11"
TORCH = "torch==2.13.0"
HERE = Path(__file__).resolve().parent


def skip_without_tests(session: nox.Session, where: str) -> None:
    """A tier with no test files yet is skipped, saying so, before its framework is installed."""
    if not any((HERE / where).rglob("test_*.py")):
        session.skip(f"no tests under {where} yet")


def run_tests(session: nox.Session, where: str) -> None:
    session.run("pytest", where, *session.posargs)


# Lint and the packaging check need no particular Python: they run on the one that runs nox.
@nox.session(python=None)
def lint(session: nox.Session) -> None:
    """ruff over the project, mypy over the whole package (frameworks absent: their types are Any), and the
    bundled jars' freshness."""
    session.install("ruff", "mypy", "pydantic>=2.6,<3", "networkx", "rich", "hatchling")
    session.run("ruff", "check", "crystalperf", "tests", "bench", "noxfile.py", "hatch_build.py")
    session.run("mypy", "crystalperf", "hatch_build.py")
    session.run("python", "hatch_build.py", "--check")


@nox.session(python=UNIT_PYTHONS)
def unit(session: nox.Session) -> None:
    """The framework-free core: no Spark, TensorFlow, Flink or torch installed."""
    skip_without_tests(session, "tests/unit")
    # The event-log codecs' libraries and msgspec (from the spark extra, without pyspark): the codec and reader
    # tests run here; pyarrow (the fleet extra) for the fleet's table.
    session.install("-e", ".[test,fleet]", "zstandard>=0.22", "cramjam>=2.8", "msgspec>=0.18")
    if session.python != PYTHON and not session.posargs:
        # The other Pythons run every test but the slow ones (a minute of CLI processes over hostile inputs): what
        # differs between interpreters is the language, not the process start; 3.11 runs them all.
        session.run("pytest", "tests/unit", "-m", "not slow")
        return
    run_tests(session, "tests/unit")


@nox.session(python=None)
def package(session: nox.Session) -> None:
    """The sdist and the wheel as a user gets them: built, installed into a fresh venv, run."""
    session.install("pytest>=8", "pytest-timeout>=2.3", "build")
    run_tests(session, "tests/packaging")


@nox.session(python=PYTHON)
def models(session: nox.Session) -> None:
    """The resource classifiers (torch, flair, tree-sitter)."""
    skip_without_tests(session, "tests/models")
    session.install(TORCH)
    session.install("-e", ".[test,models]")
    run_tests(session, "tests/models")


@nox.session(python=PYTHON)
def spark(session: nox.Session) -> None:
    """Real local Spark jobs with the listener and the executor plugin."""
    skip_without_tests(session, "tests/integrations/spark")
    # pyspark[connect] (gRPC, pandas, pyarrow) for the test of a Spark Connect client; pandas as PySpark supports it
    session.install("-e", ".[test,spark,fleet]", "pyspark[connect]", "pandas<3")
    run_tests(session, "tests/integrations/spark")


@nox.session(python=PYTHON)
def tensorflow(session: nox.Session) -> None:
    """Real Keras fit() runs with the callback."""
    skip_without_tests(session, "tests/integrations/tensorflow")
    # TensorBoard only for the tests that run the callback next to TensorBoard's own profiler; torch (first, the
    # pinned CPU build) for the test of Keras on its PyTorch backend.
    session.install(TORCH)
    session.install("-e", ".[test,tensorflow]", "tensorboard")
    run_tests(session, "tests/integrations/tensorflow")


@nox.session(python=PYTHON)
def flink(session: nox.Session) -> None:
    """Real PyFlink jobs with the metrics reporter."""
    skip_without_tests(session, "tests/integrations/flink")
    session.install("-e", ".[test,flink]")
    run_tests(session, "tests/integrations/flink")
