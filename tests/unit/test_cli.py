"""The CLI as users meet it: report files, predictions, and one-line errors with exit status 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crystalperf.core.cli import main
from crystalperf.core.trace import save_trace
from crystalperf.core.trace.synthetic import spark_like_trace

# Recorded by the Spark listener during `crystalperf demo` (TPC-H Q6 + Q9, local[2]).
EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "spark-demo-trace.json.gz"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CRYSTALPERF_CACHE_DIR", str(tmp_path / "cache"))


def test_analyze_writes_both_reports(tmp_path, capsys):
    assert main(["analyze", str(EXAMPLE), "--out", str(tmp_path), "--classifier", "keyword"]) == 0
    report = json.loads((tmp_path / "crystalperf-report.json").read_text())
    assert (tmp_path / "crystalperf-report.html").read_text().startswith("<!DOCTYPE html>")
    assert report["total_runtime_s"] > 0
    assert report["bottleneck"]["resource"] in ("cpu", "disk", "network", "waiting")
    assert set(report["bottleneck"]["seconds"]) == {"cpu", "disk", "network", "waiting"}
    ids = {o["path"] for o in report["operations"]}
    assert report["critical_path"] and set(report["critical_path"]) <= ids
    for o in report["operations"]:
        assert {"id", "name", "runtime_s", "vector"} <= set(o)
        assert sum(o["vector"].values()) == pytest.approx(1.0, abs=1e-4)
    descriptions = {p["description"] for p in report["predictions"]}
    assert "cpu_speed=2.0" in descriptions and any(d.startswith("cores=") for d in descriptions)
    assert report["application"]["framework"] == "spark"
    out = capsys.readouterr().out
    assert "Bottleneck" in out and "crystalperf-report.html" in out


def test_analyze_defaults_to_the_trace_directory(tmp_path):
    save_trace(spark_like_trace(jobs=1, tasks_per_stage=3), tmp_path / "crystalperf-trace.json.gz")
    assert main(["analyze", str(tmp_path), "-q", "--classifier", "keyword"]) == 0
    assert (tmp_path / "crystalperf-report.json").exists()


def test_predict_text_and_json(capsys):
    assert main(["predict", str(EXAMPLE), "--set", "cores=8", "--set", "network=1gbit", "--classifier", "keyword"]) == 0
    assert "predicted runtime" in capsys.readouterr().out
    assert main(["predict", str(EXAMPLE), "--set", "disk=200MB/s", "--json", "--classifier", "keyword"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["changes"] == {"disk": 200e6}
    est = doc["crystalperf"]
    assert est["low_s"] <= est["runtime_s"] <= est["high_s"]
    assert {"linear", "replay"} <= set(doc)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--set", "bogus=3"], "unknown resource 'bogus'"),
        (["--set", "memory=lots"], "cannot read 'lots' as a size"),
        (["--set", "network=fast"], "as a bandwidth"),
        (["--set", "cores=0"], "at least 1"),
        (["--set", "device=tpu"], "cpu or gpu"),
        (["--set", "cores"], "KEY=VALUE"),
    ],
)
def test_bad_what_if_is_one_line_and_exit_2(args, words, capsys):
    assert main(["predict", str(EXAMPLE), *args]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_file(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "nope.json" in err


def test_unknown_command_and_option_exit_2():
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["analyze"])
    assert info.value.code == 2


def test_console_script_runs_as_a_process(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": "9.1", "application": {}}')
    proc = subprocess.run([sys.executable, "-m", "crystalperf.core.cli", "analyze", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "9.1" in proc.stderr and str(bad) in proc.stderr
