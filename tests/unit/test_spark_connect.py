"""Spark Connect requests as names (by hand, from the text a Connect server gives a job's call site), and
``configure`` on a builder for a remote Connect server."""

from __future__ import annotations

import logging

import pytest

from crystalperf.core import trace as tr
from crystalperf.integrations.spark.assemble import name_operations, name_python_call_sites
from crystalperf.integrations.spark.config import _connect_remote, configure
from crystalperf.integrations.spark.connect import MAX_SUMMARY, connect_name, plan_summary
from crystalperf.integrations.spark.pydriver import DriverCall

# The long call site Spark Connect 4.3 gave a job of ``range().withColumn().groupBy().count().count()`` (values
# elided by the server, as it writes them).
GROUPBY_COUNT = '''session_id: "d66eea4f-8fc9-47b8-a478-d1c09a21c33c"
plan {
  root {
    common {
      plan_id: 3
    }
    aggregate {
      input {
        common {
          plan_id: 2
        }
        aggregate {
          input {
            common {
              plan_id: 1
            }
            with_columns {
              input {
                common {
                }
                range {
                }
              }
              aliases {
                expr {
                }
                name: "h"
              }
            }
          }
          group_type: GROUP_TYPE_GROUPBY
        }
      }
      group_type: GROUP_TYPE_GROUPBY
    }
  }
}
client_type: "_SPARK_CONNECT_PYTHON spark/4.3.0 os/linux python/3.11.7"
'''

JOIN_AND_WRITE = '''plan {
  command {
    write_operation {
      input {
        join {
          left {
            read {
              data_source {
                format: "parquet"
              }
            }
          }
          right {
            filter {
              input {
                read {
                  named_table {
                    unparsed_identifier: "sales.orders"
                  }
                }
              }
            }
          }
        }
      }
      mode: SAVE_MODE_OVERWRITE
    }
  }
}
'''


def test_a_request_is_named_after_its_relations_in_the_order_the_data_flows() -> None:
    assert plan_summary(GROUPBY_COUNT) == "range → with_columns → aggregate → aggregate"
    assert plan_summary(JOIN_AND_WRITE) == "join(read parquet, read sales.orders → filter) → write_operation"
    assert plan_summary('plan {\n  root {\n    sql {\n      query: "SELECT   a,\\n b FROM t"\n    }\n  }\n}') == (
        "sql: SELECT a,\\n b FROM t")
    assert plan_summary('session_id: "x"\nconfig {\n  operation {\n  }\n}') is None  # a request with no plan


def test_a_long_or_deep_request_stays_a_line() -> None:
    deep = "plan {\n root {\n" + "project {\n input {\n" * 500 + "range {\n}\n" + "}\n}\n" * 500 + "}\n}\n"
    summary = plan_summary(deep)
    assert summary is not None and len(summary) <= MAX_SUMMARY and summary.startswith("… → ")
    # braces never closed, nested past the depth followed: read as far as it goes
    assert plan_summary("plan {\n" + "root {\n" * 10_000) == "root"


def test_only_a_connect_call_site_gets_a_connect_name() -> None:
    assert connect_name("count at NativeMethodAccessorImpl.java:0", None) is None
    assert connect_name('Spark Connect - session_id: "x"\nplan {\n  root {\n    common {\n ...', GROUPBY_COUNT) == (
        "Spark Connect: range → with_columns → aggregate → aggregate")
    assert connect_name('Spark Connect - session_id: "x"', None) == "Spark Connect request"


def _connect_trace() -> tr.Trace:
    site = 'Spark Connect - session_id: "d66e"\nplan {\n  root {\n    common {\n      plan_id: 3\n    }\n    ...'
    stage = tr.Operation(id="stage-0", name=f"stage 0: {site}", kind="stage", start=1.0, end=2.0)
    job = tr.Operation(id="job-0", name=f"job 0: {site}", kind="job", start=1.0, end=2.0, children=[stage],
                       attributes={"call_site": site, "description": site, "call_site_long": GROUPBY_COUNT,
                                   "sql_execution_id": "0"})
    return tr.Trace(producer=tr.Producer(version="0", hook="spark-listener"),
                    application=tr.Application(framework="spark", id="app", name="a", start=0.0, end=3.0),
                    environment=tr.Environment(), operations=[job],
                    sql_queries=[tr.SqlQuery(execution_id="0", description=site)])


def test_connect_jobs_stages_and_queries_are_renamed_and_given_the_program_s_line() -> None:
    trace = _connect_trace()
    name_operations(trace)
    job = trace.operations[0]
    assert job.name == "job 0: Spark Connect: range → with_columns → aggregate → aggregate"
    assert job.children[0].name == "stage 0: Spark Connect: range → with_columns → aggregate → aggregate"
    assert job.children[0].attributes["spark_stage_name"].startswith("Spark Connect - ")
    assert trace.sql_queries[0].description == "Spark Connect: range → with_columns → aggregate → aggregate"
    # the client's request that was running when the job started: the program's line
    assert name_python_call_sites(trace, [DriverCall(0.9, 2.1, 1, "/jobs/etl.py", 12)]) == 1
    assert job.name.endswith(" at /jobs/etl.py:12") and job.children[0].name.endswith(" at /jobs/etl.py:12")
    assert trace.sql_queries[0].description.endswith(" at /jobs/etl.py:12")


class _Builder:
    def __init__(self, options: dict[str, str]) -> None:
        self._options = dict(options)

    def config(self, key: str, value: str) -> _Builder:
        self._options[key] = value
        return self


def test_where_a_connect_builder_connects(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SPARK_REMOTE", "SPARK_API_MODE", "MASTER"):
        monkeypatch.delenv(name, raising=False)
    assert _connect_remote({"spark.remote": "local[2]"}) == "local[2]"
    # connect mode by the API setting: PySpark starts the server in this process, for any master
    assert _connect_remote({"spark.api.mode": "connect", "spark.master": "spark://m:7077"}) == "spark://m:7077"
    assert _connect_remote({"spark.master": "local[2]"}) is None


def test_a_builder_for_a_remote_connect_server_is_left_as_it_is(caplog: pytest.LogCaptureFixture) -> None:
    builder = _Builder({"spark.remote": "sc://spark.example:15002"})
    with caplog.at_level(logging.WARNING):
        assert configure(builder)._options == {"spark.remote": "sc://spark.example:15002"}
    assert any("start-connect-server.sh" in r.getMessage() for r in caplog.records)
