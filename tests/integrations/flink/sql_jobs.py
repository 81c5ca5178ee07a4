"""What the Flink tests' local SQL jobs share: a batch TableEnvironment, and a generated keyed source with
a blackhole sink (the sink discards rows: collecting them back into Python would take minutes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def batch_table_env(config: Any, parallelism: int) -> Any:
    """A batch ``TableEnvironment`` on the PyFlink ``Configuration`` (the reporter's entries set on it)."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    config.set_string("parallelism.default", str(parallelism))
    return TableEnvironment.create(EnvironmentSettings.new_instance().in_batch_mode().with_configuration(config).build())


def create_keyed_tables(env: Any, rows: int, *, keys: int = 10, sink_value: str = "s DOUBLE",
                        rows_per_second: int | None = None) -> None:
    """``src (k INT, v DOUBLE)``: ``rows`` generated rows with ``k`` in [0, keys), at datagen's default rate (10,000
    rows/s) or ``rows_per_second``; ``snk (k INT, <sink_value>)``."""
    rate = f", 'rows-per-second'='{rows_per_second}'" if rows_per_second else ""
    env.execute_sql(
        f"CREATE TABLE src (k INT, v DOUBLE) WITH ('connector'='datagen', 'number-of-rows'='{rows}', "
        f"'fields.k.min'='0', 'fields.k.max'='{keys - 1}'{rate})"
    )
    env.execute_sql(f"CREATE TABLE snk (k INT, {sink_value}) WITH ('connector'='blackhole')")


# A job of these tests ends within a minute on a 2-core machine; one still running after this long is stuck (a
# TaskManager lost, a slot never granted) and fails with the cluster's logs, not at CI's time limit.
CLUSTER_JOB_TIMEOUT_S = 300


def run_on_cluster(env: Any, statement: str, logs: Callable[[], str]) -> str:
    """Run ``statement`` on a standalone cluster and wait for it, at most ``CLUSTER_JOB_TIMEOUT_S``; its job id."""
    import pytest

    result = env.execute_sql(statement)
    try:
        result.wait(CLUSTER_JOB_TIMEOUT_S * 1000)
    except Exception as exc:  # py4j's wrapper of the TimeoutException, or the job's own failure
        pytest.fail(f"the job did not finish in {CLUSTER_JOB_TIMEOUT_S} s: {str(exc)[:2000]}\n{logs()}")
    return str(result.get_job_client().get_job_id())

