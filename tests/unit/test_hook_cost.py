"""The hook's CPU budget (a fake clock and a fake CPU meter), its self-measured cost in the trace and in every
report, and the places that carry it (a worker's journal, a finish adding the trace's writing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze_path
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.record import budget as hb
from crystalperf.core.record.samplejournal import SampleJournal, read_journal
from crystalperf.core.record.sampletable import SampleTable
from crystalperf.core.report.document import hook_cost
from crystalperf.core.report.html import HtmlRenderer
from crystalperf.core.report.terminal import TerminalRenderer
from crystalperf.core.trace.synthetic import spark_like_trace


class FakeMachine:
    """A clock and the hook's CPU meter: each sampling round costs ``round_cost`` CPU seconds, and work the
    samplers do not control costs ``fixed_rate`` CPU seconds per second."""

    def __init__(self, round_cost: float, fixed_rate: float = 0.0) -> None:
        self.now = 0.0
        self.spent = 0.0
        self.round_cost = round_cost
        self.fixed_rate = fixed_rate

    def clock(self) -> float:
        return self.now

    def meter(self) -> float:
        return self.spent

    def run(self, pace: hb.Pace, seconds: float) -> float:
        """Sampling rounds for ``seconds`` of fake time; the hook's CPU rate over the last 10 s."""
        end, mark = self.now + seconds, None
        wait = pace.interval_s
        while self.now < end:
            self.now += wait
            self.spent += self.round_cost + self.fixed_rate * wait
            if mark is None and self.now >= end - 10:
                mark = (self.now, self.spent)
            wait = pace.next()
        assert mark is not None
        return (self.spent - mark[1]) / (self.now - mark[0])


def _pace(machine: FakeMachine, share: float = 0.01, cores: float = 2.0) -> hb.Pace:
    budget = hb.CpuBudget(share, cores, spent=machine.meter, clock=machine.clock)
    return hb.Pace(budget, base_s=0.1, floor_s=1.0)


def test_a_sampler_too_dear_for_the_budget_slows_down_until_the_hook_fits_it() -> None:
    # 10 ms a round at 100 ms is 0.1 CPU-s/s; the budget is 1 % of 2 cores, 0.02 CPU-s/s: rounds every 0.5 s fit
    machine = FakeMachine(round_cost=0.01)
    pace = _pace(machine)
    rate = machine.run(pace, 120)
    assert pace.interval_s == pytest.approx(0.5)
    assert rate <= 0.02 * 1.01
    assert pace.taken < pace.planned  # the report can say the budget thinned the samples


def test_a_short_job_keeps_to_the_budget_from_its_first_round() -> None:
    # a 4 s job: rounds of 10 ms at 100 ms would spend 0.4 CPU-s; the budget allows 0.02 CPU-s/s, 0.08 in all.
    # The hook may overrun by the one round it cannot know the cost of before taking it.
    machine = FakeMachine(round_cost=0.01)
    pace = _pace(machine)
    machine.run(pace, 4)
    assert machine.spent <= 0.02 * machine.now + machine.round_cost
    assert pace.taken >= 4  # still a round a second at least


def test_a_cheap_sampler_keeps_its_interval_and_a_stretched_one_comes_back() -> None:
    machine = FakeMachine(round_cost=0.0001)
    pace = _pace(machine)
    machine.run(pace, 60)
    assert pace.interval_s == pytest.approx(0.1)
    assert pace.taken == pace.planned
    machine.round_cost = 0.05  # the job's stacks got deep: rounds cost more
    machine.run(pace, 60)
    assert pace.interval_s == pytest.approx(1.0)
    machine.round_cost = 0.0001
    machine.run(pace, 60)
    assert pace.interval_s == pytest.approx(0.1)


def test_the_analysis_keeps_its_evidence_when_the_budget_cannot_be_met() -> None:
    # per-task work alone takes more than the budget: the sampler goes no slower than a round a second, and the
    # windows over the budget are counted for the report
    machine = FakeMachine(round_cost=0.001, fixed_rate=0.05)
    pace = _pace(machine)
    machine.run(pace, 120)
    assert pace.interval_s == pytest.approx(1.0)
    assert pace.budget is not None and pace.budget.windows_over == pace.budget.windows > 0


def test_no_budget_keeps_the_configured_interval() -> None:
    machine = FakeMachine(round_cost=0.05)
    pace = _pace(machine, share=0.0)
    machine.run(pace, 60)
    assert pace.interval_s == pytest.approx(0.1)
    assert hb.Pace(None, 0.1, 1.0).next() == pytest.approx(0.1)


def test_the_budget_share_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hb.SHARE_ENV, "0.05")
    assert hb.share_from_env() == 0.05
    for bad in ("x", "-1", "2"):
        monkeypatch.setenv(hb.SHARE_ENV, bad)
        assert hb.share_from_env() == hb.DEFAULT_SHARE


def test_the_budget_is_a_share_of_the_cores_the_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from crystalperf.core.record import cgroups

    monkeypatch.setattr(cgroups, "cpu_limit", lambda: 0.5)  # a CPU quota of half a core
    assert hb.allowed_cores() == 0.5
    assert hb.CpuBudget(0.01).allowed_rate == pytest.approx(0.005)
    monkeypatch.setattr(cgroups, "cpu_limit", lambda: None)  # nothing readable: the machine's CPUs
    assert hb.allowed_cores() >= 1


def test_the_meter_adds_by_part_and_starts_over() -> None:
    meter = hb.HookCpu()
    meter.add("sampler", 0.25)
    meter.add("sampler", 0.25)
    meter.add("tasks", 0.125)
    meter.add("tasks", -1.0)  # nothing negative
    with meter.own_thread("counters"):
        sum(range(1000))
    with meter.timed("callbacks"):
        pass
    assert meter.parts()["sampler"] == 0.5 and meter.parts()["tasks"] == 0.125
    assert meter.total() == pytest.approx(sum(meter.parts().values()))
    meter.reset()
    assert meter.parts() == {} and meter.total() == 0.0


def test_a_block_timed_inside_another_counts_for_its_own_part_only(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter([0.0, 1.0, 3.0, 4.0])  # outer begins, inner begins, inner ends, outer ends
    monkeypatch.setattr(hb.time, "perf_counter", lambda: next(ticks))
    meter = hb.HookCpu()
    with meter.timed("window_end"), meter.timed("profile_read"):
        pass
    assert meter.parts() == {"window_end": 2.0, "profile_read": 2.0}


def _hook(**fields: object) -> tr.HookCost:
    defaults: dict[str, object] = {"source": "driver", "cpu_s": 1.5, "parts": {"sampler": 1.0, "tasks": 0.5},
                                   "process_cpu_s": 150.0, "cores": 2.0, "budget_share": 0.01,
                                   "samples_taken": 900, "samples_planned": 900, "windows": 50,
                                   "windows_over_budget": 0}
    return tr.HookCost(processes=[tr.HookProcess.model_validate(defaults | fields)])


def test_the_report_gives_the_hooks_cpu_and_its_share() -> None:
    cost = hook_cost(_hook())
    assert cost is not None
    assert cost["cpu_s"] == 1.5 and cost["job_cpu_s"] == 150.0 and cost["share"] == pytest.approx(0.01)
    assert cost["parts"] == {"sampler": 1.0, "tasks": 0.5} and not cost["thinned"]
    assert "1.50 s of CPU, 1.00% of the 150.0 s" in cost["sentence"]
    assert hook_cost(None) is None and hook_cost(tr.HookCost()) is None


def test_the_report_sets_the_profiled_steps_beside_the_later_ones() -> None:
    """Keras: the trace's medians of the profiled steps and of the steps after them say what recording a step cost
    (the framework's profiler included); a difference within twice its standard error is said to be within what the
    steps vary, and later steps slower than the profiled ones are not called a cost."""
    later = {"profiled_step_median_s": 0.0242, "later_step_median_s": 0.0220, "later_steps": 38.0,
             "step_slowdown_se": 0.03}
    cost = hook_cost(_hook(), later)
    assert cost is not None
    slowdown = cost["step_slowdown"]
    assert slowdown["ratio"] == pytest.approx(0.1) and slowdown["later_steps"] == 38
    assert slowdown["standard_error"] == pytest.approx(0.03)
    assert "The profiled steps took 10.0% longer than the 38 steps timed after them (medians 24.2 ms and 22 ms, ±3.0%)" \
        in cost["sentence"]
    close = hook_cost(_hook(), later | {"profiled_step_median_s": 0.0231})["sentence"]
    assert "took +5.0% against the 38 steps" in close and "within what the steps vary" in close
    slower_later = hook_cost(_hook(), later | {"profiled_step_median_s": 0.0198})["sentence"]
    assert "took 10.0% less time than" in slower_later and "reasons of their own" in slower_later
    assert hook_cost(_hook())["step_slowdown"] is None  # type: ignore[index]
    assert hook_cost(_hook(), {"later_step_median_s": 0.02, "later_steps": 9.0})["step_slowdown"] is None  # type: ignore[index]


def test_the_report_says_how_much_of_the_cost_was_the_jobs_threads_paused_for_stacks() -> None:
    cost = hook_cost(_hook(cpu_s=1.5, parts={"sampler": 0.5, "tasks": 0.25, "pauses": 0.75}))
    assert cost is not None and cost["parts"]["pauses"] == 0.75
    assert "1.50 s of CPU, 1.00% of the 150.0 s its processes used, 0.75 s of it the job's threads stopped" \
        in cost["sentence"]
    assert "stopped" not in hook_cost(_hook())["sentence"]  # type: ignore[index]


def test_the_report_says_when_the_budget_thinned_the_evidence() -> None:
    cost = hook_cost(_hook(samples_taken=300, samples_planned=900, windows_over_budget=4))
    assert cost is not None and cost["thinned"] and cost["windows_over_budget"] == 4
    assert "300 rounds taken where the configured interval would have taken 900" in cost["sentence"]
    assert "more than its budget in 4 of 50" in cost["sentence"]
    # a process whose CPU time is unknown: no share of the job
    two = tr.HookCost(processes=[*_hook().processes, tr.HookProcess(source="executor:1", cpu_s=0.5)])
    assert hook_cost(two)["share"] is None  # type: ignore[index]


def test_json_html_and_terminal_reports_show_the_cost(tmp_path: Path) -> None:
    trace = spark_like_trace(jobs=1, tasks_per_stage=2)
    trace.hook = _hook(samples_taken=300, samples_planned=900)
    trace.metrics.update(profiled_step_median_s=0.03, later_step_median_s=0.02, later_steps=40.0,
                         step_slowdown_se=0.05)
    path = tr.save_trace(trace, tmp_path / "crystalperf-trace.json.gz")
    assert tr.load_trace(path).hook == trace.hook
    report = analyze_path(path, tmp_path, classifier=KeywordClassifier()).report
    assert report["hook_cost"]["cpu_s"] == 1.5
    assert report["hook_cost"]["sentence"] in report["warnings"]  # thinned: said among the warnings too
    html = HtmlRenderer().render(report)
    assert 'id="hook-cost"' in html and "1.00%" in html
    assert "profiled steps against later ones</dt><dd>+50.0%" in html
    terminal = TerminalRenderer(width=400).render(report)
    assert "Cost of the hook" in terminal and "50.0% longer than the 40 steps timed after them" in terminal
    # a trace without the figures: the key is there, empty, and the page says why
    (tmp_path / "old").mkdir()
    path = tr.save_trace(spark_like_trace(jobs=1, tasks_per_stage=2), tmp_path / "old" / "crystalperf-trace.json.gz")
    report = analyze_path(path, tmp_path / "old", classifier=KeywordClassifier()).report
    assert report["hook_cost"] is None
    assert "does not say what the hook cost" in HtmlRenderer().render(report)


def test_a_workers_journal_carries_its_hook_cost(tmp_path: Path) -> None:
    table = SampleTable(0.0)
    journal = SampleJournal(tmp_path / "pyworker-1.jsonl", table)
    key = tr.SampleKey(operation="stage-0", task="1", thread="python-worker")
    table.add(key, table.stack_id([table.frame_id("f", "f.py", 1)], "runnable"), 0.5)
    first = hb.process_cost("python:1", {"sampler": 0.1}, process_cpu_s=2.0)
    journal.flush({}, set(), first)  # the first flush writes the whole file
    later = hb.process_cost("python:1", {"sampler": 0.2, "tasks": 0.05}, process_cpu_s=4.0)
    journal.flush({}, set(), later)
    found = read_journal(tmp_path / "pyworker-1.jsonl")
    assert found.hook == later and found.samples is not None
    journal.flush({}, set())  # a line without it keeps the last one
    assert read_journal(tmp_path / "pyworker-1.jsonl").hook == later


def test_what_the_trace_could_not_hold_is_added_to_its_process() -> None:
    trace = spark_like_trace(jobs=1, tasks_per_stage=2)
    trace.hook = _hook()
    hb.add_hook_part(trace, "driver", "trace_write", 0.5)
    driver = trace.hook.processes[0]
    assert driver.parts["trace_write"] == 0.5 and driver.cpu_s == 2.0 and driver.process_cpu_s == 150.5
    hb.add_hook_processes(trace, [tr.HookProcess(source="python:7", cpu_s=0.25)])
    assert [p.source for p in trace.hook.processes] == ["driver", "python:7"]
    bare = spark_like_trace(jobs=1, tasks_per_stage=2)
    hb.add_hook_part(bare, "driver", "trace_write", 0.5)
    assert bare.hook is not None and bare.hook.cpu_s == 0.5
    hb.add_hook_part(bare, "driver", "trace_write", float("nan"))
    assert bare.hook.cpu_s == 0.5


def test_a_flink_clients_spool_counts_the_hook_since_its_sampler_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client process that ran jobs before (a notebook, a test session) must not charge their hooks' CPU to
    this one: the parts and the process's CPU time cover the same span."""
    from crystalperf.integrations.flink.pyworkers import WorkerSampler, load_spool, spool_files

    meter = hb.HookCpu()
    monkeypatch.setattr(hb, "PROCESS", meter)
    meter.add("sampler", 100.0)  # the jobs before
    sampler = WorkerSampler(tmp_path)
    meter.add("sampler", 0.5)
    meter.add("counters", 0.25)
    sampler.flush()
    loaded = load_spool(spool_files(tmp_path)[0])
    assert loaded is not None
    hook = json.loads(spool_files(tmp_path)[0].read_text())["hook"]
    assert hook["parts"] == {"sampler": 0.5, "counters": 0.25}
    assert hook["cpu_s"] == pytest.approx(0.75)


def test_a_meter_gives_what_was_counted_after_a_mark() -> None:
    meter = hb.HookCpu()
    meter.add("sampler", 2.0)
    mark = meter.parts()
    meter.add("sampler", 0.5)
    meter.add("writing", 0.25)
    assert meter.since(mark) == {"sampler": 0.5, "writing": 0.25}
