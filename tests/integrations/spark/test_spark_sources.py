"""Source location on stacks recorded from a real Spark job: the JVM frames of Spark, Hadoop, Parquet
and the JDK resolve to source (the JDK's src.zip) or, for the jars without sources, to their bytecode."""

from __future__ import annotations

from pathlib import Path


def test_sampled_jvm_time_resolves_to_located_functions(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    data = tmp_path / "table"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.crystalperf.sampleIntervalMs": "10"}})
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


def _elsewhere(path: str | None) -> str | None:
    """A recorded path as another machine sees it: under a prefix that does not exist there."""
    return f"/nonexistent-elsewhere{path}" if path and path.startswith("/") else path


def test_the_report_regenerates_the_same_on_another_machine(run_app, tmp_path: Path) -> None:
    """Analysed where no recorded path resolves and pyspark cannot be imported, the trace gives the job-end
    report's top functions, vectors and verdict: it carries the functions and vectors that report used."""
    import json
    import subprocess
    import sys

    from crystalperf.core.trace import load_trace, save_trace

    out = tmp_path / "report"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}", "spark.crystalperf.sampleIntervalMs": "10"}})
        df = spark.range(0, 2_000_000).selectExpr("id % 500 AS k", "sha2(cast(id AS string), 256) AS h")
        print("GROUPS", df.groupBy("k").agg({{"h": "max"}}).count())
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    job_end = result.report(out)
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert trace.samples is not None and trace.samples.resolution is not None
    env = trace.environment
    env.classpath = [p for p in (_elsewhere(c) for c in env.classpath) if p]
    env.source_roots = [p for p in (_elsewhere(r) for r in env.source_roots) if p]
    for frame in trace.samples.frames:
        frame.file = _elsewhere(frame.file)
        frame.module = _elsewhere(frame.module)
    moved = tmp_path / "elsewhere" / "crystalperf-trace.json.gz"
    moved.parent.mkdir()
    save_trace(trace, moved)
    analyse = ("import sys\nsys.modules['pyspark'] = None  # as on a machine without Spark\n"
               "from crystalperf.core.cli import main\nsys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", analyse, "analyze", str(moved), "-q"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    elsewhere = json.loads((moved.parent / "crystalperf-report.json").read_text())

    def by_path(report: dict) -> dict[str, dict]:
        return {op["path"]: op for op in report["operations"]}

    before, after = by_path(job_end), by_path(elsewhere)
    assert before.keys() == after.keys()
    for path, op in before.items():
        assert [f["name"] for f in after[path]["top_functions"]] == [f["name"] for f in op["top_functions"]], path
        for resource, share in op["vector"].items():
            assert abs(after[path]["vector"][resource] - share) <= 0.02, (path, resource)
    assert elsewhere["bottleneck"]["resource"] == job_end["bottleneck"]["resource"]
    assert elsewhere["bottleneck"]["sentence"] == job_end["bottleneck"]["sentence"]
