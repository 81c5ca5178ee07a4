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
