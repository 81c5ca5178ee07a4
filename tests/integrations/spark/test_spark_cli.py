"""``crystalperf spark-conf`` and the installation checks (no Spark application needed)."""

from __future__ import annotations

import pytest


def test_spark_conf_prints_submit_lines(capsys: pytest.CaptureFixture[str]) -> None:
    from crystalperf.core.cli import main
    from crystalperf.core.trace import SCHEMA_VERSION

    assert main(["spark-conf", "--output-dir", "/tmp/x", "--no-python-sampling"]) == 0
    out = capsys.readouterr().out
    # the plugin starts the listener itself (on Spark's status queue)
    assert "spark.extraListeners" not in out
    assert "--conf spark.plugins=org.crystalperf.spark.CrystalPerfPlugin" in out
    assert "crystalperf-spark.jar" in out and "spark.crystalperf.outputDir=/tmp/x" in out
    assert f"--conf spark.crystalperf.schemaVersion={SCHEMA_VERSION}" in out


def test_spark_conf_sets_the_cpu_budget_and_refuses_a_share_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    from crystalperf.core.cli import main

    assert main(["spark-conf", "--no-python-sampling", "--cpu-budget", "0.05"]) == 0
    out = capsys.readouterr().out
    # the JVMs read the conf, the PySpark workers the environment
    assert "spark.crystalperf.cpuBudget=0.05" in out and "CRYSTALPERF_CPU_BUDGET=0.05" in out
    with pytest.raises(SystemExit) as refused:
        main(["spark-conf", "--cpu-budget", "1.5"])
    assert refused.value.code == 2
    assert "--cpu-budget: '1.5' is not a share between 0 and 1" in capsys.readouterr().err


def test_configure_appends_to_existing_lists() -> None:
    from pyspark import SparkConf

    from crystalperf.integrations.spark import configure

    conf = SparkConf(loadDefaults=False).set("spark.plugins", "com.example.Plugin").set(
        "spark.extraListeners", "com.example.Other")
    configure(conf, python_sampling=False)
    assert conf.get("spark.plugins") == "com.example.Plugin,org.crystalperf.spark.CrystalPerfPlugin"
    assert conf.get("spark.extraListeners") == "com.example.Other"  # the plugin starts crystalperf's listener


def test_installed_pyspark_is_supported() -> None:
    # the unsupported-version and stale-jar messages are unit tests (tests/unit/test_spark_contract.py)
    import pyspark

    from crystalperf.integrations.spark import INTEGRATION, check_installation

    assert INTEGRATION.check() == pyspark.__version__
    assert check_installation().name == "crystalperf-spark.jar"


def test_python_worker_waiting_for_the_jvm_is_not_counted() -> None:
    from crystalperf.core import trace as tr
    from crystalperf.integrations.spark.pydaemon import without_jvm_waits

    samples = tr.StackSamples(
        origin=0.0,
        frames=[tr.Frame(name="pyspark.serializers.read_int", language="python"),
                tr.Frame(name="app.burn", language="python"), tr.Frame(name="pyspark.worker.main", language="python")],
        stacks=[[0, 2], [1, 2]], keys=[tr.SampleKey(operation="stage-1", task="3", thread="python-worker")],
        key=[0, 0], bucket=[0, 0], stack=[0, 1], count=[5, 7])
    kept = without_jvm_waits(samples)
    assert kept.stack == [1] and kept.count == [7]
