"""The I/O counter rows of a Flink job (trace schema 1.3 ``io``) on hand-made reporter parts and spool files:
version 3 parts carry the processes' rows, older parts still load without, and the assembly keeps each
source's rows of the job's span (one before, one after) counted from its first kept row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crystalperf.core.errors import BadInputError
from crystalperf.core.record.sampletable import SampleTable
from crystalperf.integrations.flink.assemble import read_metrics, rows_of_span
from crystalperf.integrations.flink.pyworkers import SPOOL_FORMAT, load_spool_io
from crystalperf.integrations.flink.reader import load_job, load_part

START = 1_700_000_000.0


def _row(source: str, t: float, read: float, limit: float | None = None) -> dict[str, Any]:
    return {"t": t, "source": source, "host": "h", "storage_read_bytes": read, "storage_write_bytes": 0.0,
            "network_rx_bytes": 10.0 * read, "network_tx_bytes": 0.0, "disk_read_limit": limit,
            "disk_write_limit": None}


def _part(directory: Path, process: int, io: list[dict[str, Any]] | None) -> Path:
    doc: dict[str, Any] = {
        "format": "crystalperf-flink-metrics", "version": 3 if io is not None else 2, "job_id": "job1",
        "job_name": "j", "process": process, "complete": True, "written": START + 11, "start": START,
        "end": START + 10, "cpu_count": 2, "thread_cpu": [], "classpath": [], "dropped_metrics": 0,
        "scopes": [{"task_name": "Source: src[1]", "subtask_index": "0", "added": START, "removed": START + 10}],
        "metrics": [[0, "accumulateBusyTimeMs", 10_000]], "sample_interval_s": 0.1, "sample_origin": START,
        "sample_bucket_s": 1.0, "dropped_samples": 0, "samples": [],
    }
    if io is not None:
        doc["io"] = io
    path = directory / f"crystalperf-flink-job1.{process}.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_version_2_part_without_rows_still_loads(tmp_path: Path) -> None:
    part = load_part(_part(tmp_path, 100, None))
    assert part.io == []
    assert read_metrics(part.path).io == []


def test_the_parts_rows_merge_into_the_trace_within_the_job(tmp_path: Path) -> None:
    # a TaskManager that sampled long before the job: rows outside the span but the neighbours are left out
    _part(tmp_path, 100, [_row("taskmanager:100", START + dt, 1000.0 + 10 * dt, 5e6 if dt > 0 else None)
                          for dt in (-60, -30, -0.2, 2, 5, 10.1, 30)])
    _part(tmp_path, 200, [_row("jobmanager:200", START + dt, 0.0) for dt in (-1, 1, 11)])
    job = load_job(tmp_path / "crystalperf-flink-job1.100.json")
    assert len(job.io) == 10
    trace = read_metrics(tmp_path / "crystalperf-flink-job1.100.json")
    tm = [r for r in trace.io if r.source == "taskmanager:100"]
    assert [round(r.t - START, 1) for r in tm] == [-0.2, 2, 5, 10.1]
    # counted from the first kept row, which reads 0; limits are taken as they are
    assert [r.storage_read_bytes for r in tm] == [0.0, 22.0, 52.0, 103.0]
    assert tm[0].network_rx_bytes == 0.0 and tm[-1].network_rx_bytes == pytest.approx(1030.0)
    assert [r.disk_read_limit for r in tm] == [None, 5e6, 5e6, 5e6]
    assert {r.source for r in trace.io} == {"taskmanager:100", "jobmanager:200"}


def test_the_python_programs_spooled_rows_are_merged(tmp_path: Path) -> None:
    _part(tmp_path, 100, [_row("minicluster:100", START + dt, 0.0) for dt in (0, 10)])
    spool = tmp_path / "crystalperf-pyflink-workers.99.json"
    samples = SampleTable(START, 1.0, 0.1).to_samples().model_dump(mode="json")
    spool.write_text(json.dumps({"format": SPOOL_FORMAT, "version": 2, "process": 99, "written": START + 12,
                                 "cpu": [], "io": [_row("python:99", START + dt, 5.0 * (dt + 5)) for dt in (-5, 4, 8, 20)],
                                 "samples": samples}))
    assert len(load_spool_io(spool)) == 4
    trace = read_metrics(tmp_path / "crystalperf-flink-job1.100.json")
    python = [r for r in trace.io if r.source == "python:99"]
    assert [r.t - START for r in python] == [-5, 4, 8, 20]
    assert [r.storage_read_bytes for r in python] == [0.0, 45.0, 65.0, 125.0]


def test_a_spool_without_rows_gives_none(tmp_path: Path) -> None:
    old = tmp_path / "crystalperf-pyflink-workers.98.json"
    old.write_text(json.dumps({"format": SPOOL_FORMAT, "version": 1, "process": 98, "written": START,
                               "cpu": [], "samples": SampleTable(START, 1.0, 0.1).to_samples().model_dump(mode="json")}))
    assert load_spool_io(old) == []


def test_a_malformed_row_names_the_part(tmp_path: Path) -> None:
    path = _part(tmp_path, 100, [{"t": "soon", "source": "x"}])
    with pytest.raises(BadInputError, match="I/O counters"):
        load_part(path)


def test_rows_of_an_empty_span_keep_the_neighbours_only() -> None:
    from crystalperf.core.trace import IoSample

    rows = [IoSample.model_validate(_row("s", START + dt, dt)) for dt in (0, 1, 5, 6)]
    kept = rows_of_span(rows, START + 2, START + 3)
    assert [r.t - START for r in kept] == [1, 5] and [r.storage_read_bytes for r in kept] == [0.0, 4.0]


def test_a_source_that_counted_only_before_or_after_the_job_is_another_runs() -> None:
    from crystalperf.core.trace import IoSample

    # a Python program's spool file left in the output directory by an earlier job, and one started after
    earlier = [IoSample.model_validate(_row("python:1", START - 3600 + dt, dt)) for dt in (0, 1)]
    later = [IoSample.model_validate(_row("python:3", START + 100 + dt, dt)) for dt in (0, 1)]
    this = [IoSample.model_validate(_row("python:2", START + dt, dt)) for dt in (0, 1, 2)]
    assert {r.source for r in rows_of_span(earlier + this + later, START, START + 2)} == {"python:2"}


def test_the_worker_sampler_spools_its_process_rows(tmp_path: Path) -> None:
    import os

    from crystalperf.integrations.flink.pyworkers import WorkerSampler, load_spool, spool_files

    sampler = WorkerSampler(tmp_path)
    sampler.io.sample_once()
    sampler.flush()
    [spool] = spool_files(tmp_path)
    rows = load_spool_io(spool)
    assert [r.source for r in rows] == [f"python:{os.getpid()}"]
    assert load_spool(spool) is not None  # the samples still read as before
