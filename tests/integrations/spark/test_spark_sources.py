"""Source location on stacks recorded from a real Spark job: the JVM frames of Spark, Hadoop, Parquet
and the JDK resolve to source (the JDK's src.zip) or, for the jars without sources, to their bytecode."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.integrations.spark.reports import assert_no_plumbing_top_functions


def test_sampled_jvm_time_resolves_to_located_functions(run_app, tmp_path: Path) -> None:
    # Sampled densely under a raised CPU budget: at the default 1 % a job this short gets a few rounds a second.
    out = tmp_path / "report"
    data = tmp_path / "table"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.crystalperf.sampleIntervalMs": "10",
                             "spark.crystalperf.cpuBudget": "0.1"}})
        df = spark.range(0, 3_000_000).selectExpr("id % 1000 AS k", "sha2(cast(id AS string), 256) AS h")
        df.write.mode("overwrite").parquet("{data}")
        back = spark.read.parquet("{data}")
        print("GROUPS", back.groupBy("k").agg({{"h": "max"}}).collect()[:1])
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    sources = result.report(out)["sources"]
    by_origin = sources["samples_by_origin"]
    print("samples by how the function was found:", by_origin, "located:", sources["located_fraction"])  # noqa: T201
    assert sources["samples"] >= 50, sources
    assert sources["located_fraction"] >= 0.9, by_origin
    # Spark's own frames have no sources on this machine: their bytecode must be read.
    assert by_origin.get("bytecode", 0) > 0, by_origin


ROOT = Path(__file__).resolve().parents[3]
ELSEWHERE = "/nonexistent-elsewhere"
# An absolute path inside a recorded string (a property's list of jars, a call site's file): it starts the
# string or follows a separator, so "a/b" inside code or names is not one.
_ABSOLUTE_PATH = re.compile(r"(?<![\w./])/[^\s,:;'\"()\[\]<>=]+")
# Strings that are a function's text, not a path the trace recorded.
_NOT_PATHS = frozenset({"code", "doc", "name", "qualified_name"})


def _elsewhere(value: Any) -> Any:
    """A recorded document as another machine sees it: every absolute path it holds moved under a prefix
    that does not exist there (classpath, source roots, frame files and jars, properties, call sites)."""
    if isinstance(value, str):
        return _ABSOLUTE_PATH.sub(lambda m: ELSEWHERE + m.group(0), value)
    if isinstance(value, list):
        return [_elsewhere(v) for v in value]
    if isinstance(value, dict):
        return {k: v if k in _NOT_PATHS else _elsewhere(v) for k, v in value.items()}
    return value


def _paths_left(value: Any) -> list[str]:
    """Recorded absolute paths that still resolve on this machine."""
    if isinstance(value, str):
        return [p for p in _ABSOLUTE_PATH.findall(value) if not p.startswith(ELSEWHERE) and Path(p).exists()]
    if isinstance(value, list):
        return [p for v in value for p in _paths_left(v)]
    if isinstance(value, dict):
        return [p for k, v in value.items() if k not in _NOT_PATHS for p in _paths_left(v)]
    return []


def _python_without_pyspark() -> tuple[list[str], str]:
    """A Python that runs crystalperf but has no pyspark: the unit tier's environment, else this one with
    pyspark made unimportable."""
    unit = ROOT / ".nox" / "unit" / "bin" / "python"
    check = "import importlib.util, sys\nassert importlib.util.find_spec('pyspark') is None, 'pyspark found'\n"
    if unit.is_file():
        return [str(unit)], check
    return [sys.executable], "import sys\nsys.modules['pyspark'] = None  # as on a machine without Spark\n"


def test_the_report_regenerates_the_same_on_another_machine(run_app, tmp_path: Path) -> None:
    """Analysed where no recorded path resolves and pyspark is not installed, the trace gives the job-end
    report's top functions, vectors and verdict: it carries the functions and vectors that report used."""
    from crystalperf.core.trace import parse_trace, save_trace

    out = tmp_path / "report"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.crystalperf.sampleIntervalMs": "10",
                             "spark.crystalperf.cpuBudget": "0.1"}})
        df = spark.range(0, 2_000_000).selectExpr("id % 500 AS k", "sha2(cast(id AS string), 256) AS h")
        print("GROUPS", df.groupBy("k").agg({{"h": "max"}}).count())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    job_end = result.report(out)
    recorded = json.loads(gzip.decompress((out / "crystalperf-trace.json.gz").read_bytes()))
    assert recorded["samples"].get("resolution") is not None
    assert recorded["environment"]["classpath"] and _paths_left(recorded), "the trace records paths"
    moved_doc = _elsewhere(recorded)
    assert not _paths_left(moved_doc), _paths_left(moved_doc)[:5]
    moved = tmp_path / "elsewhere" / "crystalperf-trace.json.gz"
    moved.parent.mkdir()
    save_trace(parse_trace(moved_doc, moved), moved)
    python, prelude = _python_without_pyspark()
    analyse = prelude + "from crystalperf.core.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK", "SPARK", "CRYSTALPERF_SPARK")) and k not in ("PYTHONPATH", "JAVA_HOME")}
    done = subprocess.run([*python, "-c", analyse, "analyze", str(moved), "-q"], capture_output=True, text=True,
                          timeout=600, cwd=moved.parent, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    elsewhere = json.loads((moved.parent / "crystalperf-report.json").read_text())
    assert_no_plumbing_top_functions(elsewhere)

    def by_path(report: dict) -> dict[str, dict]:
        return {op["path"]: op for op in report["operations"]}

    before, after = by_path(job_end), by_path(elsewhere)
    assert before.keys() == after.keys()
    for path, op in before.items():
        assert [f["name"] for f in after[path]["top_functions"]] == [f["name"] for f in op["top_functions"]], path
        assert after[path]["vector"].keys() == op["vector"].keys(), path
        for resource, share in op["vector"].items():  # cpu, disk, network and waiting
            assert abs(after[path]["vector"][resource] - share) <= 0.02, (path, resource)
    assert elsewhere["bottleneck"]["resource"] == job_end["bottleneck"]["resource"]
    assert elsewhere["bottleneck"]["sentence"] == job_end["bottleneck"]["sentence"]
