"""A real PySpark program that works in Python between its jobs: the driver's sampler names that work, which no
JVM sampler sees, in the report's ``bottleneck.driver_work`` and its advice."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from crystalperf.core import trace as tr  # noqa: E402
from crystalperf.core.trace import load_trace  # noqa: E402


def test_the_drivers_python_between_jobs_is_named(run_app, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = run_app(f'''
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        spark.range(0, 100_000, numPartitions=2).selectExpr("sum(id)").collect()

        def rank_rows_in_python(n):
            total = 0
            for i in range(n):
                total = (total + i * i) % 1_000_003
            return total

        import time
        started = time.time()
        while time.time() - started < 1.5:
            rank_rows_in_python(200_000)
        spark.range(0, 100_000, numPartitions=2).selectExpr("max(id)").collect()
        spark.stop()

        # a second session of the same process: its report has its own driver work only
        def sort_rows_in_python(n):
            return sorted(range(n, 0, -1))[:3]

        spark = session(**{{"spark.crystalperf.outputDir": "{out}-2"}})
        started = time.time()
        while time.time() - started < 1.0:
            sort_rows_in_python(200_000)
        spark.range(0, 100_000, numPartitions=2).selectExpr("max(id)").collect()
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert trace.samples is not None
    assert any(k.operation == tr.DRIVER_OPERATION for k in trace.samples.keys)
    assert not any(op.id == tr.DRIVER_OPERATION for op in trace.iter_operations())
    work = result.report(out)["bottleneck"]["driver_work"]
    assert work is not None, "no driver work in the report"
    ranked = {f["name"]: f for f in work["functions"]}
    assert "__main__.rank_rows_in_python" in ranked, work["functions"]
    assert ranked["__main__.rank_rows_in_python"]["resource"] == "cpu"
    assert ranked["__main__.rank_rows_in_python"]["where"].endswith("app.py:" + str(
        next(n for n, line in enumerate((tmp_path / "app.py").read_text().splitlines(), 1)
             if line.startswith("def rank_rows_in_python"))))
    assert ranked["__main__.rank_rows_in_python"]["seconds"] >= 0.5
    assert not any(name.startswith("crystalperf.") for name in ranked)
    second = {f["name"] for f in result.report(Path(f"{out}-2"))["bottleneck"]["driver_work"]["functions"]}
    assert "__main__.sort_rows_in_python" in second and "__main__.rank_rows_in_python" not in second, second


def test_the_driver_jvms_work_on_the_programs_calls_is_named(run_app, tmp_path: Path) -> None:
    """A plan built column by column: each ``withColumn`` analyses the whole plan again in the driver's JVM, on the
    py4j thread serving the call, with no job running. The driver's sampler names that call and what did its work."""
    out = tmp_path / "report"
    result = run_app(f'''
        from pyspark.sql import functions as F
        spark = session(**{{"spark.crystalperf.outputDir": "{out}"}})
        spark.range(0, 1000, numPartitions=2).selectExpr("sum(id)").collect()
        df = spark.range(0, 1000, numPartitions=2)
        for i in range(200):
            df = df.withColumn(f"c{{i}}", F.col("id") * i + F.lit(i))
        df.selectExpr("sum(c199)").collect()
        spark.stop()
    ''')
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load_trace(out / "crystalperf-trace.json.gz")
    assert trace.samples is not None
    assert any(k.operation == tr.DRIVER_OPERATION and k.thread == "jvm-driver" for k in trace.samples.keys)
    work = result.report(out)["bottleneck"]["driver_work"]
    assert work is not None and work["jvm_s"] > 0, work
    calls = {f["name"].rsplit(".", 2)[-2] + "." + f["name"].rsplit(".", 1)[-1]: f
             for f in work["functions"] if f["runtime"] == "jvm"}
    assert "Dataset.withColumn" in calls, work["functions"]
    assert calls["Dataset.withColumn"]["resource"] == "cpu" and calls["Dataset.withColumn"]["functions"]
    assert "the driver's JVM worked about" in work["sentence"]


def test_a_java_programs_main_thread_is_sampled_between_its_jobs(tmp_path: Path) -> None:
    """spark-submit of a Java program: its ``main`` thread's own loop between two jobs is the driver's work."""
    import os
    import shlex
    import shutil
    import subprocess
    import sys

    import pyspark

    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("no javac")
    jars = Path(pyspark.__file__).parent / "jars"
    source = tmp_path / "src" / "Crunch.java"
    source.parent.mkdir()
    source.write_text(
        "import org.apache.spark.sql.SparkSession;\n"
        "public class Crunch {\n"
        "  static long crunch(long n) { long h = 7; for (long i = 0; i < n; i++) { h = h * 31 + (i ^ (h >>> 7)); }"
        " return h; }\n"
        "  public static void main(String[] args) {\n"
        "    SparkSession spark = SparkSession.builder().appName(\"crunch\").getOrCreate();\n"
        "    System.out.println(\"FIRST \" + spark.range(0, 100000, 1, 2).count());\n"
        "    long started = System.nanoTime(); long h = 0;\n"
        "    while (System.nanoTime() - started < 1_500_000_000L) { h += crunch(2_000_000); }\n"
        "    System.out.println(\"H \" + h + \" SECOND \" + spark.range(0, 100000, 1, 2).count());\n"
        "    spark.stop();\n"
        "  }\n"
        "}\n")
    classes = tmp_path / "classes"
    subprocess.run([javac, "-d", str(classes), "-cp", f"{jars}/*", str(source)], check=True, timeout=120)
    subprocess.run(["jar", "cf", str(tmp_path / "crunch.jar"), "-C", str(classes), "."], check=True, timeout=60)
    out = tmp_path / "report"
    conf = subprocess.run([sys.executable, "-m", "crystalperf.core.cli", "spark-conf", "--output-dir", str(out)],
                          capture_output=True, text=True, check=True).stdout
    args = shlex.split(conf.replace("\\\n", " "))
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    done = subprocess.run([str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", *args,
                           "--class", "Crunch", str(tmp_path / "crunch.jar")],
                          cwd=tmp_path, env=dict(os.environ, CRYSTALPERF_TESTING="1"), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SECOND 100000" in done.stdout
    trace = load_trace(out / "crystalperf-trace.json.gz")
    from crystalperf.core.analysis import analyze

    work = analyze(trace).report["bottleneck"]["driver_work"]
    assert work is not None, "no driver work in the report"
    main = next((f for f in work["functions"] if f["runtime"] == "jvm" and f["name"] == "Crunch.main"), None)
    assert main is not None, work["functions"]
    assert main["seconds"] >= 0.5 and main["resource"] == "cpu"
    assert any(f["name"] == "Crunch.crunch" for f in main["functions"]), main
