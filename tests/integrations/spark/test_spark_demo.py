"""``crystalperf demo`` end to end, on a small scale factor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from crystalperf.core.trace import load_trace
from tests.integrations.spark.reports import assert_no_plumbing_top_functions


def test_demo_runs_q6_and_q9_and_leaves_the_report(tmp_path: Path) -> None:
    out = tmp_path / "crystalperf-demo"
    env = dict(os.environ, CRYSTALPERF_TESTING="1")
    env.pop("PYSPARK_PYTHON", None)
    # Sampled often, so that even this small run's SQL stages hold enough samples to split over their operators:
    # at the default budget (1 % of the cores, which the stacks' safepoints soon use up) a run this short gets a
    # few rounds a second.
    done = subprocess.run([sys.executable, "-m", "crystalperf.core.cli", "demo", "--out", str(out), "--scale", "0.02",
                           "--sample-interval-ms", "5", "--cpu-budget", "0.1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "report:" in done.stdout
    trace = load_trace(out / "crystalperf-trace.json.gz")
    names = [j.name for j in trace.operations]
    assert any("TPC-H Q6" in n for n in names) and any("TPC-H Q9" in n for n in names), names
    report = json.loads((out / "crystalperf-report.json").read_text())
    # The README's first command analyses with the trained classifier (numpy, base install), not the keyword fallback.
    assert report["sources"]["classifier"].startswith("sparse-"), report["sources"]["classifier"]
    assert_no_plumbing_top_functions(report)
    assert report["bottleneck"]["resource"] in ("cpu", "disk", "network")
    assert (out / "crystalperf-report.html").is_file()
    assert all((out / "data" / t).is_dir() for t in ("lineitem", "orders", "part", "supplier", "partsupp", "nation"))

    _check_sql_operators(trace, report)
    # Advice in settings a user types, each tried one with its predicted runtime.
    search = report["settings_search"]
    assert search["searched"] == ["spark.master"] and search["tried"] >= 2, search
    tried = search["candidates"][1:]
    assert all(c["typed"][0].startswith("--master local[") and c["runtime_s"] > 0 for c in tried), tried
    assert any(line.startswith("Settings: ") and "--master local[" in line for line in report["advice"])


# A stage's task start-up and hand-over (its closure deserialised, its result serialised: Spark's own
# executorDeserializeTime and resultSerializationTime, 40 % of this tiny run's last stages) is no operator's
# work; of the rest, at least 80 % must go to a plan operator, in every stage sampled enough to tell.
MIN_STAGE_SAMPLES = 10


def _check_sql_operators(trace, report: dict) -> None:
    """Q6 and Q9 appear as SQL queries with their physical plans, their stages' samples given to plan operators."""
    assert trace.sql_queries, "the listener recorded no SQL plan"
    queries = {q["description"]: q for q in report["sql_queries"]}
    assert {"TPC-H Q6", "TPC-H Q9"} <= set(queries), list(queries)
    for name, operators in (("TPC-H Q6", {"Scan", "HashAggregate", "Filter", "Exchange"}),
                            ("TPC-H Q9", {"Scan", "HashAggregate", "BroadcastHashJoin", "Exchange", "Sort"})):
        query = queries[name]
        kinds = {n["kind"] for n in query["nodes"]}
        assert operators <= kinds, (name, kinds)
        timed = [n for n in query["nodes"] if n.get("samples")]
        assert any(n["kind"] == "Scan" for n in timed), (name, [n["name"] for n in timed])
        for node in timed:
            assert node["task_seconds"] > 0 and abs(sum(node["vector"].values()) - 1) < 1e-3, node
            assert abs(sum(node["resource_seconds"].values()) - node["task_seconds"]) < 1e-3 * max(1, node["task_seconds"])
        stages = [s for s in query["stages"] if s["samples"] - s["overhead_samples"] >= MIN_STAGE_SAMPLES]
        assert stages, (name, query["stages"])
        for stage in stages:
            assert stage["operator_fraction"] >= 0.8, (name, stage)
            assert stage["attributed_samples"] + stage["overhead_samples"] <= stage["samples"], stage
    by_id = {o["id"]: o for o in report["operations"]}
    for stage in queries["TPC-H Q9"]["stages"]:
        if stage["attributed_samples"]:
            assert by_id[stage["operation"]]["plan_operators"], stage
