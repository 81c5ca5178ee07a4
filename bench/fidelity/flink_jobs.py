"""The Flink jobs of the fidelity benchmark, run as ``python -m bench.fidelity.flink_jobs CONFIG_JSON``
with the Flink environment's Python (the harness starts it inside the job's cgroups).

Each job is Flink SQL on PyFlink's local mini cluster, streaming mode (batch mode where the job's params say
``batch``), with the crystalperf reporter configured as a user would (``crystalperf.integrations.flink.configure``
and ``record_plan``); the reporter's finisher writes the report when the job ends. The measured window is the job's
execution.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any

from bench.fidelity.probe import Window

UNTHROTTLED = 1_000_000_000  # datagen's default of 10,000 rows/s would pace every job


def fetch_bytes(url: str, n: int) -> int:
    total = 0
    with urllib.request.urlopen(f"{url}/bytes/{n}") as answer:
        while block := answer.read(1 << 16):
            total += len(block)
    return total


def cpu_pipeline(env: Any, rows: int, table: str = "gen", sink: str = "cpu_sink") -> str:
    env.execute_sql(f"""CREATE TABLE {table} (id BIGINT) WITH ('connector' = 'datagen',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '{rows}',
        'rows-per-second' = '{UNTHROTTLED}')""")
    env.execute_sql(f"CREATE TABLE {sink} (h STRING) WITH ('connector' = 'blackhole')")
    return f"""INSERT INTO {sink} SELECT SHA512(SHA512(SHA512(SHA256(CAST(id AS STRING))))) FROM {table}"""


def disk_pipeline(env: Any, path: str, table: str = "lines", sink: str = "disk_sink") -> str:
    env.execute_sql(f"""CREATE TABLE {table} (line STRING) WITH ('connector' = 'filesystem',
        'path' = 'file://{path}', 'format' = 'csv', 'csv.field-delimiter' = '|')""")
    env.execute_sql(f"CREATE TABLE {sink} (line STRING) WITH ('connector' = 'blackhole')")
    return f"INSERT INTO {sink} SELECT line FROM {table} WHERE line LIKE '%zzzz%'"


def scan_pipeline(env: Any, path: str, table: str = "files", sink: str = "scan_sink") -> str:
    """A file source's lines grouped by their first two characters: parsing and aggregating, CPU-bound when the
    file is in the page cache."""
    env.execute_sql(f"""CREATE TABLE {table} (line STRING) WITH ('connector' = 'filesystem',
        'path' = 'file://{path}', 'format' = 'csv', 'csv.field-delimiter' = '|')""")
    env.execute_sql(f"CREATE TABLE {sink} (k STRING, n BIGINT, m STRING) WITH ('connector' = 'blackhole')")
    return f"""INSERT INTO {sink} SELECT SUBSTRING(line, 1, 2), COUNT(*), MAX(SHA256(line)) FROM {table}
        GROUP BY SUBSTRING(line, 1, 2)"""


class _SetPlan:
    """A statement set in the shape ``record_plan`` asks of a ``TableEnvironment``."""

    def __init__(self, statements: Any) -> None:
        self.statements = statements

    def explain_sql(self, _statement: str, *details: Any) -> str:
        return str(self.statements.explain(*details))


def main() -> None:
    config = json.loads(sys.argv[1])
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    from crystalperf.integrations import flink as cpflink

    job, p = config["job"], config["params"]
    conf = cpflink.configure(Configuration(), config["out"])
    conf.set_string("parallelism.default", str(p.get("parallelism", 2)))
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    mode = EnvironmentSettings.new_instance()
    mode = mode.in_batch_mode() if p.get("batch") else mode.in_streaming_mode()
    env = TableEnvironment.create(mode.with_configuration(conf).build())
    queries: list[str] = []
    if job in ("cpu", "mixed"):
        queries.append(cpu_pipeline(env, p["rows"]))
    if job in ("disk", "mixed"):
        queries.append(disk_pipeline(env, config["files"][0]))
    if job == "scan":
        queries.append(scan_pipeline(env, config["files"][0]))
    if job == "idle":
        env.execute_sql(f"""CREATE TABLE slow (id BIGINT, v DOUBLE) WITH ('connector' = 'datagen',
            'number-of-rows' = '{p["rows"]}', 'rows-per-second' = '{p["rate"]}')""")
        env.execute_sql("CREATE TABLE idle_sink (id BIGINT, v DOUBLE) WITH ('connector' = 'blackhole')")
        queries.append("INSERT INTO idle_sink SELECT id, v * 2 FROM slow")
    if job == "network":
        from pyflink.table.udf import udf

        url = config["url"]
        n = p["bytes"]
        env.create_temporary_function("pull", udf(lambda i: fetch_bytes(url, n), result_type="BIGINT"))
        env.execute_sql(f"""CREATE TABLE requests (id BIGINT) WITH ('connector' = 'datagen',
            'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '{p["requests"]}')""")
        env.execute_sql("CREATE TABLE net_sink (n BIGINT) WITH ('connector' = 'blackhole')")
        queries.append("INSERT INTO net_sink SELECT pull(id) FROM requests")
    if len(queries) == 1:
        cpflink.record_plan(env, config["out"], queries[0])
        with Window(config, slots=p.get("parallelism", 2)):
            env.execute_sql(queries[0]).wait()
    else:
        statements = env.create_statement_set()
        for query in queries:
            statements.add_insert_sql(query)
        # record_plan explains one statement of a TableEnvironment; a statement set explains itself
        cpflink.record_plan(_SetPlan(statements), config["out"], "the statement set")
        with Window(config, slots=p.get("parallelism", 2)):
            statements.execute().wait()


if __name__ == "__main__":
    main()
