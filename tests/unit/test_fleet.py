"""``crystalperf fleet`` on real logs (tests/data: event logs of real local Spark applications recorded by
tests/data/record/spark_fleet.py and spark_eventlog.py, traces from real runs): what it finds, the row of each
application, the cache between runs, ``--since``, bad logs, and the table, page and summary it writes."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from crystalperf.core.analysis import analyze  # noqa: E402
from crystalperf.core.attribution.classify import load_classifier  # noqa: E402
from crystalperf.core.cli import main  # noqa: E402
from crystalperf.fleet import cli as fleet_cli  # noqa: E402
from crystalperf.fleet import pool  # noqa: E402
from crystalperf.fleet.cache import Cache, Result, content_hash, fingerprint  # noqa: E402
from crystalperf.fleet.discover import TRACE, discover  # noqa: E402
from crystalperf.fleet.row import COLUMNS, Source, report_row  # noqa: E402
from crystalperf.fleet.worker import Analyser, run_one  # noqa: E402
from crystalperf.integrations.spark import read_event_log  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
FLEET = DATA / "spark-fleet"
RUNNING = DATA / "spark-fleet-running"
GOLDEN_LOG = DATA / "spark-eventlog.json.gz"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "fleet.md"


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """A History Server directory: the three recorded applications (rolling zstd logs), the golden log as a
    single gzip file, a damaged log, Hadoop's checksum file; another holding a log in progress; and a directory
    of traces."""
    root = tmp_path / "platform"
    events = root / "spark-events"
    shutil.copytree(FLEET, events)
    shutil.copytree(RUNNING, root / "running")
    (events / "local-1795550840668.gz").write_bytes(GOLDEN_LOG.read_bytes())
    (events / "local-1795000000000.zstd").write_bytes(b"\x28\xb5\x2f\xfd" + b"damaged" * 10)
    (events / ".local-1795550840668.gz.crc").write_bytes(b"crc")
    traces = root / "traces"
    for name, trace in (("demo", "spark-demo-trace.json.gz"), ("fit", "tensorflow-fit-trace.json.gz")):
        (traces / name).mkdir(parents=True)
        shutil.copy(DATA / trace, traces / name / "crystalperf-trace.json.gz")
    return root


def _rows(out: Path) -> list[dict]:
    return pq.read_table(out / fleet_cli.TABLE).to_pylist()


def _run(paths: list[Path], out: Path, **kwargs) -> fleet_cli.FleetSummary:  # type: ignore[no-untyped-def]
    options = pool.Options(jobs=2)
    summary, _ = fleet_cli.run([str(p) for p in paths], out=out, options=options, quiet=True, **kwargs)
    return summary


def test_discovery_finds_every_log_once(history: Path) -> None:
    sources = discover([history, history / "spark-events"])
    names = sorted(str(Path(s.path).relative_to(history)) for s in sources)
    assert names == sorted([*(f"spark-events/{p.name}" for p in FLEET.iterdir()), "spark-events/local-1795550840668.gz",
                            "spark-events/local-1795000000000.zstd", *(f"running/{p.name}" for p in RUNNING.iterdir()),
                            "traces/demo/crystalperf-trace.json.gz", "traces/fit/crystalperf-trace.json.gz"])
    assert {s.format for s in sources} == {"spark-eventlog", TRACE}
    rolling = next(s for s in sources if Path(s.path).name.startswith("eventlog_v2_"))
    files = list(Path(rolling.path).iterdir())
    assert rolling.size == sum(f.stat().st_size for f in files)
    assert rolling.mtime_ns == max([Path(rolling.path).stat().st_mtime_ns, *(f.stat().st_mtime_ns for f in files)])
    assert all(os.path.isabs(s.path) for s in sources)


def test_since_leaves_out_older_logs(history: Path) -> None:
    old = history / "spark-events" / "local-1795550840668.gz"
    os.utime(old, (1_600_000_000, 1_600_000_000))
    since = fleet_cli.parse_since("2021-01-01")
    found = [Path(s.path) for s in discover([history], since_ns=since)]
    assert old not in found and len(found) == 7
    assert fleet_cli.parse_since("2d", now=1_000_000.0) == int((1_000_000.0 - 2 * 86400) * 1e9)
    with pytest.raises(fleet_cli.BadInputError, match="not a date"):
        fleet_cli.parse_since("last tuesday")


def test_a_row_says_what_the_report_says(tmp_path: Path) -> None:
    """The row of the golden log against its report: machine-hours by hand (local[2]: 2 cores)."""
    source = Source(str(GOLDEN_LOG), "spark-eventlog", GOLDEN_LOG.stat().st_size, 0, "h")
    trace = read_event_log(GOLDEN_LOG)
    report = analyze(trace, classifier=load_classifier()).report
    row = report_row(source, report, tasks=28)
    assert set(row) == {c.name for c in COLUMNS}
    assert row["app_id"] == "local-1795550840668" and row["framework"] == "spark" and row["status"] == "succeeded"
    assert row["runtime_s"] == report["total_runtime_s"] == pytest.approx(9.643)
    assert row["cores"] == 2 and row["machine_hours"] == pytest.approx(2 * 9.643 / 3600)
    assert row["bottleneck"] == report["bottleneck"]["resource"]
    assert row["bottleneck_share"] == report["bottleneck"]["share"][row["bottleneck"]]
    # local[4] is predicted faster, but its band reaches past the traced run: no setting is advised, none saves
    assert not report["settings_advice"]
    assert [s["typed"] for s in report["settings_search"]["not_advised"]] == [["--master local[4]"]]
    assert row["advice"] is None and row["advice_cores"] is None and row["machine_hours_saved"] == 0
    assert row["error"] is None and row["tasks"] == 28 and row["skewed_operations"] == 0


def test_advice_cores_follow_the_changes() -> None:
    report = {"total_runtime_s": 3600.0, "application": {}, "bottleneck": {},
              "baseline": {"slots": 16, "executors": 4, "cores_per_executor": 4},
              "settings_advice": [{"runtime_s": 1800.0, "typed": ["--conf spark.executor.instances=2"],
                                   "changes": {"executors": 2}, "description": "executors=2"}]}
    row = report_row(Source("x", "trace", 1, 0), report, tasks=1)
    assert (row["cores"], row["machine_hours"], row["advice_cores"]) == (16, 16.0, 8)
    assert row["advice_machine_hours"] == 4.0 and row["machine_hours_saved"] == 12.0
    report["settings_advice"] = [{"runtime_s": 900.0, "typed": ["parallelism.default: 2"],
                                  "changes": {"parallelism": 2}}]
    assert report_row(Source("x", "trace", 1, 0), report, tasks=1)["advice_cores"] == 2


def test_a_fleet_run_writes_the_table_page_and_one_error_row(history: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = _run([history], out)
    rows = _rows(out)
    assert [r["source"] for r in rows] == sorted(r["source"] for r in rows) and len(rows) == 8
    table = pq.read_table(out / fleet_cli.TABLE)
    assert table.schema.names == [c.name for c in COLUMNS]
    (bad,) = [r for r in rows if r["error"]]
    assert bad["source"].endswith("local-1795000000000.zstd") and "damaged zstd data" in bad["error"]
    assert bad["app_id"] is None and bad["machine_hours"] is None and bad["content_hash"]
    good = {(r["app_name"], "running" in r["source"]): r for r in rows if not r["error"]}
    assert {name for name, _ in good} == {"fleet-cpu", "fleet-skewed", "fleet-failed", "crystalperf-golden",
                                          "crystalperf-demo-tpch-q6-q9", "golden_cnn"}
    running = good["fleet-cpu", True]
    assert any("in progress" in w for w in running["warnings"])
    assert running["runtime_s"] < good["fleet-cpu", False]["runtime_s"]
    assert not good["fleet-cpu", False]["warnings"]
    good = {name: r for (name, _), r in good.items()}
    assert good["fleet-failed"]["status"] == "failed"
    assert good["fleet-skewed"]["skewed_operations"] >= 1 and "data" in good["fleet-skewed"]["skew"][0]
    assert good["golden_cnn"]["framework"] == "tensorflow"
    assert all(r["machine_hours"] == pytest.approx(r["cores"] * r["runtime_s"] / 3600) for r in good.values())
    assert (summary.applications, summary.errors, summary.analysed) == (8, 1, 8)
    page = (out / fleet_cli.PAGE).read_text()
    assert 'id="fleet-mix"' in page and 'id="fleet-scatter"' in page and 'id="ranking-table"' in page
    assert page.count("<tr>") >= 1 + 7 + 1 + 1  # the ranking's head, 7 applications; the errors' head and row


def test_a_second_run_analyses_only_what_changed(history: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _run([history], out)
    before = _rows(out)
    assert first.analysed == 8
    assert _run([history], out).analysed == 0
    assert _rows(out) == before
    # touched (a copy, a restore): the same bytes, analysed again only if the content hash differs
    golden = history / "spark-events" / "local-1795550840668.gz"
    os.utime(golden, (1_700_000_000, 1_700_000_000))
    assert _run([history], out).analysed == 0
    # changed: another log in its place
    golden.write_bytes(gzip.compress(gzip.decompress(GOLDEN_LOG.read_bytes()).replace(
        b'"App Name":"crystalperf-golden"', b'"App Name":"renamed"')))
    assert _run([history], out).analysed == 1
    names = {r["app_name"] for r in _rows(out)}
    assert "renamed" in names and "crystalperf-golden" not in names
    # a new log
    shutil.copy(GOLDEN_LOG, history / "spark-events" / "local-1795550840669.gz")
    assert _run([history], out).analysed == 1 and len(_rows(out)) == 9


def test_an_interrupted_run_resumes(history: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    local = pool.analyse

    def two_then_interrupted(sources, options):  # type: ignore[no-untyped-def]
        for i, result in enumerate(local(sources, options)):
            if i == 2:
                raise KeyboardInterrupt
            yield result

    monkeypatch.setattr(pool, "analyse", two_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run([history], out)
    assert not (out / fleet_cli.TABLE).exists()
    monkeypatch.setattr(pool, "analyse", local)
    assert _run([history], out).analysed == 6
    assert len(_rows(out)) == 8


def test_results_of_another_analysis_are_not_reused(history: Path, tmp_path: Path) -> None:
    source = discover([history / "spark-events" / "local-1795550840668.gz"])[0]
    cache = Cache(tmp_path / "cache", fingerprint(None, {"CRYSTALPERF_MAX_TASKS_PER_OPERATION": "2000"}))
    cache.put(Result(source, {"source": source.path}))
    assert cache.get(source) is not None
    other = Cache(tmp_path / "cache", fingerprint(None, {"CRYSTALPERF_MAX_TASKS_PER_OPERATION": "50"}))
    assert other.get(source) is None
    retried = Result(source, {"source": source.path}, retry=True)
    cache.put(retried)
    assert cache.get(source) is None and cache.get(source, for_table=True) is not None
    (next((tmp_path / "cache").rglob("*.json"))).write_text("{not json")
    assert cache.get(source) is None


def test_content_hash_of_a_rolling_log_covers_its_files(tmp_path: Path) -> None:
    rolling = tmp_path / "eventlog_v2_local-1"
    rolling.mkdir()
    (rolling / "events_1_local-1").write_bytes(b"a")
    (rolling / "events_2_local-1").write_bytes(b"b")
    first = content_hash(rolling)
    (rolling / "events_2_local-1").write_bytes(b"c")
    assert content_hash(rolling) != first


class _Stuck(Analyser):
    """An analysis that never ends, or that takes more and more memory (what a bound must stop)."""

    def __init__(self, how: str) -> None:
        super().__init__(None)
        self.how = how

    def analyse(self, source: Source) -> dict:
        import time

        held = []
        for _ in range(600):
            if self.how == "memory":
                held.append(bytearray(64 << 20))
                for i in range(0, len(held[-1]), 4096):
                    held[-1][i] = 1
            time.sleep(0.05)
        return super().analyse(source)


@pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/statm").exists(), reason="the bounds need fork")
def test_an_analysis_past_its_bounds_is_an_error_row_tried_again() -> None:
    source = discover([GOLDEN_LOG])[0]
    slow = run_one(_Stuck("time"), source, timeout_s=0.5, max_rss=1 << 40)
    assert slow.retry and "took longer than 0.5 s" in slow.row["error"] and slow.row["app_id"] is None
    big = run_one(_Stuck("memory"), source, timeout_s=120, max_rss=400 << 20)
    assert big.retry and "more than 400 MiB of memory" in big.row["error"] and big.peak_rss > 400 << 20
    fine = run_one(Analyser(None), source, timeout_s=120, max_rss=1 << 40)
    assert not fine.retry and fine.row["error"] is None and fine.row["app_id"] == "local-1795550840668"
    assert fine.source.content_hash == content_hash(GOLDEN_LOG) == fine.row["content_hash"]


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["fleet", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["fleet", str(tmp_path), "--since", "yesterday-ish", "--out", str(tmp_path / "o")]) == 2
    assert "not a date" in capsys.readouterr().err
    assert main(["fleet", str(tmp_path), "--engine", "hadoop", "--out", str(tmp_path / "o")]) == 2
    assert "unknown engine 'hadoop' (known: local, spark)" in capsys.readouterr().err
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(GOLDEN_LOG, logs / "local-1795550840668.gz")
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if the spark extra were not installed
    assert main(["fleet", str(logs), "--engine", "spark", "--out", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pyspark is not installed: pip install 'crystalperf[spark]'" in err
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if the fleet extra were not installed
    assert main(["fleet", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'crystalperf[fleet]'" in err


def test_cli_prints_the_summary(history: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["fleet", str(history / "spark-events"), "--out", str(out), "--jobs", "2"]) == 0
    captured = capsys.readouterr()
    assert "crystalperf fleet: 5 applications (4 analysed, 1 could not be" in captured.out
    assert re.search(r"bottlenecks: \w+ \d+% of machine-hours", captured.out)
    assert f"wrote {out / fleet_cli.TABLE}" in captured.out
    assert "error: " in captured.out and "local-1795000000000.zstd" in captured.out
    assert "5 to analyse" in captured.err and "5/5 analysed (1 errors)" in captured.err


def test_two_runs_write_the_same_table(history: Path, tmp_path: Path) -> None:
    """Rows do not depend on the worker or the order: two fresh runs give equal tables."""
    _run([history], tmp_path / "a")
    summary = fleet_cli.run([str(history)], out=tmp_path / "b", options=pool.Options(jobs=1), quiet=True)[0]
    assert summary.analysed == 8
    assert pq.read_table(tmp_path / "a" / fleet_cli.TABLE).equals(pq.read_table(tmp_path / "b" / fleet_cli.TABLE))


def test_docs_list_every_column() -> None:
    text = DOCS.read_text()
    table = re.findall(r"^\| `(\w+)` \| (\S+) \|", text, re.MULTILINE)
    assert [(name, kind) for name, kind in table] == [(c.name, c.type) for c in COLUMNS]


def test_hostile_names_are_escaped_in_the_page(tmp_path: Path) -> None:
    from crystalperf.fleet.page import render
    from crystalperf.fleet.summary import FleetSummary

    summary = FleetSummary()
    row = {c.name: None for c in COLUMNS}
    row.update(source="/x/<script>", app_name="<script>alert(1)</script>", machine_hours=1.0, runtime_s=3600.0,
               cores=1, bottleneck="cpu\" onload=\"x", bottleneck_share=0.5, advice="--conf a=<b>",
               machine_hours_saved=0.5, warnings=[], skew=[])
    summary.add(row)
    summary.add({**row, "error": "<img src=x>", "source": "/y"})
    page = render(summary, title="<t>")
    assert "<script>" not in page and "<img" not in page and 'onload="x' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    json.dumps(summary.ranking())  # rows stay plain data


def test_the_spark_engine_deals_the_largest_logs_round_the_partitions() -> None:
    from crystalperf.integrations.spark.fleet import dealt

    sources = [Source(f"/logs/{i}", "spark-eventlog", size, 0) for i, size in enumerate([5, 90, 10, 70, 30, 50, 20])]
    order = dealt(sources, 3)
    assert sorted(order, key=lambda s: s.path) == sorted(sources, key=lambda s: s.path)
    # parallelize cuts 7 into slices [0, 2), [2, 4), [4, 7) (i * n // 3): each gets one of the three largest
    slices = [order[0:2], order[2:4], order[4:7]]
    assert [s[0].size for s in slices] == [90, 70, 50]
    assert [[s.size for s in part] for part in slices] == [[90, 30], [70, 20], [50, 10, 5]]


def test_a_log_the_engine_returned_nothing_for_is_an_error_row(history: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "analyse", lambda sources, options: iter(()))
    summary = _run([history / "spark-events"], tmp_path / "out")
    rows = _rows(tmp_path / "out")
    assert summary.errors == len(rows) == 5 and all("not analysed" in r["error"] for r in rows)
