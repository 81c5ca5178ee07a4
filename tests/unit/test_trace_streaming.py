"""Loading a trace as a stream (core.trace.load): below CRYSTALPERF_MAX_TASKS_PER_OPERATION it is the document
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
from typing import Any

import pytest

from crystalperf.core import limits
from crystalperf.core import trace as tr
from crystalperf.core.analysis import analyze
from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.core.errors import BadInputError
from crystalperf.core.trace import load as traceload
from crystalperf.core.trace import tasks as tracetasks
from crystalperf.core.trace import text as tracetext
from crystalperf.core.trace.synthetic import spark_like_trace

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
    monkeypatch.setattr(tracetext, "TEXT_CHUNK", 97)
    assert tr.load_trace(_write(tmp_path, text, "t.json")) == want


@pytest.mark.parametrize("piece", [1, 2, 5, 64])
def test_document_below_the_cap_is_what_json_loads_gives(piece, tmp_path, monkeypatch):
    trace = spark_like_trace(jobs=1, stages_per_job=2, tasks_per_stage=5, samples_per_second=8)
    trace.operations[0].name = "ünïcode ✓ \U0001f600 name"  # multi-byte characters cut between pieces
    doc = json.loads(trace.to_json())
    doc["samples"]["count"][0] = 2.0  # a float in an integer column: json decodes it, pydantic accepts it
    doc["extra"] = {"nested": [1, -2, 3.5e-3, 12345678901234567890123, None, True, "x,]"]}
    text = json.dumps(doc, indent=piece % 3 or None, ensure_ascii=False)
    monkeypatch.setattr(tracetext, "TEXT_CHUNK", piece)
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


# -- the fast paths: task records checked without the model, runs of elements and columns decoded by one C call


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "x", None, [], 2e21, -2e21])
def test_a_bad_metric_outside_the_sample_is_still_refused(value, tmp_path, monkeypatch):
    doc = json.loads(_big().to_json())
    doc["operations"][0]["children"][1]["tasks"][250]["metrics"]["cpu_time_s"] = value
    path = _write(tmp_path, json.dumps(doc))
    monkeypatch.setenv(CAP, "10")
    with pytest.raises(BadInputError, match=r"at operations\.0\.children\.1\.tasks\.250\.metrics") as info:
        tr.load_trace(path)
    assert "\n" not in str(info.value)


def test_every_task_counts_in_exact_totals(tmp_path, monkeypatch):
    """Totals over records the model would coerce (a number as a string, a bool, an integer, an extra field) as
    over plain ones; the values are exact in binary, so any order of adding gives the exact sum."""
    doc = json.loads(_big().to_json())
    stage = doc["operations"][0]["children"][1]
    for i, task in enumerate(stage["tasks"]):
        task["metrics"] = {"cpu_time_s": i / 4, "input_bytes": i * 1000, "records_in": 3.0}
        task["status"] = ("success", "failed", "killed", "unknown")[i % 7 % 4]
    stage["tasks"][201]["metrics"]["cpu_time_s"] = "50.25"
    stage["tasks"][202]["metrics"]["records_in"] = True
    stage["tasks"][203]["note"] = {"any": ["extra", {"field": "}],"}]}
    stage["tasks"][204]["start"] = int(stage["tasks"][204]["start"])
    stage["tasks"][205]["attempt"] = "1"
    path = _write(tmp_path, json.dumps(doc))
    monkeypatch.setenv(CAP, "10")
    op = tr.load_trace(path).operations[0].children[1]
    every = [tr.Task.model_validate(t) for t in stage["tasks"]]
    assert op.task_count == len(every) == 300 and len(op.tasks) == 10
    for name in ("cpu_time_s", "input_bytes", "records_in"):
        assert op.metrics[name] == math.fsum(t.metrics[name] for t in every)
    assert op.attributes["failed_tasks"] == str(sum(t.status == "failed" for t in every))
    assert op.attributes["killed_tasks"] == str(sum(t.status == "killed" for t in every))
    by_id = {t.id: t for t in every}
    assert all(t == by_id[t.id] for t in op.tasks)  # the kept ones as the model reads them


_JUNK: list[Any] = [
    None, -1, 0, 1, 1.5, -0.0, 2**53, 2**53 + 1, -(2**53) - 1, 1e12, 1e12 + 1, -1e12, 10**400, float("nan"),
    float("inf"), True, False, "x", "1.5", "2", "success", "failed", "bogus", [], {}, {"a": 1.0}, {"a": 2},
    {"a": "x"}, {"a": "3"}, {"a": True}, {"a": None}, {"a": float("nan")}, {"a": float("-inf")}, {"a": 1e21},
    {"a": -1e21}, {"a": 1e21, "b": 1.0}, {"a": 2e21}, {"a": 10**21}, {"a": 10**21 + 1}, {"a": []},
]


@pytest.mark.parametrize("field", [*tr.Task.model_fields, "extra"])
def test_a_plain_task_record_is_one_the_model_accepts_as_it_is(field):
    base = {"id": "7", "index": 7, "attempt": 0, "executor": "e", "host": "h", "slot": 1, "start": 10.0,
            "end": 12.5, "status": "success", "metrics": {"run_time_s": 2.0, "input_bytes": 5}}
    plain = tracetasks.PlainTasks()  # one for all: what it keeps of the record before must not matter
    assert plain(base)
    assert set(tracetasks.TASK_NAMES) == set(tr.Task.model_fields)  # a field the model gains needs a check here
    for value in [*_JUNK, ...]:
        raw = {k: v for k, v in base.items() if k != field}
        if value is not ...:
            raw[field] = value
        fields = plain(raw)
        if fields is None:
            continue
        task = tr.Task.model_validate(raw)  # never raises for a record the loader reads as plain
        assert fields == tuple(getattr(task, name) for name in tracetasks.TASK_NAMES)


def _awkward(tasks: int, indent: int | None) -> str:
    """A trace whose task records hold '}', '},', ']' in strings and objects after their metrics."""
    doc = json.loads(spark_like_trace(jobs=1, stages_per_job=2, tasks_per_stage=tasks, seed=4).to_json())
    for stage in doc["operations"][0]["children"]:
        for i, task in enumerate(stage["tasks"]):
            if i % 3 == 0:
                task["host"] = "h},{\"id\": ]" + "}" * (i % 5)
            if i % 4 == 1:
                task["more"] = {"x": [1, {"y": "}"}, []], "z": {}}
            if i % 11 == 2:
                task["metrics"]["gc_time_s"] = 0  # a record ending in an integer: "...: 0}}"
    for key in doc["samples"]["keys"][::3]:
        key["thread"] = "t}],{"
    return json.dumps(doc, indent=indent, ensure_ascii=False)


@pytest.mark.parametrize("indent", [None, 1])
@pytest.mark.parametrize("lookahead", [16, 50, 333, 4096])
def test_runs_of_elements_decode_as_each_one_alone(indent, lookahead, tmp_path, monkeypatch):
    text = _awkward(40, indent)
    path = _write(tmp_path, text, "t.json")
    monkeypatch.setattr(tracetext, "TEXT_CHUNK", 61)
    want = traceload.load_document(path)
    assert want == json.loads(text)
    monkeypatch.setattr(tracetext, "LOOKAHEAD", lookahead)
    assert traceload.load_document(path) == want
    monkeypatch.setenv(CAP, "7")  # sampled: the same sample and totals whatever runs the text was read in
    sampled = tr.load_trace(path)
    monkeypatch.setattr(tracetext, "LOOKAHEAD", 1 << 18)
    assert tr.load_trace(path) == sampled


@pytest.mark.parametrize("piece", [3, 40, 1 << 20])
def test_sample_columns_decode_as_json_does(piece, tmp_path, monkeypatch):
    doc = json.loads(spark_like_trace(jobs=1, stages_per_job=1, tasks_per_stage=5, samples_per_second=20).to_json())
    samples = doc["samples"]
    odd = [-0, 10**18, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**30, True, 1.0, "3", None, [1], {"a": 1}]
    for i, name in enumerate(("key", "bucket", "stack", "count")):
        column = samples[name]
        samples[name] = column[:5] + [odd[(i * 3 + j) % len(odd)] for j in range(i + 1)] + column[5:]
    samples["extra"] = [1, 2, 3]
    monkeypatch.setattr(tracetext, "TEXT_CHUNK", piece)
    for text in (json.dumps(doc), json.dumps(doc, indent=2), json.dumps(doc).replace('"key": [', '"key": [-0, -0 ,')):
        assert traceload.load_document(_write(tmp_path, text, "t.json")) == json.loads(text)
    text = json.dumps(doc).replace('"count": [', '"count": [01, ', 1)  # a leading zero: not JSON
    with pytest.raises(BadInputError, match="not valid JSON"):
        traceload.load_document(_write(tmp_path, text, "t.json"))


@pytest.mark.parametrize("change", ["none", "zero-count", "negative-bucket"])
def test_sample_rows_merge_alike_by_whole_columns_and_row_by_row(change, tmp_path, monkeypatch):
    doc = json.loads(_big().to_json())
    stage = doc["operations"][1]["children"][0]
    stage["tasks"] = stage["tasks"][:20]  # below the cap: its keys and rows stay as they are
    samples = doc["samples"]
    merged_row = next(r for r, k in enumerate(samples["key"]) if samples["keys"][k]["operation"] == "stage-0")
    if change == "zero-count":  # such a row stays apart (and the validation names it)
        samples["count"][merged_row] = 0
    elif change == "negative-bucket":
        samples["bucket"][merged_row] = -1
    path = _write(tmp_path, json.dumps(doc))
    monkeypatch.setenv(CAP, "40")
    by_columns = traceload._merged_columns
    taken = []

    def spy(*args: Any) -> Any:
        taken.append(by_columns(*args))
        return taken[-1]

    monkeypatch.setattr(traceload, "_merged_columns", spy)
    merged = traceload.load_document(path)
    assert taken and bool(taken[0]) == (change == "none")  # the whole-column way taken where it applies
    monkeypatch.setattr(traceload, "_merged_columns", lambda *args: None)
    assert traceload.load_document(path) == merged
    assert len(merged["samples"]["count"]) < len(samples["count"])
    assert any("task" in k for k in merged["samples"]["keys"])
