"""``crystalperf diff`` and ``crystalperf validate`` on small hand-made traces whose answers are worked out by
hand: stages of one-slot tasks whose CPU and disk time are measured (no samples), so an operation's resource
seconds are its tasks' measured seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.cli import main
from crystalperf.core.compare import Op, diff, load_run, match_operations, validate
from crystalperf.core.trace import save_trace

START = 1_700_000_000.0


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CRYSTALPERF_CACHE_DIR", str(tmp_path / "cache"))


def _stage(number: int, call_site: str, tasks: list[tuple[float, float]], start: float, *, slots: int = 1,
           parents: tuple[str, ...] = ()) -> tr.Operation:
    """A stage of tasks given as (cpu s, disk s), each running cpu + disk seconds, on ``slots`` slots in turn."""
    free = [start] * slots
    recorded = []
    for i, (cpu, disk) in enumerate(tasks):
        slot = min(range(slots), key=lambda k: free[k])
        begin, run = free[slot], cpu + disk
        free[slot] = begin + run
        recorded.append(tr.Task(id=f"{number}.{i}", index=i, slot=slot, start=begin, end=begin + run, metrics={
            tr.METRIC_RUN_TIME: run, tr.METRIC_CPU_TIME: cpu, tr.METRIC_DISK_TIME: disk,
            tr.METRIC_INPUT_BYTES: 1e6 if disk else 0.0}))
    end = max(free)
    return tr.Operation(id=f"stage-{number}", name=f"stage {number}: {call_site}", kind="stage", parents=list(parents),
                        start=start, end=end, tasks=recorded, attributes={"call_site": call_site})


def job_trace(scan: list[tuple[float, float]], aggregate: list[tuple[float, float]], *, first_stage: int = 0,
              slots: int = 1, name: str = "query", framework: str = "spark", properties: dict[str, str] | None = None,
              extra_stage: bool = False, **environment: object) -> tr.Trace:
    """One job: a scan stage, then an aggregation stage (optionally one more stage after it); the application
    spans exactly the job."""
    scan_stage = _stage(first_stage, "count at query.py:10", scan, START, slots=slots)
    agg = _stage(first_stage + 1, "count at query.py:10", aggregate, scan_stage.end, slots=slots,
                 parents=(scan_stage.id,))
    stages = [scan_stage, agg]
    if extra_stage:
        stages.append(_stage(first_stage + 2, "show at query.py:12", [(0.5, 0.0)], agg.end, parents=(agg.id,)))
    end = stages[-1].end
    job = tr.Operation(id="job-0", name="job 0: count at query.py:10", kind="job", start=START, end=end,
                       children=stages)
    return tr.Trace(
        application=tr.Application(framework=framework, id=f"app-{first_stage}", name=name, start=START, end=end,
                                   status="succeeded"),
        environment=tr.Environment(cores_per_executor=slots, total_slots=slots,
                                   executors=[tr.Executor(id="driver", cores=slots)], properties=properties or {},
                                   **environment),  # type: ignore[arg-type]
        operations=[job])


def saved(trace: tr.Trace, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_trace(trace, path)
    return path


# -- diff -------------------------------------------------------------------------------------------------

def test_diff_names_the_slowed_stage_and_its_resource_even_when_stage_ids_shifted(tmp_path: Path) -> None:
    a = saved(job_trace([(1.0, 1.0)], [(1.0, 0.0)]), tmp_path / "a.json")
    # B: the scan's disk time 1 s -> 5 s; its stages are numbered 3 and 4 (another job ran first in that run)
    b = saved(job_trace([(1.0, 5.0)], [(1.0, 0.0)], first_stage=3), tmp_path / "b.json.gz")
    result = diff(load_run(a), load_run(b))
    assert result["runtime"] == {"a_s": 3.0, "b_s": 7.0, "delta_s": 4.0, "change": pytest.approx(4 / 3, abs=1e-6)}
    assert result["critical_path_seconds"]["disk"] == {"a": 1.0, "b": 5.0, "delta": 4.0}
    [top] = result["explanation"]
    assert result["slowed"] == [top] and result["sped_up"] == []
    assert (top["path"], top["resource"], top["delta_s"], top["resource_delta_s"]) == ("job-0/stage-3", "disk", 4.0, 4.0)
    assert top["sentence"] == "stage 3: count at query.py:10: +4.00 s, disk +4.00 s"
    rows = {r["path"]: r for r in result["operations"]}
    assert rows["job-0/stage-3"]["a_path"] == "job-0/stage-0"
    assert rows["job-0/stage-3"]["matched_by"] == "name and call site"
    assert rows["job-0/stage-4"]["a_path"] == "job-0/stage-1" and rows["job-0/stage-4"]["delta_s"] == 0.0
    assert rows["job-0"]["matched_by"] == "id"
    assert result["new"] == result["missing"] == []


def test_a_faster_run_is_explained_by_what_shrank_on_the_first_runs_critical_path(tmp_path: Path) -> None:
    a = saved(job_trace([(1.0, 1.0)], [(3.0, 0.0)]), tmp_path / "a.json")
    b = saved(job_trace([(1.0, 1.0)], [(1.0, 0.0)]), tmp_path / "b.json")
    result = diff(load_run(a), load_run(b))
    assert result["runtime"]["delta_s"] == -2.0
    [top] = result["explanation"]
    assert (top["path"], top["resource"], top["resource_delta_s"]) == ("job-0/stage-1", "cpu", -2.0)


def test_time_outside_the_operations_explains_a_change_too(tmp_path: Path) -> None:
    a = saved(job_trace([(1.0, 1.0)], [(1.0, 0.0)]), tmp_path / "a.json")
    slow_start = job_trace([(1.0, 1.0)], [(1.0, 2.0)])
    slow_start.application.end += 3.0  # 3 s of driver work after the job: outside any operation
    b = saved(slow_start, tmp_path / "b.json")
    result = diff(load_run(a), load_run(b))
    assert result["runtime"]["delta_s"] == 5.0 and result["outside_operations_s"]["delta"] == 3.0
    assert [e["sentence"] for e in result["explanation"]] == [
        "outside any operation (driver code, scheduling, start-up): +3.00 s",
        "stage 1: count at query.py:10: +2.00 s, disk +2.00 s"]


def test_new_and_missing_operations_are_listed(tmp_path: Path) -> None:
    a = saved(job_trace([(1.0, 0.0)], [(1.0, 0.0)]), tmp_path / "a.json")
    b = saved(job_trace([(1.0, 0.0)], [(1.0, 0.0)], extra_stage=True), tmp_path / "b.json")
    forward = diff(load_run(a), load_run(b))
    assert forward["new"] == ["job-0/stage-2"] and forward["missing"] == []
    # the new stage is on B's critical path and grew from nothing: it explains the 0.5 s
    assert [e["path"] for e in forward["explanation"]] == ["job-0/stage-2"]
    backward = diff(load_run(b), load_run(a))
    assert backward["missing"] == ["job-0/stage-2"] and backward["new"] == []


def test_operations_of_the_same_name_pair_in_start_order() -> None:
    def op(path: str, name: str, start: float) -> Op:
        return Op(path, path, name, "stage", None, start, 1.0, {}, False, True, "")

    a = [op("s1", "stage 1: collect at q.py:3", 0.0), op("s2", "stage 2: collect at q.py:3", 1.0)]
    b = [op("s7", "stage 7: collect at q.py:3", 5.0), op("s8", "stage 8: collect at q.py:3", 6.0),
         op("s9", "stage 9: save at q.py:9", 7.0)]
    pairs = [(p.a.path if p.a else None, p.b.path if p.b else None) for p in match_operations(a, b)]
    assert pairs == [("s1", "s7"), ("s2", "s8"), (None, "s9")]


def test_the_same_script_from_another_path_pairs_its_operations_by_action() -> None:
    def op(path: str, name: str, start: float, call_site: str = "") -> Op:
        return Op(path, path, name, "job", None, start, 1.0, {}, False, True, call_site)

    a = [op("j0", "count at /home/ann/etl.py:12", 0.0, "count at /home/ann/etl.py:12"),
         op("j1", "save at /home/ann/etl.py:20", 1.0, "save at /home/ann/etl.py:20")]
    b = [op("j0", "count at /tmp/etl_v2.py:14", 0.0, "count at /tmp/etl_v2.py:14"),
         op("j1", "save at /tmp/etl_v2.py:22", 2.0, "save at /tmp/etl_v2.py:22"),
         op("j2", "collect at /tmp/etl_v2.py:30", 3.0, "collect at /tmp/etl_v2.py:30")]
    pairs = [(p.a.path if p.a else None, p.b.path if p.b else None, p.matched_by) for p in match_operations(a, b)]
    assert pairs == [("j0", "j0", "action"), ("j1", "j1", "action"), (None, "j2", "")]
    # a name with no place it was called from is its own action: no looser match than by name
    assert Op("p", "p", "stage 3: parquet scan", "stage", None, 0, 1, {}, False, True, "").action == "parquet scan"


def test_configuration_differences_leave_out_ids_ports_and_temporary_paths(tmp_path: Path) -> None:
    a = saved(job_trace([(1.0, 0.0)], [(1.0, 0.0)], properties={
        "x.master": "local[1]", "x.driver.port": "34589", "x.app.id": "local-1795396326621",
        "x.spoolDir": "/tmp/crystalperf-spool-abc", "x.same": "1"}), tmp_path / "a.json")
    b = saved(job_trace([(1.0, 0.0)], [(1.0, 0.0)], slots=2, properties={
        "x.master": "local[2]", "x.driver.port": "40001", "x.app.id": "local-1795396399999",
        "x.spoolDir": "/tmp/crystalperf-spool-xyz", "x.same": "1", "x.new": "on"}), tmp_path / "b.json")
    result = diff(load_run(a), load_run(b))
    settings = {s["name"]: (s["a"], s["b"]) for s in result["settings"]}
    assert settings["setting x.master"] == ("local[1]", "local[2]")
    assert settings["setting x.new"] == (None, "on")
    assert settings["task slots"] == ("1", "2") and settings["cores per executor"] == ("1", "2")
    assert not any(k in settings for k in ("setting x.driver.port", "setting x.app.id", "setting x.spoolDir",
                                           "setting x.same"))
    assert result["settings_ignored"] == 3


def test_a_report_file_is_compared_as_it_is(tmp_path: Path) -> None:
    a = saved(job_trace([(1.0, 1.0)], [(1.0, 0.0)]), tmp_path / "a.json")
    b = saved(job_trace([(1.0, 3.0)], [(1.0, 0.0)]), tmp_path / "b" / "crystalperf-trace.json")
    assert main(["analyze", str(b), "--quiet", "--classifier", "keyword"]) == 0
    (tmp_path / "b" / "crystalperf-trace.json").unlink()
    run = load_run(tmp_path / "b")  # the directory: now holding only the report
    assert run.kind == "report"
    result = diff(load_run(a), run)
    assert result["runtime"]["delta_s"] == 2.0 and result["explanation"][0]["resource"] == "disk"


# -- the CLI ----------------------------------------------------------------------------------------------

def test_cli_diff_writes_json_and_html_and_gates_on_slowdown(tmp_path: Path, capsys) -> None:
    hostile = "q\x1b]52;c;aGk=\x07<script>alert(1)</script>[/bold]"
    a = saved(job_trace([(1.0, 1.0)], [(1.0, 0.0)], name=hostile), tmp_path / "a.json")
    b = saved(job_trace([(1.0, 2.0)], [(1.0, 0.0)], name=hostile), tmp_path / "b.json")  # 3 s -> 4 s: +33 %
    out_json, out_html = tmp_path / "d.json", tmp_path / "d.html"
    assert main(["diff", str(a), str(b), "--json", str(out_json), "--html", str(out_html),
                 "--classifier", "keyword"]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "\\x1b" in printed and "disk +1.00 s" in printed
    assert json.loads(out_json.read_text())["runtime"]["delta_s"] == 1.0
    page = out_html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script>" not in page and "&lt;script&gt;" in page
    assert 'id="explanation"' in page and "disk +1.00 s" in page
    assert main(["diff", str(a), str(b), "--fail-if-slower", "10%", "--classifier", "keyword"]) == 1
    assert main(["diff", str(a), str(b), "--fail-if-slower", "50", "--classifier", "keyword"]) == 0
    assert main(["diff", str(b), str(a), "--fail-if-slower", "0%", "--classifier", "keyword"]) == 0


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    def _one_line_error(args: list[str]) -> str:
        capsys.readouterr()
        assert main(args) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]

    good = saved(job_trace([(1.0, 0.0)], [(1.0, 0.0)]), tmp_path / "good.json")
    (tmp_path / "array.json").write_text("[1, 2]")
    (tmp_path / "other.json").write_text('{"hello": 1}')
    (tmp_path / "broken.json").write_text('{"schema_version": "1.4", ')
    (tmp_path / "bad-report.json").write_text('{"report_version": "1.0", "operations": 3}')
    assert "no such file" in _one_line_error(["diff", str(good), str(tmp_path / "missing.json")])
    assert "not a JSON object" in _one_line_error(["diff", str(tmp_path / "array.json"), str(good)])
    assert "neither a crystalperf trace nor a report" in _one_line_error(["diff", str(good), str(tmp_path / "other.json")])
    assert "not valid JSON" in _one_line_error(["diff", str(good), str(tmp_path / "broken.json")])
    assert "not a crystalperf report" in _one_line_error(["diff", str(good), str(tmp_path / "bad-report.json")])
    # a Spark event log given where a trace goes is named, with the command that reads it
    event_log = Path(__file__).resolve().parents[1] / "data" / "spark-eventlog.json.gz"
    for command in (["diff", str(good), str(event_log)], ["analyze", str(event_log), "--out", str(tmp_path / "e")]):
        line = _one_line_error(command)
        assert "a Spark event log" in line and f"crystalperf import spark-eventlog {event_log} --analyze" in line
    assert "percentage" in _one_line_error(["diff", str(good), str(good), "--fail-if-slower", "fast"])
    assert "cannot write" in _one_line_error(["diff", str(good), str(good), "--json", str(tmp_path / "no" / "d.json")])
    assert main(["analyze", str(good), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    report = tmp_path / "r" / "crystalperf-report.json"
    assert "needs the trace" in _one_line_error(["validate", str(report), str(good)])
    flink = saved(job_trace([(1.0, 0.0)], [(1.0, 0.0)], framework="flink"), tmp_path / "flink.json")
    assert "different frameworks" in _one_line_error(["validate", str(good), str(flink)])


def test_bad_input_from_the_command_line_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "array.json").write_text("[1, 2]")
    done = subprocess.run([sys.executable, "-m", "crystalperf.core.cli", "diff", str(tmp_path / "array.json"),
                           str(tmp_path / "array.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "array.json" in done.stderr


def test_a_hostile_report_document_does_not_break_the_diff(tmp_path: Path) -> None:
    good = saved(job_trace([(1.0, 0.0)], [(1.0, 0.0)]), tmp_path / "good.json")
    hostile = {"report_version": "1.0", "application": {"name": ["x"], "framework": 3}, "bottleneck": {"seconds": 7},
               "total_runtime_s": 2.0, "operations": [
                   "text", {"id": 5, "name": None, "runtime_s": "NaN", "resource_seconds": {"cpu": "x"}},
                   {"path": "p", "parent": "nowhere", "runtime_s": 1e308, "children": "yes"}]}
    (tmp_path / "hostile.json").write_text(json.dumps(hostile))
    result = diff(load_run(good), load_run(tmp_path / "hostile.json"))
    assert result["runtime"]["b_s"] == 2.0 and len(result["operations"]) == 5


# -- validate ---------------------------------------------------------------------------------------------

def test_validate_a_cores_change_by_hand(tmp_path: Path) -> None:
    # Traced on 1 slot: the scan's two 1 s CPU tasks run one after the other (2 s), then a 1 s task: 3 s.
    traced = saved(job_trace([(1.0, 0.0), (1.0, 0.0)], [(1.0, 0.0)]), tmp_path / "traced.json")
    # Re-run on 2 slots: the two tasks side by side, each slower (1.5 s: the machine was busy): 2.5 s.
    rerun = saved(job_trace([(1.5, 0.0), (1.5, 0.0)], [(1.0, 0.0)], slots=2), tmp_path / "rerun.json")
    result = validate(load_run(traced, need_trace=True), load_run(rerun))
    assert result["changes"]["values"] == {"cores": 2}
    assert result["not_expressed"] == []
    # Predicted: the scan's tasks side by side, 1 s; the aggregation unchanged, 1 s.
    assert result["predicted"]["crystalperf"]["runtime_s"] == pytest.approx(2.0)
    assert result["traced_runtime_s"] == 3.0 and result["measured_runtime_s"] == 2.5
    assert result["error"]["crystalperf"] == pytest.approx((2.0 - 2.5) / 2.5)
    # Linear scaling halves everything: 1.5 s.
    assert result["error"]["linear"] == pytest.approx((1.5 - 2.5) / 2.5)
    rows = {r["path"]: r for r in result["operations"]}
    assert rows["job-0/stage-0"]["predicted_s"] == pytest.approx(1.0)
    assert rows["job-0/stage-0"]["measured_s"] == 1.5
    assert rows["job-0/stage-0"]["error"] == pytest.approx((1.0 - 1.5) / 1.5)
    assert rows["job-0/stage-1"]["error"] == pytest.approx(0.0)


def test_validate_counts_the_slot_settings_and_the_hook_s_own_as_expressed(tmp_path: Path) -> None:
    # local[1] -> local[2]: spark.master is the cores change; the output directories differ in every run
    traced = saved(job_trace([(1.0, 0.0), (1.0, 0.0)], [(1.0, 0.0)], properties={
        "spark.master": "local[1]", "spark.crystalperf.outputDir": "/runs/a", "x.codec": "lz4"}), tmp_path / "a.json")
    rerun = saved(job_trace([(1.5, 0.0), (1.5, 0.0)], [(1.0, 0.0)], slots=2, properties={
        "spark.master": "local[2]", "spark.crystalperf.outputDir": "/runs/b", "x.codec": "zstd"}),
        tmp_path / "b.json")
    result = validate(load_run(traced, need_trace=True), load_run(rerun))
    assert result["changes"]["values"] == {"cores": 2}
    [other] = result["not_expressed"]
    assert "1 other difference" in other and "x.codec" in other
    assert "spark.master" not in other and "outputDir" not in other


def test_validate_expresses_declared_bandwidths_and_memory_and_lists_the_rest(tmp_path: Path) -> None:
    traced = saved(job_trace([(0.5, 2.0)], [(1.0, 0.0)], disk_bandwidth=5e6, memory_bytes=1 << 30, cpu_count=4,
                             properties={"x.codec": "lz4"}), tmp_path / "traced.json")
    rerun = saved(job_trace([(0.5, 0.5)], [(1.0, 0.0)], disk_bandwidth=20e6, memory_bytes=4 << 30, cpu_count=8,
                            properties={"x.codec": "zstd"}), tmp_path / "rerun.json")
    result = validate(load_run(traced, need_trace=True), load_run(rerun))
    assert result["changes"]["values"] == {"memory": float(4 << 30), "disk": 20e6}
    missing = " | ".join(result["not_expressed"])
    assert "CPUs differ (4 and 8)" in missing and "setting x.codec: lz4 -> zstd" in missing
    assert result["predicted"]["crystalperf"]["runtime_s"] < result["traced_runtime_s"]


def test_validate_takes_a_change_of_the_processes_heap_for_memory(tmp_path: Path) -> None:
    # no memory for the job's data in either trace, but each TaskManager's heap (schema 1.11): 150 MB -> 290 MB
    def with_heap(trace: tr.Trace, heap: int) -> tr.Trace:
        trace.environment.executors = [tr.Executor(id="tm", garbage_collector=tr.GarbageCollector(heap_max_bytes=heap))]
        return trace

    traced = saved(with_heap(job_trace([(1.0, 0.0)], [(1.0, 0.0)], framework="flink"), 150_000_000), tmp_path / "a.json")
    rerun = saved(with_heap(job_trace([(0.8, 0.0)], [(1.0, 0.0)], framework="flink"), 290_000_000), tmp_path / "b.json")
    result = validate(load_run(traced, need_trace=True), load_run(rerun))
    assert result["changes"]["values"] == {"memory": 290_000_000.0}
    same = saved(with_heap(job_trace([(0.8, 0.0)], [(1.0, 0.0)], framework="flink"), 151_000_000), tmp_path / "c.json")
    assert validate(load_run(traced, need_trace=True), load_run(same))["changes"]["values"] == {}


def test_cli_validate_prints_and_writes(tmp_path: Path, capsys) -> None:
    traced = saved(job_trace([(1.0, 0.0), (1.0, 0.0)], [(1.0, 0.0)]), tmp_path / "traced.json")
    rerun = saved(job_trace([(1.5, 0.0), (1.5, 0.0)], [(1.0, 0.0)], slots=2), tmp_path / "rerun.json")
    assert main(["validate", str(traced), str(rerun), "--json", str(tmp_path / "v.json"),
                 "--html", str(tmp_path / "v.html"), "--classifier", "keyword"]) == 0
    out = capsys.readouterr().out
    assert "cores=2" in out and "error -20.0%" in out and "linear scaling" in out
    assert json.loads((tmp_path / "v.json").read_text())["measured_runtime_s"] == 2.5
    assert 'id="predictors"' in (tmp_path / "v.html").read_text()


def test_validate_leaves_out_a_bandwidth_difference_that_neither_run_needed() -> None:
    from crystalperf.core.compare.validate import DerivedChanges, _bandwidth_change

    def base(bandwidth: float, moved: float) -> dict[str, object]:
        return {"disk_bandwidth": bandwidth, "bandwidth_origins": {"disk": "declared"},
                "observed": {"disk": {"bytes": moved, "limit": None}}}

    # 100 -> 50 MB/s; the runs (2 s, 4 s) read 5 MB and 10 MB: at 50 MB/s 0.1 s and 0.2 s, 5 % of each run.
    idle = DerivedChanges()
    _bandwidth_change("disk", (base(100e6, 5e6), 2.0), (base(50e6, 10e6), 4.0), idle)
    assert idle.values == {} and "5.0% of a run at most" in idle.not_expressed[0]
    # The rerun read 50 MB: 1 s of its 4 s (25 %) at 50 MB/s: the change is predicted.
    busy = DerivedChanges()
    _bandwidth_change("disk", (base(100e6, 5e6), 2.0), (base(50e6, 50e6), 4.0), busy)
    assert busy.values == {"disk": 50e6} and busy.not_expressed == []
    # Without the counters nothing says the device was idle: the declared bandwidths are the change.
    unknown = DerivedChanges()
    _bandwidth_change("disk", ({"disk_bandwidth": 100e6, "bandwidth_origins": {"disk": "declared"}}, 2.0),
                      (base(50e6, 10e6), 4.0), unknown)
    assert unknown.values == {"disk": 50e6}


@pytest.mark.parametrize(("hosts_after", "expected"), [
    (["w0", "w1"], {"executors": 4, "hosts": 2}),  # two executors more on the same two hosts
    (["w0", "w1", "w2", "w3"], {"executors": 4}),  # on hosts of their own: what executors=4 means alone
])
def test_validate_says_where_added_executors_ran(tmp_path: Path, hosts_after: list[str], expected: dict) -> None:
    def on(trace: tr.Trace, hosts: list[str], executors: int) -> tr.Trace:
        trace.environment.executors = [tr.Executor(id=str(i), host=hosts[i % len(hosts)], cores=1)
                                       for i in range(executors)]
        trace.environment.hosts = sorted(set(hosts))
        trace.environment.total_slots = executors
        return trace

    traced = saved(on(job_trace([(1.0, 0.0)] * 4, [(1.0, 0.0)]), ["w0", "w1"], 2), tmp_path / "a.json")
    rerun = saved(on(job_trace([(1.0, 0.0)] * 4, [(1.0, 0.0)]), hosts_after, 4), tmp_path / "b.json")
    result = validate(load_run(traced, need_trace=True), load_run(rerun))
    assert result["changes"]["values"] == expected
    assert not any("hosts" in line for line in result["not_expressed"])


@pytest.mark.parametrize(("rerun_task", "noted"), [(12.0, "20% more"), (8.5, "15% less"), (10.5, None)])
def test_validate_says_when_the_reruns_tasks_did_other_work(tmp_path: Path, rerun_task: float,
                                                            noted: str | None) -> None:
    def with_work(trace: tr.Trace, task_cpu: float) -> tr.Trace:
        trace.environment.executors = [tr.Executor(id="driver", thread_cpu=tr.ThreadCpu(task=task_cpu, jit=2.0))]
        return trace

    traced = saved(with_work(job_trace([(1.0, 0.0), (1.0, 0.0)], [(1.0, 0.0)]), 10.0), tmp_path / "traced.json")
    rerun = saved(with_work(job_trace([(1.5, 0.0), (1.5, 0.0)], [(1.0, 0.0)], slots=2), rerun_task),
                  tmp_path / "rerun.json")
    result = validate(load_run(traced, need_trace=True), load_run(rerun))
    work = result["work"]
    assert work["traced"]["threads"]["task"] == 10.0 and work["rerun"]["threads"]["task"] == rerun_task
    assert work["task_change"] == pytest.approx((rerun_task - 10.0) / 10.0)
    notes = [n for n in result["notes"] if "the traced run's work" in n]
    if noted is None:
        assert notes == []  # 5 %: within what reruns vary by
    else:
        [note] = notes
        assert f"the rerun's task threads used {noted} CPU than the traced run's ({rerun_task:.2f} against 10.00" in note
        assert f"all their processes' threads {rerun_task + 2:.2f} against 12.00" in note


@pytest.mark.parametrize(("rerun_kernel", "rerun_faults", "noted"), [
    (2.5, 400_000, "1.50 CPU-s more of it in the kernel, on 60% more page faults served from memory (400,000 against "
                   "250,000): its JVMs first touched more of their heaps"),
    (1.1, 400_000, None),  # 0.10 CPU-s: not what the change is
    (2.5, 260_000, None),  # 4 % more faults: the kernel did other work
])
def test_validate_says_what_of_a_work_change_was_page_faults(tmp_path: Path, rerun_kernel: float, rerun_faults: int,
                                                            noted: str | None) -> None:
    def with_work(trace: tr.Trace, task_cpu: float, kernel: float, faults: int) -> tr.Trace:
        trace.environment.executors = [tr.Executor(id="tm-1", thread_cpu=tr.ThreadCpu(
            task=task_cpu, jit=2.0, kernel=kernel, minor_faults=faults))]
        return trace

    traced = saved(with_work(job_trace([(1.0, 0.0), (1.0, 0.0)], [(1.0, 0.0)]), 10.0, 1.0, 250_000),
                   tmp_path / "traced.json")
    rerun = saved(with_work(job_trace([(1.5, 0.0), (1.5, 0.0)], [(1.0, 0.0)], slots=2), 12.0, rerun_kernel,
                            rerun_faults), tmp_path / "rerun.json")
    result = validate(load_run(traced, need_trace=True), load_run(rerun))
    assert result["work"]["traced"]["minor_faults"] == 250_000 and result["work"]["rerun"]["kernel_cpu_s"] == rerun_kernel
    [note] = [n for n in result["notes"] if "the traced run's work" in n]
    assert "20% more CPU" in note
    if noted is None:
        assert "page faults" not in note
    else:
        assert noted in note


def test_validate_of_runs_without_cpu_figures_has_no_work(tmp_path: Path) -> None:
    run = load_run(saved(job_trace([(1.0, 0.0)], [(1.0, 0.0)]), tmp_path / "t.json"), need_trace=True)
    assert validate(run, run)["work"] is None


@pytest.mark.parametrize(("framework", "noted"), [("spark", True), ("tensorflow", False)])
def test_without_a_thread_split_the_frameworks_task_cpu_counts_where_it_is_cpu_time(
        tmp_path: Path, framework: str, noted: bool) -> None:
    from .test_ceilings import cpu_job

    def run(cpu_per_task: float, name: str) -> Path:
        trace = cpu_job()
        trace.application.framework = framework
        for op in trace.operations:
            for t in op.tasks:
                t.metrics[tr.METRIC_CPU_TIME] = cpu_per_task
        return saved(trace, tmp_path / name)

    result = validate(load_run(run(1.0, "traced.json"), need_trace=True), load_run(run(0.5, "rerun.json")))
    assert result["work"]["traced"]["task_cpu_s"] == 10.0 and result["work"]["rerun"]["task_cpu_s"] == 5.0
    notes = [n for n in result["notes"] if "the traced run's work" in n]
    # Spark's executorCpuTime is CPU time; TensorFlow's per-op figure is its kernels' duration, which threads shorten
    assert notes == (["the rerun's tasks (as the framework measured them) used 50% less CPU than the traced run's "
                      "(5.00 against 10.00 CPU-s): the prediction keeps the traced run's work, so a miss of about "
                      "that share is the work's, not the resources' (docs/whatif.md, Known limits)"] if noted else [])
