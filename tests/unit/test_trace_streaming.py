"""Loading a trace as a stream (core.traceload): below CRYSTALPERF_MAX_TASKS_PER_OPERATION it is the document
json.loads gives; above it an operation keeps a seeded uniform sample of its tasks with exact totals, and the
analysis tells the same story as with every task; hostile documents still end in one line."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crystalperf.core import limits, traceload
from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.classify import KeywordClassifier
from crystalperf.core.errors import BadInputError
from crystalperf.core.synthetic import spark_like_trace

DATA = Path(__file__).resolve().parents[1] / "data"
CAP = "CRYSTALPERF_MAX_TASKS_PER_OPERATION"


def _big(tasks_per_stage: int = 300) -> tr.Trace:
    return spark_like_trace(jobs=2, stages_per_job=2, tasks_per_stage=tasks_per_stage, slots=4,
                            samples_per_second=10, seed=3)


def _write(tmp_path: Path, text: str, name: str = "t.json.gz") -> Path:
    path = tmp_path / name
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("name", ["spark-demo-trace.json.gz", "tensorflow-fit-trace.json.gz",
                                  "tensorflow-fit-trace-1.1.json.gz"])
def test_golden_traces_load_as_json_loads_gives_them(name, tmp_path, monkeypatch):
    text = gzip.decompress((DATA / name).read_bytes()).decode("utf-8")
    want = tr.parse_trace(json.loads(text))
    assert tr.load_trace(DATA / name) == want
    # Read a few characters at a time: every value and every number run crosses a piece boundary somewhere.
    monkeypatch.setattr(traceload, "_TEXT_CHUNK", 97)
    assert tr.load_trace(_write(tmp_path, text, "t.json")) == want


@pytest.mark.parametrize("piece", [1, 2, 5, 64])
def test_document_below_the_cap_is_what_json_loads_gives(piece, tmp_path, monkeypatch):
    trace = spark_like_trace(jobs=1, stages_per_job=2, tasks_per_stage=5, samples_per_second=8)
    trace.operations[0].name = "ünïcode ✓ \U0001f600 name"  # multi-byte characters cut between pieces
    doc = json.loads(trace.to_json())
    doc["samples"]["count"][0] = 2.0  # a float in an integer column: json decodes it, pydantic accepts it
    doc["extra"] = {"nested": [1, -2, 3.5e-3, 12345678901234567890123, None, True, "x,]"]}
    text = json.dumps(doc, indent=piece % 3 or None, ensure_ascii=False)
    monkeypatch.setattr(traceload, "_TEXT_CHUNK", piece)
    assert traceload.load_document(_write(tmp_path, text, "t.json")) == json.loads(text)


def test_over_the_cap_keeps_a_sample_with_exact_totals(tmp_path, monkeypatch):
    full = _big()
    path = tmp_path / "crystalperf-trace.json.gz"
    tr.save_trace(full, path)
    monkeypatch.setenv(CAP, "40")
    sampled = tr.load_trace(path)
    for whole, part in zip(full.iter_operations(), sampled.iter_operations(), strict=True):
        if not whole.tasks:
            assert part.task_count is None and not part.tasks
            continue
        assert part.task_count == len(whole.tasks) == 300
        assert len(part.tasks) == 40
        assert part.attributes["tasks_sampled"].startswith("40 of 300 (CRYSTALPERF_MAX_TASKS_PER_OPERATION")
        ids = [t.id for t in whole.tasks]
        assert [t.id for t in part.tasks] == sorted((t.id for t in part.tasks), key=ids.index)  # stream order
        for name in whole.tasks[0].metrics:
            assert part.metrics[name] == pytest.approx(sum(t.metrics[name] for t in whole.tasks), rel=1e-12)
        # The slowest task stays: the busiest task's time (pipelined paths, skew) is exact.
        slowest = max(whole.tasks, key=lambda t: t.metrics[tr.METRIC_RUN_TIME])
        assert slowest.id in {t.id for t in part.tasks}
    # Its samples are keyed by the operation alone, and every sample is still counted where it was.
    assert sampled.samples is not None and full.samples is not None
    assert all(k.task is None for k in sampled.samples.keys)
    assert len(sampled.samples.count) < len(full.samples.count)

    def per_interval(samples: tr.StackSamples) -> dict[tuple[str, int, int], int]:
        found: dict[tuple[str, int, int], int] = {}
        for key, bucket, stack, count in samples.rows():
            where = (samples.keys[key].operation, bucket, stack)
            found[where] = found.get(where, 0) + count
        return found

    assert per_interval(sampled.samples) == per_interval(full.samples)


def test_the_sample_is_deterministic(tmp_path, monkeypatch):
    path = tmp_path / "crystalperf-trace.json.gz"
    tr.save_trace(_big(), path)
    monkeypatch.setenv(CAP, "25")
    first, second = tr.load_trace(path), tr.load_trace(path)
    assert first == second
    classifier = KeywordClassifier()
    assert analyze(first, classifier=classifier).report == analyze(second, classifier=classifier).report


def test_sampled_at_load_analyses_like_every_task(tmp_path, monkeypatch):
    path = tmp_path / "crystalperf-trace.json.gz"
    tr.save_trace(_big(600), path)
    full = tr.load_trace(path)
    monkeypatch.setenv(CAP, "150")
    sampled = tr.load_trace(path)
    assert sum(len(op.tasks) for op in sampled.iter_operations()) == 4 * 150
    classifier = KeywordClassifier()
    a, b = analyze(full, classifier=classifier), analyze(sampled, classifier=classifier)
    assert a.bottleneck.resource == b.bottleneck.resource
    assert [p.path for p in a.bottleneck.path] == [p.path for p in b.bottleneck.path]
    for path_id, prof in a.profile.by_path.items():
        other = b.profile.by_path[path_id]
        assert other.runtime == prof.runtime
        assert other.busy_time == prof.busy_time  # the slowest task is kept
        for x, y in zip(prof.vector.vector, other.vector.vector, strict=True):
            assert y == pytest.approx(x, abs=0.02)
        for resource, seconds in prof.work_seconds.items():
            assert other.work_seconds[resource] == pytest.approx(seconds, rel=0.05, abs=1e-6)
    assert len(a.predictions) == len(b.predictions)
    for p, q in zip(a.predictions, b.predictions, strict=True):
        assert p.changes.describe() == q.changes.describe()
        assert q.crystalperf.runtime_s == pytest.approx(p.crystalperf.runtime_s, rel=0.05)


def test_a_bad_task_outside_the_sample_is_still_refused(tmp_path, monkeypatch):
    doc = json.loads(_big().to_json())
    doc["operations"][0]["children"][1]["tasks"][250]["start"] = "later"
    path = _write(tmp_path, json.dumps(doc))
    monkeypatch.setenv(CAP, "10")
    with pytest.raises(BadInputError, match=r"invalid trace at operations\.0\.children\.1\.tasks\.250\.start: "):
        tr.load_trace(path)


def test_task_count_of_a_hook_sample_larger_than_the_cap_stands(tmp_path, monkeypatch):
    hooked = spark_like_trace(jobs=1, stages_per_job=1, tasks_per_stage=1000, keep_tasks=200, seed=5)
    path = tmp_path / "t.json.gz"
    tr.save_trace(hooked, path)
    monkeypatch.setenv(CAP, "50")
    op = next(o for o in tr.load_trace(path).iter_operations() if o.tasks)
    before = next(o for o in hooked.iter_operations() if o.tasks)
    assert op.task_count == 1000 and len(op.tasks) == 50
    assert op.metrics == before.metrics  # the hook's exact totals over all 1,000 tasks


def _cli(path: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crystalperf", "analyze", str(path), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CRYSTALPERF_TESTING": "", CAP: "10", **env})


def _hostile(tmp_path: Path) -> dict[str, Path]:
    text = _big(100).to_json()
    at = text.index('"tasks":[') + len('"tasks":[')
    cut = text.index('{"id":"60"')  # inside the first stage's tasks, past the cap
    deep = "[" * 100_000 + "]" * 100_000
    return {
        "truncated": _write(tmp_path, text[:cut + 30], "cut.json.gz"),
        "truncated-gzip": _write_bytes(tmp_path / "cutgz.json.gz", gzip.compress(text.encode())[:-3000]),
        "deep": _write(tmp_path, text[:at] + deep + "," + text[at:], "deep.json"),
        "deep-task": _write(tmp_path, text[:cut] + '{"id": "x", "start": 1, "end": 2, "a": ' + deep + "}, "
                            + text[cut:], "deeptask.json"),
        "huge-string": _write(tmp_path, text[:cut] + '{"id": "' + "x" * (8 << 20) + '", "start": 1, "end": 0}, '
                              + text[cut:], "huge.json.gz"),
        "trailing": _write(tmp_path, text + " {}", "trailing.json"),
    }


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", ["truncated", "truncated-gzip", "deep", "deep-task", "huge-string", "trailing"])
def test_hostile_streamed_documents_give_one_line(case, tmp_path, monkeypatch):
    path = _hostile(tmp_path)[case]
    monkeypatch.setenv(CAP, "10")
    with pytest.raises(BadInputError) as info:
        tr.load_trace(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_hostile_streamed_document_exits_2_from_the_cli(tmp_path):
    for case in ("truncated", "huge-string"):
        done = _cli(_hostile(tmp_path)[case], tmp_path)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_limits_apply_while_streaming(tmp_path, monkeypatch):
    bomb = _write_bytes(tmp_path / "bomb.json.gz", gzip.compress(b'{"schema_version": "1.4", "a": "'
                                                                 + b" " * (80 << 20) + b'"}'))
    monkeypatch.setenv("CRYSTALPERF_MAX_DECOMPRESSED_BYTES", "16m")
    with pytest.raises(BadInputError, match="decompresses to more than"):
        tr.load_trace(bomb)
    monkeypatch.delenv("CRYSTALPERF_MAX_DECOMPRESSED_BYTES")
    monkeypatch.setenv(CAP, "lots")
    with pytest.raises(BadInputError, match=f"{CAP}='lots' is not a number"):
        tr.load_trace(DATA / "spark-demo-trace.json.gz")


@pytest.mark.parametrize("data", [
    gzip.compress(b"ab") + gzip.compress(b"cd"),
    gzip.compress(b"ab") + b"\0" * 10,
    gzip.compress(b"x" * 3_000_000),
    gzip.compress(b"x") + b"junk",
    gzip.compress(b"x") + b"\0\0" + gzip.compress(b"y"),
    gzip.compress(b"x" * 1000)[:-12],
    b"\x1f\x8b\x08\x00garbage",
])
def test_gunzip_stream_is_gunzip_in_pieces(data, tmp_path):
    path = _write_bytes(tmp_path / "z.gz", data)
    try:
        want: bytes | str = limits.gunzip(data, path)
    except BadInputError as exc:
        want = str(exc)
    with open(path, "rb") as handle:
        try:
            got: bytes | str = b"".join(limits.gunzip_stream(handle, len(data), path))
        except BadInputError as exc:
            got = str(exc)
    assert got == want


def test_non_finite_totals_cannot_pass(tmp_path, monkeypatch):
    doc = json.loads(_big(30).to_json())
    for task in doc["operations"][0]["children"][0]["tasks"]:
        task["metrics"]["input_bytes"] = 9e20  # each within the bound, their sum beyond it
    path = _write(tmp_path, json.dumps(doc))
    monkeypatch.setenv(CAP, "5")
    with pytest.raises(BadInputError, match="metrics"):
        tr.load_trace(path)
    assert math.isfinite(9e20 * 30)
