"""The run-queue delay (schedstat) the PySpark workers record around every task; no pyspark needed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from crystalperf.integrations.spark.schedstat import TASK_DIR, run_queue_delay_s, run_queue_delays


def _thread(task_dir: Path, tid: int, schedstat: str) -> None:
    (task_dir / str(tid)).mkdir(parents=True, exist_ok=True)
    (task_dir / str(tid) / "schedstat").write_text(schedstat)


def test_the_second_field_of_every_threads_schedstat(tmp_path: Path) -> None:
    _thread(tmp_path, 101, "5000000 2000000 12\n")
    _thread(tmp_path, 102, "7 3 1\n")
    _thread(tmp_path, 103, "garbage\n")  # unusable: left out
    (tmp_path / "104").mkdir()  # the thread ended between listing and reading
    assert run_queue_delays(tmp_path) == {101: 2_000_000, 102: 3}


def test_delay_over_a_task_counts_new_threads_from_zero_and_ignores_the_sampler(tmp_path: Path) -> None:
    before = {1: 1_000_000_000, 2: 500_000_000, 9: 0}
    after = {1: 1_250_000_000, 3: 100_000_000, 9: 400_000_000}  # 2 ended (lost), 3 started, 9 is the sampler
    assert run_queue_delay_s(before, after, frozenset({9})) == pytest.approx(0.35)


def test_without_proc_nothing_is_measured(tmp_path: Path) -> None:
    assert run_queue_delays(tmp_path / "missing") is None
    assert run_queue_delays(tmp_path) is None  # a directory with no thread in it says nothing either
    assert run_queue_delay_s(None, {1: 5}) is None and run_queue_delay_s({1: 5}, None) is None


@pytest.mark.skipif(not (TASK_DIR / str(threading.get_native_id()) / "schedstat").exists(),
                    reason="no schedstat on this machine")
def test_this_process_threads_are_read() -> None:
    delays = run_queue_delays()
    assert delays is not None and threading.get_native_id() in delays
    waited = run_queue_delay_s(delays, run_queue_delays())
    assert waited is not None and waited >= 0
