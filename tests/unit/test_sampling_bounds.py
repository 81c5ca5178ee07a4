"""The sample table's byte budget (folding keeps every count), valid UTF-8 names whatever the file system
gave, bounded stacks, and the append-only journal the PySpark workers spool to."""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from pathlib import Path

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.record.samplejournal import SampleJournal, read_journal
from crystalperf.core.record.sampletable import (
    MAX_NAME_CHARS,
    OTHER,
    SampleTable,
    clean_text,
    folded_warning,
    max_bytes_from_env,
)
from crystalperf.core.record.sampling import PythonStackSampler, merge_samples


def _per_key(samples: tr.StackSamples) -> dict[tuple[str, str | None], int]:
    totals: dict[tuple[str, str | None], int] = {}
    for key, _, _, count in samples.rows():
        k = samples.keys[key]
        totals[(k.operation, k.task)] = totals.get((k.operation, k.task), 0) + count
    return totals


def test_a_full_table_folds_new_stacks_tasks_and_rows_but_keeps_every_count():
    table = SampleTable(0.0, max_bytes=None)
    f = table.frame_id("f", "f.py", 1)
    s1 = table.stack_id([f], "runnable")
    task1 = tr.SampleKey(operation="a", task="1")
    table.add(task1, s1, 0.5, 3)
    table.max_bytes = table.bytes  # the budget is spent from here on

    g = table.frame_id("g", "g.py", 2)  # a new frame: the [other] frame
    assert table.frames[g].name == OTHER
    s_new = table.stack_id([g], "waiting")  # a stack holding it: the [other] stack of its state
    assert table.stacks[s_new] == [g] and table.states[s_new] == "waiting"
    table.add(task1, s_new, 0.5, 2)  # no row left for it: held for the key, detail lost
    table.add(task1, s1, 0.5, 4)  # an existing row still counts
    table.add(task1, s1, 1.5, 1)  # a new bucket: no row left, held
    table.add(tr.SampleKey(operation="a", task="2"), s1, 0.5, 5)  # a new task: the operation's [other] task

    samples = table.to_samples()
    assert samples.total == 3 + 2 + 4 + 1 + 5
    assert _per_key(samples) == {("a", "1"): 10, ("a", OTHER): 5}
    assert samples.dropped == 2 + 1 + 5
    assert [fr.name for fr in samples.frames] == ["f", OTHER]
    rows = {(samples.keys[k].task, b, samples.state_of(s), tuple(samples.stacks[s])): c for k, b, s, c in samples.rows()}
    assert rows == {("1", 0, "runnable", (0,)): 7, ("1", 0, "waiting", (1,)): 2, ("1", 1, "runnable", (1,)): 1,
                    (OTHER, 0, "runnable", (1,)): 5}
    warning = folded_warning(samples)
    assert warning is not None and warning.startswith("8 of 15 stack samples")


def test_a_long_run_merges_time_buckets_before_losing_stacks():
    table = SampleTable(0.0, bucket_s=1.0, max_bytes=None)
    stack = table.stack_id([table.frame_id("f", None, None)])
    key = tr.SampleKey(operation="a")
    for second in range(100):
        table.add(key, stack, second + 0.5)
    table.max_bytes = table.bytes
    table.add(key, stack, 100.5)  # no room for bucket 100: pairs of seconds merge, then it fits
    samples = table.to_samples()
    assert samples.bucket_s == 2.0 and samples.dropped == 0 and samples.total == 101
    assert sorted(zip(samples.bucket, samples.count, strict=True)) == [(b, 2) for b in range(50)] + [(50, 1)]


def test_rows_past_max_rows_keep_their_count():
    table = SampleTable(origin=0.0, bucket_s=1.0, max_rows=3)
    stack = table.stack_id([table.frame_id("f", None, None)])
    for second in range(10):
        table.add(tr.SampleKey(operation="a"), stack, second + 0.5)
    samples = table.to_samples()
    # three rows of their own; the other seven at the key's latest bucket under [other]
    assert sorted(zip(samples.bucket, samples.count, strict=True)) == [(0, 1), (1, 1), (2, 1), (9, 7)]
    assert samples.total == 10 and samples.dropped == 7


def test_merging_folded_tables_adds_their_dropped_counts():
    parts = []
    for origin in (0.0, 10.0):
        table = SampleTable(origin, max_bytes=None)
        table.add(tr.SampleKey(operation="a"), table.stack_id([table.frame_id("f", None, None)]), origin + 0.5, 2)
        table.max_bytes = table.bytes
        table.add(tr.SampleKey(operation="a"), table.stack_id([table.frame_id("g", None, None)]), origin + 0.5, 3)
        parts.append(table.to_samples())
    merged = merge_samples(parts)
    assert merged is not None and merged.total == 10 and merged.dropped == 6


def test_names_are_valid_utf8_and_bounded():
    escaped = os.fsdecode(b"/data/caf\xe9.py")  # a Latin-1 name on a UTF-8 file system: surrogate-escaped
    assert clean_text(escaped, 100) == "/data/caf\\xe9.py"
    assert clean_text("lone \ud800", 100).encode("utf-8")
    assert clean_text("x" * 10_000, MAX_NAME_CHARS) == "x" * (MAX_NAME_CHARS - 1) + "\u2026"
    table = SampleTable(0.0, max_depth=4)
    frame = table.frames[table.frame_id("y" * 10_000, escaped, 1)]
    assert len(frame.name) == MAX_NAME_CHARS and frame.file == "/data/caf\\xe9.py"
    # the innermost frames are kept
    assert table.stacks[table.stack_id([0] * 10)] == [0, 0, 0, 0]


def test_max_bytes_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CRYSTALPERF_SAMPLER_MAX_BYTES", "12345")
    assert max_bytes_from_env() == 12345
    monkeypatch.setenv("CRYSTALPERF_SAMPLER_MAX_BYTES", "lots")
    assert max_bytes_from_env(99) == 99


def test_a_module_whose_file_name_is_not_utf8_is_sampled_into_a_writable_trace(tmp_path: Path):
    """A real module loaded from a file whose name has an invalid UTF-8 byte (0xff)."""
    directory = os.fsencode(tmp_path)
    path = os.path.join(directory, b"udf_\xff.py")
    try:
        with open(path, "wb") as out:
            out.write(b"def spin(flag):\n    while not flag['stop']:\n        sum(i * i for i in range(500))\n")
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    spec = importlib.util.spec_from_file_location("udf_latin", os.fsdecode(path))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    flag = {"stop": False}
    worker = threading.Thread(target=module.spin, args=(flag,), name="udf")
    worker.start()
    sampler = PythonStackSampler(lambda ident, name: tr.SampleKey(operation="op") if name == "udf" else None)
    try:
        for _ in range(3):
            sampler.sample_once()
    finally:
        flag["stop"] = True
        worker.join()
    samples = sampler.table.to_samples()
    files = {f.file for f in samples.frames if f.name.startswith("udf_latin.")}
    assert files == {os.fsdecode(directory) + "/udf_\\xff.py"}
    trace = tr.Trace(application=tr.Application(framework="spark", id="app", start=0.0, end=1.0), samples=samples)
    out = tmp_path / "trace.json"
    tr.save_trace(trace, out)
    assert tr.load_trace(out).samples == samples


def test_a_deep_recursion_keeps_the_innermost_frames():
    depth_reached = threading.Event()
    release = threading.Event()

    def recurse(n: int) -> None:
        if n == 0:
            depth_reached.set()
            release.wait(10)
            return
        recurse(n - 1)

    worker = threading.Thread(target=recurse, args=(500,), name="deep")
    worker.start()
    depth_reached.wait(10)
    sampler = PythonStackSampler(lambda ident, name: tr.SampleKey(operation="op") if name == "deep" else None,
                                 max_depth=64, thread_states=None)
    try:
        sampler.sample_once()
    finally:
        release.set()
        worker.join()
    samples = sampler.table.to_samples()
    (stack,) = samples.stacks
    assert len(stack) == 64


def test_the_journal_appends_changes_and_reads_back_what_the_table_holds(tmp_path: Path):
    table = SampleTable(100.0, max_bytes=None)
    path = tmp_path / "pyworker-1.jsonl"
    journal = SampleJournal(path, table)
    key = tr.SampleKey(operation="stage-0", task="1", thread="python-worker")
    table.add(key, table.stack_id([table.frame_id("f", "f.py", 1)], "runnable"), 100.5, 2)
    journal.flush({("stage-0", "1"): {"cpu_time_s": 0.5}}, {("stage-0", "1")})
    first = path.stat().st_size
    table.add(key, 0, 100.5, 3)
    table.add(tr.SampleKey(operation="stage-0", task="2"), table.stack_id([table.frame_id("g", None, None)]), 101.5)
    tasks = {("stage-0", "1"): {"cpu_time_s": 0.5}, ("stage-0", "2"): {"cpu_time_s": 0.25, "cpu_wait_s": 0.125}}
    journal.flush(tasks, {("stage-0", "2")})
    lines = path.read_bytes().splitlines()
    assert len(lines) == 3 and path.stat().st_size - first < first  # a header, the first state, one small delta
    contents = read_journal(path)
    assert contents.samples == table.to_samples() and contents.tasks == tasks and not contents.torn
    # a writer killed mid-line leaves a torn last line: what came before it is still read
    with path.open("ab") as out:
        out.write(b'{"rows":[[0,0,0,')
    torn = read_journal(path)
    assert torn.torn and torn.samples == table.to_samples()


def test_the_journal_stays_bounded_by_compacting(tmp_path: Path):
    table = SampleTable(0.0, max_bytes=None)
    path = tmp_path / "pyworker-2.jsonl"
    journal = SampleJournal(path, table, compact_factor=2.0, compact_slack_bytes=0)
    stack = table.stack_id([table.frame_id("f", None, None)])
    tasks: dict[tuple[str, str], dict[str, float]] = {}
    for n in range(200):
        table.add(tr.SampleKey(operation="stage-0", task="1"), stack, 0.5)
        tasks[("stage-0", "1")] = {"cpu_time_s": float(n)}
        journal.flush(tasks, {("stage-0", "1")})
        assert path.stat().st_size <= 2 * journal._compacted_size + 200
    contents = read_journal(path)
    assert contents.samples is not None and contents.samples.total == 200
    assert contents.tasks == {("stage-0", "1"): {"cpu_time_s": 199.0}}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_journal_line_is_json_with_no_surrogates(tmp_path: Path):
    table = SampleTable(0.0, max_bytes=None)
    path = tmp_path / "j.jsonl"
    journal = SampleJournal(path, table)
    table.add(tr.SampleKey(operation="a"), table.stack_id([table.frame_id("f", os.fsdecode(b"\xff.py"), 1)]), 0.5)
    journal.flush({}, set())
    for line in path.read_bytes().splitlines():
        json.loads(line.decode("utf-8"))  # strict: every byte is valid UTF-8


class _CountedWaits(threading.Event):
    """The sampler's stop event, recording each wait and moving a fake clock by it instead of sleeping."""

    def __init__(self, clock: list[float], rounds: int) -> None:
        super().__init__()
        self.clock, self.rounds, self.waits = clock, rounds, []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(round(timeout or 0.0, 6))
        self.clock[0] += timeout or 0.0
        if len(self.waits) >= self.rounds:
            self.set()
        return self.is_set()


def _waits(idle_max_s: float | None, found_in_rounds: range, idle_rounds: int | None = None,
           count: int = 10) -> list[float]:
    now = [0.0]
    rounds = {"n": 0}
    main = threading.main_thread().ident

    def key_for(ident: int, name: str) -> tr.SampleKey | None:
        return tr.SampleKey(operation="op") if ident == main and rounds["n"] in found_in_rounds else None

    sampler = PythonStackSampler(key_for, interval_s=0.01, clock=lambda: now[0], idle_max_s=idle_max_s,
                                 idle_rounds=idle_rounds, on_round=lambda: rounds.__setitem__("n", rounds["n"] + 1))
    sampler._stop = stop = _CountedWaits(now, count)
    sampler.start()
    assert sampler._thread is not None
    sampler._thread.join(10)
    return stop.waits


def test_an_idle_sampler_waits_longer_until_it_first_finds_a_thread_then_keeps_its_interval():
    # rounds 1-5 find nothing: 10, 20, 40, 80, 80 ms; the 6th and 7th find the main thread, and the interval
    # holds from then on, through the rounds that find nothing again
    assert _waits(0.08, range(5, 7)) == [0.01, 0.02, 0.04, 0.08, 0.08, 0.01, 0.01, 0.01, 0.01, 0.01]
    # without idle_max_s the interval holds from the start
    assert _waits(None, range(5, 7)) == [0.01] * 10


def test_a_sampler_of_work_that_comes_and_goes_waits_longer_only_after_idle_rounds_and_comes_back():
    # two empty rounds at the interval, then the doubling from the interval: 10, 20, 40 ms; the 6th and 7th rounds
    # find the thread: back to 10 ms; the empty rounds after them count again, and the waits grow again
    assert _waits(0.08, range(5, 7), idle_rounds=2, count=14) == [
        0.01, 0.01, 0.01, 0.02, 0.04, 0.01, 0.01, 0.01, 0.01, 0.01, 0.02, 0.04, 0.08, 0.08]
