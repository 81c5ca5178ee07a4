"""Real local[2] PySpark applications with crystalperf's listener, plugin and Python worker sampler.

Each application runs in a subprocess of its own: the listener reads its configuration when the
SparkContext starts (one per JVM), and a subprocess shows the application's own exit status and
output, which crystalperf must never change.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integrations.spark.reports import assert_no_plumbing_top_functions

PRELUDE = '''
import sys
from pyspark.sql import SparkSession
from crystalperf.integrations.spark import configure

def session(**conf):
    builder = (SparkSession.builder.master("local[2]").appName("crystalperf-test")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4"))
    for key, value in conf.items():
        builder = builder.config(key, str(value))
    return configure(builder).getOrCreate()
'''


@dataclass
class AppRun:
    returncode: int
    stdout: str
    stderr: str

    def report(self, out: Path) -> dict:
        """The job-end report in ``out``, checked for what every report must hold."""
        report = json.loads((out / "crystalperf-report.json").read_text())
        assert_no_plumbing_top_functions(report)
        return report


DETACHED = re.compile(r"the analysis runs detached \(pid (\d+)\)")


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_for_finish(stderr: str, timeout: float = 300) -> None:
    """Wait until the job-end processes the listener started detached (named in the driver's log) have ended."""
    deadline = time.monotonic() + timeout
    for pid in (int(p) for p in DETACHED.findall(stderr)):
        while _running(pid):
            assert time.monotonic() < deadline, f"the detached finish (pid {pid}) did not end in {timeout} s"
            time.sleep(0.1)


@pytest.fixture
def run_app(tmp_path: Path):
    """Run a PySpark script (PRELUDE + body) in a fresh Python; returns its exit status and output."""

    def run(body: str, *, testing: bool = True, timeout: float = 300, wait_finish: bool = True,
            env: dict[str, str] | None = None) -> AppRun:
        """``wait_finish``: also wait for the detached job-end process (the report), as the tests read it."""
        script = tmp_path / "app.py"
        script.write_text(PRELUDE + textwrap.dedent(body))
        environment = dict(os.environ, PYSPARK_PYTHON=sys.executable, CRYSTALPERF_TESTING="1" if testing else "0",
                           **(env or {}))
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=environment, capture_output=True,
                              text=True, timeout=timeout)
        if wait_finish:
            wait_for_finish(done.stderr, timeout)
        return AppRun(done.returncode, done.stdout, done.stderr)

    return run
