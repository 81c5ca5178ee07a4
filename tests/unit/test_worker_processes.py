"""The CPU time of a process's worker processes (crystalperf.core.record.iocounters.descendant_cpu): real child
processes, one computing, one of crystalperf's own (a hook's analysis), which is left out with what it started, and
multiprocessing's resource tracker, which is no worker either."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crystalperf.core.record.iocounters import descendant_cpu

SPIN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\ntime.sleep(30)\n"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_the_workers_cpu_is_counted_and_crystalperfs_own_processes_are_not(tmp_path: Path) -> None:
    # crystalperf's own: "python -m crystalperf.<module>", here a module of our name that spins and starts a child
    package = tmp_path / "crystalperf"
    package.mkdir()
    (package / "__init__.py").write_text("")
    spun = [tmp_path / f"spun-{name}" for name in ("worker", "own", "own-child")]

    def spin(seconds: float, marker: Path) -> str:
        # spins, then says so and sleeps: on a loaded machine the CPU seconds take longer than a fixed wait
        return SPIN.format(seconds=seconds).replace("time.sleep(30)", f"open({str(marker)!r}, 'w').close()\ntime.sleep(30)")

    (package / "spin.py").write_text(
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {spin(0.3, spun[2])!r}])\n" + spin(0.3, spun[1]))
    worker = subprocess.Popen([sys.executable, "-c", spin(0.4, spun[0])])
    own = subprocess.Popen([sys.executable, "-m", "crystalperf.spin"], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(tmp_path)})
    try:
        deadline = time.monotonic() + 60
        while not all(marker.exists() for marker in spun):
            assert time.monotonic() < deadline, [m.name for m in spun if not m.exists()]
            time.sleep(0.05)
        found = descendant_cpu(os.getpid())
        assert set(found) == {worker.pid}, found
        assert found[worker.pid] >= 0.3
    finally:
        for process in (worker, own):
            process.kill()
            process.wait()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_a_child_that_ended_but_was_not_reaped_is_no_worker() -> None:
    """A zombie keeps its CPU time and loses its command line: counted, a finished analysis would pass for a worker
    that computed in the window."""
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=0.2).replace("time.sleep(30)", "")])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert child.pid not in descendant_cpu(os.getpid())
    finally:
        child.wait()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_multiprocessings_resource_tracker_is_no_worker() -> None:
    """A pool started under spawn or forkserver starts the resource tracker beside its workers; it computes nothing
    of the job's, and counted as a worker it made a two-process pool three."""
    script = ("from multiprocessing import resource_tracker\nresource_tracker.ensure_running()\n"
              "import time\nprint(resource_tracker._resource_tracker._pid, flush=True)\ntime.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        tracker = int(child.stdout.readline())
        found = descendant_cpu(os.getpid())
        assert child.pid in found and tracker not in found, (child.pid, tracker, found)
    finally:
        child.kill()
        child.wait()
