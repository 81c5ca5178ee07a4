"""The report's ``machine`` (crystalperf.core.report.machine): the cores the job's processes could use, how busy they
kept them, and where their CPU went by kind of thread — hand-computed from one operation's counters."""

from __future__ import annotations

import json

from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import FixedClassifier
from crystalperf.core.report.html import HtmlRenderer
from crystalperf.core.report.terminal import TerminalRenderer

from .helpers import make_trace, op, task
from .test_ceilings import cpu_job


def _report(trace: tr.Trace) -> dict:
    return analyze(trace, classifier=FixedClassifier({}), locators=[], band=False).report


def test_a_busy_machine_whose_jvm_kept_its_cores_for_itself_says_so() -> None:
    trace = cpu_job(process_cores=1.9)  # 19 CPU-s in 10 s on 2 cores; the tasks 10 of them
    trace.environment.executors[0].thread_cpu = tr.ThreadCpu(task=4.0, jit=8.0, gc=1.0, gc_concurrent=1.0,
                                                             network=0.2, hook=0.1, other=4.7)
    machine = _report(trace)["machine"]
    assert machine["cores"] == 2 and machine["hosts"] == 1 and machine["limited_by"] == "cpus"
    assert machine["busy_cores"] == 1.9 and machine["utilization"] == 0.95
    assert machine["process_cpu_s"] == 19.0 and machine["task_cpu_s"] == 10.0
    assert machine["threads"] == {"task": 4.0, "jit": 8.0, "gc": 2.0, "network": 0.2, "hook": 0.1, "other": 4.7}
    assert machine["threads_cpu_s"] == 19.0
    assert machine["processes"] == [{"id": "driver", "host": None, "cpu_s": 19.0, "threads": machine["threads"]}]
    sentence = machine["sentence"]
    assert "used 19.0 CPU-s in 10.0 s: 1.90 of the 2 cores they could use on its host on average (95%" in sentence
    # 0.2 and 0.1 CPU-s are under half a second and 1 % of 19: named in the JSON only
    assert ("went to the tasks 4.00 s (21%), the JIT compilers 8.00 s (42%), the garbage collector 2.00 s (11%), "
            "the network threads 0.20 s (1%), the rest 4.70 s (25%)") in sentence
    assert "the hook" not in sentence
    assert "The tasks' threads had 21% of it, on cores kept busy" in sentence
    assert "kernel_cpu_s" not in machine and "minor_faults" not in machine  # the hook did not read them


def test_the_processes_page_faults_and_kernel_time_add_up_where_every_process_has_them() -> None:
    trace = cpu_job(process_cores=1.9)
    trace.environment.executors = [
        tr.Executor(id="tm-1", host="h", thread_cpu=tr.ThreadCpu(task=6.0, jit=2.0, kernel=0.5, minor_faults=1000)),
        tr.Executor(id="tm-2", host="h", thread_cpu=tr.ThreadCpu(task=5.0, jit=2.0, kernel=0.25, minor_faults=500))]
    machine = _report(trace)["machine"]
    assert machine["kernel_cpu_s"] == 0.75 and machine["minor_faults"] == 1500
    assert machine["threads_cpu_s"] == 15.0  # a cut across the kinds, not one of them
    assert "task_kernel_cpu_s" not in machine  # neither split its task threads' part out
    for executor, task_kernel in zip(trace.environment.executors, (0.125, 0.25), strict=True):
        assert executor.thread_cpu is not None
        executor.thread_cpu.task_kernel = task_kernel
    assert _report(trace)["machine"]["task_kernel_cpu_s"] == 0.375
    trace.environment.executors[1].thread_cpu = tr.ThreadCpu(task=5.0, jit=2.0)
    assert "minor_faults" not in _report(trace)["machine"]


def test_tasks_with_the_cores_to_themselves_get_no_remark() -> None:
    trace = cpu_job(process_cores=1.0, busiest=1.2)
    trace.environment.executors[0].thread_cpu = tr.ThreadCpu(task=2.0, jit=8.0)
    machine = _report(trace)["machine"]
    # half the cores busy: the tasks' small share is not what holds a slot more back
    assert machine["utilization"] == 0.5 and "cores kept busy" not in machine["sentence"]


def test_a_cpu_limit_and_other_processes_are_named() -> None:
    trace = cpu_job(process_cores=1.0, other_cores=0.5, busiest=1.5)
    for row in trace.io:
        row.cpu_limit = 1.0
    machine = _report(trace)["machine"]
    assert machine["cores"] == 1 and machine["limited_by"] == "limit"
    assert "of the 1 core they could use on its host (a cpuset or cgroup CPU limit)" in machine["sentence"]
    assert "other processes there kept 0.50 cores busy" in machine["sentence"]
    assert "threads" not in machine  # the trace does not split the process's CPU


def test_a_split_without_counters_is_still_shown_and_no_figures_no_section() -> None:
    trace = make_trace([op("stage", 0, 10, tasks=[task("t", 0, 10, run_time_s=10, cpu_time_s=6.0)])], end=10)
    assert _report(trace)["machine"] is None
    trace.environment.executors = [tr.Executor(id="tm-1", host="h1", thread_cpu=tr.ThreadCpu(task=6.0, jit=2.0)),
                                   tr.Executor(id="tm-2", host="h2", thread_cpu=tr.ThreadCpu(task=5.0, other=1.0)),
                                   tr.Executor(id="tm-3", host="h3")]
    machine = _report(trace)["machine"]
    assert "cores" not in machine and machine["threads_cpu_s"] == 14.0
    assert [p["id"] for p in machine["processes"]] == ["tm-1", "tm-2"]
    assert machine["sentence"] == ("By kind of thread, its 2 processes' 14.0 CPU-s went to the tasks 11.00 s (79%), "
                                   "the JIT compilers 2.00 s (14%), the rest 1.00 s (7%).")


def test_the_html_and_the_terminal_show_it_and_a_hostile_report_renders() -> None:
    trace = cpu_job(process_cores=1.9)
    trace.environment.executors[0].thread_cpu = tr.ThreadCpu(task=4.0, jit=8.0, other=7.0)
    report = json.loads(json.dumps(_report(trace)))
    html = HtmlRenderer().render(report)
    assert '<section id="machine"><h2>What the tasks shared</h2>' in html
    assert "<th>the JIT compilers</th>" in html and "<td>driver</td>" in html
    assert "What the tasks shared" in TerminalRenderer(width=200).render(report)
    report["machine"] = {"threads": ["x"], "processes": [1, {"threads": 3, "id": "<b>"}], "sentence": "<i>"}
    hostile = HtmlRenderer().render(report)
    assert "&lt;i&gt;" in hostile and "<i>" not in hostile and "&lt;b&gt;" in hostile
    for broken in (None, "cores", [1, 2]):
        report["machine"] = broken
        assert "The trace has no CPU counters" in HtmlRenderer().render(report)
        TerminalRenderer().render(report)
