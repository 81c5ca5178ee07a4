"""Build the small Java hooks (Spark listener/plugin, Flink reporter) into jars bundled as package data.

The jars are compiled with ``javac`` against the jars that the framework's own wheel ships (pyspark's
``jars/``, apache-flink's ``lib/``): no Maven download is possible on our machines. Every jar carries
``META-INF/crystalperf-sources.sha256``, the hash of the sources it was built from, so a test can prove
the bundled jar is current (the Java sources both jars share, ``crystalperf/integrations/java``, have a
hash entry of their own, ``META-INF/crystalperf-shared-sources.sha256``: the installed package compares the
first with the integration's ``java/`` directory alone). When the framework is not importable at build time (an isolated build
environment), the committed jar is used as it is, and a stale one is reported.

Run ``python hatch_build.py`` to rebuild every jar whose sources changed (from an environment with the
frameworks installed), or ``python hatch_build.py --check`` to only verify them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent
# Java sources compiled into every jar (the I/O counter sampler both hooks run).
SHARED_SOURCE_DIR = ROOT / "crystalperf/integrations/java"


class JavaJar(NamedTuple):
    name: str
    source_dir: Path  # Java sources, plus resources/ copied into the jar as they are
    jar: Path
    framework_module: str  # Python module whose install directory holds the framework jars
    jar_globs: tuple[str, ...]  # relative to that directory
    classpath_env: str  # overrides the framework lookup: a path-separated list of jars/dirs


JARS = (
    JavaJar(
        name="spark",
        source_dir=ROOT / "crystalperf/integrations/spark/java",
        jar=ROOT / "crystalperf/integrations/spark/crystalperf-spark.jar",
        framework_module="pyspark",
        jar_globs=("jars/*.jar",),
        classpath_env="CRYSTALPERF_SPARK_CLASSPATH",
    ),
    JavaJar(
        name="flink",
        source_dir=ROOT / "crystalperf/integrations/flink/java",
        jar=ROOT / "crystalperf/integrations/flink/crystalperf-flink.jar",
        framework_module="pyflink",
        jar_globs=("lib/*.jar", "opt/*.jar"),
        classpath_env="CRYSTALPERF_FLINK_CLASSPATH",
    ),
)


def _load_jars_module() -> Any:
    # The hash is the installed package's too (a stale jar is refused at run time); this build runs where
    # crystalperf itself may not be importable, so the stdlib-only module is loaded from its file.
    spec = importlib.util.spec_from_file_location("_crystalperf_jars", ROOT / "crystalperf/integrations/jars.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_jars = _load_jars_module()
HASH_ENTRY: str = _jars.HASH_ENTRY
SHARED_HASH_ENTRY: str = _jars.SHARED_HASH_ENTRY


def _files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def source_files(spec: JavaJar) -> list[Path]:
    return _files(spec.source_dir)


def shared_files() -> list[Path]:
    return _files(SHARED_SOURCE_DIR)


def sources_hash(spec: JavaJar) -> str | None:
    return _jars.sources_hash(spec.source_dir)  # type: ignore[no-any-return]


def shared_sources_hash() -> str | None:
    return _jars.sources_hash(SHARED_SOURCE_DIR)  # type: ignore[no-any-return]


def jar_hash(jar: Path) -> str | None:
    return _jars.jar_hash(jar)  # type: ignore[no-any-return]


def jar_shared_hash(jar: Path) -> str | None:
    return _jars.jar_hash(jar, SHARED_HASH_ENTRY)  # type: ignore[no-any-return]


def is_current(spec: JavaJar) -> bool:
    return jar_hash(spec.jar) == sources_hash(spec) and jar_shared_hash(spec.jar) == shared_sources_hash()


def framework_classpath(spec: JavaJar) -> list[str] | None:
    override = os.environ.get(spec.classpath_env)
    if override:
        return [p for p in override.split(os.pathsep) if p]
    found = importlib.util.find_spec(spec.framework_module)
    if found is None or not found.submodule_search_locations:
        return None
    base = Path(next(iter(found.submodule_search_locations)))
    jars = sorted(str(p) for pattern in spec.jar_globs for p in base.glob(pattern))
    return jars or None


def build(spec: JavaJar, classpath: list[str]) -> None:
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if not javac or not jar_tool:
        raise RuntimeError("javac and jar (a JDK 17) are needed to build the Java hooks")
    java_files = [p for p in [*source_files(spec), *shared_files()] if p.suffix == ".java"]
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        subprocess.run(
            [javac, "--release", "11", "-nowarn", "-encoding", "UTF-8", "-cp", os.pathsep.join(classpath),
             "-d", str(classes), *map(str, java_files)],
            check=True,
        )
        resources = spec.source_dir / "resources"
        if resources.is_dir():
            shutil.copytree(resources, classes, dirs_exist_ok=True)
        (classes / "META-INF").mkdir(exist_ok=True)
        (classes / HASH_ENTRY).write_text(f"{sources_hash(spec)}\n")
        if shared_files():
            (classes / SHARED_HASH_ENTRY).write_text(f"{shared_sources_hash()}\n")
        spec.jar.parent.mkdir(parents=True, exist_ok=True)
        tmp_jar = Path(tmp) / spec.jar.name
        # Fixed timestamps make the jar reproducible, so rebuilding unchanged sources changes nothing.
        subprocess.run([jar_tool, "--create", "--date=2024-01-01T00:00:00Z", "--file", str(tmp_jar),
                        "-C", str(classes), "."], check=True)
        shutil.copyfile(tmp_jar, spec.jar)


def ensure(spec: JavaJar, *, check_only: bool = False) -> str:
    """Rebuild one jar if its sources changed and the framework is reachable; say what happened."""
    if not source_files(spec):
        return f"{spec.name}: no Java sources"
    if is_current(spec):
        return f"{spec.name}: {spec.jar.name} is current"
    if check_only:
        return f"{spec.name}: {spec.jar.name} is STALE (rebuild with: python hatch_build.py)"
    classpath = framework_classpath(spec)
    if classpath is None:
        state = "stale" if spec.jar.exists() else "missing"
        return (f"{spec.name}: {spec.jar.name} is {state} and {spec.framework_module} is not importable here "
                f"(set {spec.classpath_env} or install the framework to rebuild)")
    build(spec, classpath)
    return f"{spec.name}: rebuilt {spec.jar.name}"


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface

    class CustomBuildHook(BuildHookInterface):  # type: ignore[misc]
        """hatchling calls this before building the wheel: jars are rebuilt when sources changed."""

        def initialize(self, version: str, build_data: dict) -> None:
            for spec in JARS:
                message = ensure(spec)
                self.app.display_info(message)
                if spec.jar.exists():
                    rel = spec.jar.relative_to(ROOT).as_posix()
                    build_data.setdefault("force_include", {})[str(spec.jar)] = rel

except ImportError:  # running as a script without hatchling
    pass


if __name__ == "__main__":
    check_only = "--check" in sys.argv[1:]
    results = [ensure(spec, check_only=check_only) for spec in JARS]
    print("\n".join(results))  # noqa: T201 - a build script talks to its user
    sys.exit(1 if any("STALE" in r or "missing" in r for r in results) else 0)
