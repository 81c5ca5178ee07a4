"""The reporter's memory stays bounded on a real job with 1,000 operator subtasks (5 operators x 200)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crystalperf.integrations import flink as cpflink

from .sql_jobs import batch_table_env

PARALLELISM = 200
MAX_SCOPES = 600
MAX_SAMPLE_ROWS = 300


def test_bounds_hold_on_a_job_with_1000_operator_subtasks(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    from pyflink.common import Configuration

    config = cpflink.configure(Configuration(), tmp_path, analyze=False)
    # bounds lowered from their defaults (200,000 scopes, 50,000 sample rows) so this job reaches them
    config.set_string("metrics.reporter.crystalperf.max.scopes", str(MAX_SCOPES))
    config.set_string("metrics.reporter.crystalperf.max.sample.rows", str(MAX_SAMPLE_ROWS))
    config.set_string("metrics.reporter.crystalperf.sample.interval.ms", "20")
    config.set_string("execution.batch.adaptive.auto-parallelism.enabled", "false")
    for key in ("taskmanager.memory.network.min", "taskmanager.memory.network.max"):
        config.set_string(key, "512mb")  # 600 subtasks' partitions and gates need more than the default
    env = batch_table_env(config, PARALLELISM)
    for table in ("src1", "src2"):
        env.execute_sql(
            f"CREATE TABLE {table} (k INT, v DOUBLE) WITH ('connector'='datagen', 'number-of-rows'='50000')"
        )
    env.execute_sql("CREATE TABLE snk (h STRING) WITH ('connector'='blackhole')")
    # two sources, each with a calc, feed the sink writer point-wise: 5 operators x 200 subtasks
    statement = (
        "INSERT INTO snk SELECT SHA256(CAST(v * 3 AS STRING)) FROM src1 WHERE k % 7 <> 0 "
        "UNION ALL SELECT SHA256(CAST(v + k AS STRING)) FROM src2 WHERE k % 5 <> 0"
    )
    plan_path = cpflink.record_plan(env, tmp_path, statement)
    assert plan_path is not None
    nodes = json.loads(plan_path.read_text())["plan"]["nodes"]
    assert sum(int(n["parallelism"]) for n in nodes) >= 1000
    env.execute_sql(statement).wait()
    files = cpflink.wait_for_metrics(tmp_path)
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    operator_subtasks = {
        (s["operator_name"], s["subtask_index"]) for s in doc["scopes"] if s.get("operator_name")
    }
    assert len(doc["scopes"]) <= MAX_SCOPES and doc["dropped_metrics"] > 0
    # past the bound a subtask's samples go to its "[other]" row (part version 4: rows name interned stacks)
    other = doc["stacks"].index("[other]\t\t0\n") if "[other]\t\t0\n" in doc["stacks"] else None
    assert len([row for row in doc["samples"] if row[3] != other]) <= MAX_SAMPLE_ROWS
    assert len(operator_subtasks) < 1000  # the job had more; the rest were counted as dropped
    trace = cpflink.read_metrics(files[0])
    assert any("memory bound" in w for w in trace.warnings)


def _rewrites_of_a_job(out: Path, budget: str) -> int:
    """Runs a job of a few seconds whose open part may be rewritten every 50 ms; its part's count of rewrites."""
    from pyflink.common import Configuration

    config = cpflink.configure(Configuration(), out, analyze=False)
    config.set_string("metrics.reporter.crystalperf.flush.interval.ms", "50")
    config.set_string("metrics.reporter.crystalperf.cpu.budget", budget)
    env = batch_table_env(config, 1)
    env.execute_sql("CREATE TABLE src (v DOUBLE) WITH ('connector'='datagen', 'number-of-rows'='3000000', "
                    "'rows-per-second'='1000000000')")
    env.execute_sql("CREATE TABLE snk (h STRING) WITH ('connector'='blackhole')")
    env.execute_sql("INSERT INTO snk SELECT SHA256(CAST(v AS STRING)) FROM src").wait()
    files = cpflink.wait_for_metrics(out)
    assert len(files) == 1
    return int(json.loads(files[0].read_text())["hook"]["rewrites"])


def test_an_open_jobs_part_is_rewritten_within_a_share_of_the_budget(tmp_path: Path) -> None:
    """A part is rewritten whole while its job runs (a long job's grows): without a budget every flush interval;
    under one, no more often than a quarter of the budget pays for. At a budget of 0.01 % of the cores a rewrite of
    even a few hundred microseconds of CPU waits seconds, so a job of a few seconds sees one or two."""
    pytest.importorskip("pyflink")
    unbudgeted = _rewrites_of_a_job(tmp_path / "off", "0")
    budgeted = _rewrites_of_a_job(tmp_path / "tiny", "0.0001")
    assert unbudgeted >= 10
    assert 1 <= budgeted <= 3
