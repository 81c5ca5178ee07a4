"""Linux schedstat's run-queue delay of this process's threads: the time a thread was runnable but waited for
a core. On a machine with fewer cores than runnable threads a CPU-bound task's CPU time is only its share of
the cores; its run-queue delay is the rest of the CPU it wanted (the task metric ``cpu_wait_s``).

The PySpark worker reads it around every task (:mod:`.pydaemon`); the JVM's task threads read their own in
the executor plugin. Without /proc (another OS, a kernel without schedstats) nothing is measured.
"""

from __future__ import annotations

from pathlib import Path

TASK_DIR = Path("/proc/self/task")


def run_queue_delays(task_dir: Path = TASK_DIR) -> dict[int, int] | None:
    """Thread id -> nanoseconds each of this process's threads has been runnable but waiting for a core
    (the second field of its schedstat); None where the kernel does not say (no /proc, no schedstats)."""
    delays: dict[int, int] = {}
    try:
        threads = list(task_dir.iterdir())
    except OSError:
        return None
    for thread in threads:
        try:
            delays[int(thread.name)] = int((thread / "schedstat").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile, or its file says nothing usable
    return delays or None


def run_queue_delay_s(before: dict[int, int] | None, after: dict[int, int] | None,
                      ignore: frozenset[int] = frozenset()) -> float | None:
    """Seconds the threads queued for a core between two :func:`run_queue_delays`: a thread that started
    meanwhile counts from zero; one that ended meanwhile is lost (its counter went with it)."""
    if before is None or after is None:
        return None
    return sum(max(0, ns - before.get(tid, 0)) for tid, ns in after.items() if tid not in ignore) / 1e9
