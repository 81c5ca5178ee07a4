"""The report's ``machine``: what the job's tasks shared — the cores its processes could use and how busy they
kept them, the other processes of its hosts, and where the processes' CPU went by kind of thread.

A user deciding whether more task slots would help needs to see this: a JVM whose compilers, collector and
network threads already keep its cores busy gives an added slot little, and the what-ifs' ceilings count that
(docs/whatif.md). The figures are the hooks' own: the processes' CPU counters (trace ``io`` rows, schema 1.8)
and each process's CPU by thread kind (``environment.executors[].thread_cpu``, schema 1.6), with its kernel seconds
and page faults served from memory (schema 1.13) where the hook read them.
"""

from __future__ import annotations

from typing import Any

from crystalperf.core import trace as tr
from crystalperf.core.predict.jvm import first_touch
from crystalperf.core.profile.shared import SharedMachine
from crystalperf.core.report.svg import esc, seconds

# The kinds of thread as the report names them, in the order it lists them; the collector's two kinds are one.
THREAD_KINDS = ("task", "jit", "gc", "network", "hook", "other")
KIND_WORDS = {
    "task": "the tasks",
    "jit": "the JIT compilers",
    "gc": "the garbage collector",
    "network": "the network threads",
    "hook": "the hook's threads",
    "other": "the rest",
}
# A kind of thread is named in the sentence from this many CPU-s or this share of the processes' (the JSON has all).
MIN_SECONDS_TO_SAY = 0.5
MIN_SHARE_TO_SAY = 0.01
# Processes listed one by one in the JSON; the totals cover them all.
MAX_PROCESSES = 100
# Under this share of their processes' CPU, the tasks' threads are said to be the smaller part.
TASK_SHARE_TO_SAY = 0.5
# From this share of the cores busy on average, the machine is said to be busy.
BUSY_TO_SAY = 0.8


def collector_cpu(cpu: tr.ThreadCpu) -> float:
    """The garbage collector's CPU seconds: its pause workers' and its concurrent threads'."""
    return cpu.gc + cpu.gc_concurrent


def _kinds(cpu: tr.ThreadCpu) -> dict[str, float]:
    return {"task": cpu.task, "jit": cpu.jit, "gc": collector_cpu(cpu), "network": cpu.network,
            "hook": cpu.hook, "other": cpu.other}


def _rounded(values: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in values.items()}


def _split_words(threads: dict[str, float]) -> str:
    total = sum(threads.values())
    shown = [(kind, threads[kind]) for kind in THREAD_KINDS
             if threads[kind] >= MIN_SECONDS_TO_SAY or threads[kind] >= MIN_SHARE_TO_SAY * total]
    return ", ".join(f"{KIND_WORDS[kind]} {seconds:.2f} s ({seconds / total:.0%})" for kind, seconds in shown)


def machine_entry(trace: tr.Trace, machine: SharedMachine | None) -> dict[str, Any] | None:
    """The report's ``machine``; None where the trace has neither the processes' CPU counters nor their split by
    thread kind (an imported event log, a trace before schema 1.6)."""
    split = [e for e in trace.environment.executors if e.thread_cpu is not None]
    if machine is None and not split:
        return None
    entry: dict[str, Any] = {}
    sentences: list[str] = []
    if machine is not None:
        utilization = machine.busy_cores / machine.cores if machine.cores > 0 else 0.0
        entry.update({
            "hosts": machine.hosts,
            "cores": round(machine.cores, 3),
            "host_cpus": machine.host_cpus,
            "limited_by": machine.limited_by,
            "span_s": round(machine.span_s, 6),
            "process_cpu_s": round(machine.process_cpu_s, 6),
            "task_cpu_s": round(machine.task_cpu_s, 6) if machine.task_cpu_s is not None else None,
            "busy_cores": round(machine.busy_cores, 4),
            "utilization": round(utilization, 4),
            "peak_utilization": round(machine.peak_utilization, 4),
            "other_processes_cores": round(machine.other_cores, 4),
            "one_machine": machine.one_machine,
        })
        where = f"{machine.hosts} hosts" if machine.hosts > 1 else "its host"
        cores = f"{machine.cores:g} core{'' if machine.cores == 1 else 's'}"
        limit = " (a cpuset or cgroup CPU limit)" if machine.limited_by == "limit" else ""
        text = (f"The job's processes used {machine.process_cpu_s:.1f} CPU-s in {machine.span_s:.1f} s: "
                f"{machine.busy_cores:.2f} of the {cores} they could use on {where}{limit} on average "
                f"({utilization:.0%}; the busiest second {machine.peak_utilization:.0%})")
        if machine.other_cores >= 0.05:
            text += f"; other processes there kept {machine.other_cores:.2f} cores busy"
        sentences.append(text + ".")
    if split:
        threads = {kind: 0.0 for kind in THREAD_KINDS}
        processes: list[dict[str, Any]] = []
        for executor in split:
            assert executor.thread_cpu is not None
            kinds = _kinds(executor.thread_cpu)
            for kind, value in kinds.items():
                threads[kind] += value
            if len(processes) < MAX_PROCESSES:
                processes.append({"id": executor.id, "host": executor.host, "cpu_s": round(sum(kinds.values()), 6),
                                  "threads": _rounded(kinds)})
        total = sum(threads.values())
        entry["threads"] = _rounded(threads)
        entry["threads_cpu_s"] = round(total, 6)
        touched = first_touch(trace)
        if touched is not None:
            # validate compares them: a rerun whose heap more threads first touched at once faulted more, dearer
            entry["kernel_cpu_s"] = round(touched.kernel_s, 6)
            entry["minor_faults"] = touched.faults
            if touched.task_kernel_s is not None:
                entry["task_kernel_cpu_s"] = round(touched.task_kernel_s, 6)
        entry["processes"] = processes
        if total > 0:
            who = "its process's" if len(split) == 1 else f"its {len(split)} processes'"
            sentences.append(f"By kind of thread, {who} {total:.1f} CPU-s went to {_split_words(threads)}.")
            task_share = threads["task"] / total
            busy = machine is not None and machine.busy_cores >= BUSY_TO_SAY * machine.cores
            if task_share < TASK_SHARE_TO_SAY and busy:
                sentences.append(
                    f"The tasks' threads had {task_share:.0%} of it, on cores kept busy: task slots added on these "
                    "cores share them with the processes' own threads, which the what-ifs here count.")
    entry["sentence"] = " ".join(sentences)
    return entry


def machine_section(report: dict[str, Any]) -> str:
    """The HTML report's section of ``machine``: its sentence and a row per process by thread kind."""
    machine = report.get("machine")
    if not isinstance(machine, dict) or not machine:
        return ('<section id="machine"><h2>What the tasks shared</h2><p class="note">The trace has no CPU counters '
                "of the job's processes (written before schema 1.6, or imported from the framework's own logs)."
                "</p></section>")
    rows = ""
    threads_total = machine.get("threads")
    kinds = [str(k) for k in threads_total] if isinstance(threads_total, dict) else []
    processes = machine.get("processes")
    for process in processes if isinstance(processes, list) else []:
        if not isinstance(process, dict):
            continue
        found = process.get("threads")
        threads = found if isinstance(found, dict) else {}
        rows += (f"<tr><td>{esc(process.get('id'))}</td><td>{esc(process.get('host') or '')}</td>"
                 f"<td>{esc(seconds(process.get('cpu_s')))}</td>"
                 + "".join(f"<td>{esc(seconds(threads.get(k)))}</td>" for k in kinds) + "</tr>")
    table = ("<table><thead><tr><th>process</th><th>host</th><th>CPU</th>"
             + "".join(f"<th>{esc(KIND_WORDS.get(k, k))}</th>" for k in kinds)
             + f"</tr></thead><tbody>{rows}</tbody></table>" if rows else "")
    return (f'<section id="machine"><h2>What the tasks shared</h2><p>{esc(machine.get("sentence", ""))}</p>'
            f"{table}</section>")
