import gzip
import json

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.errors import BadInputError, UnsupportedSchemaError
from crystalperf.core.trace.synthetic import spark_like_trace


def test_round_trip_plain_and_gzip(tmp_path):
    trace = spark_like_trace(jobs=1, tasks_per_stage=3)
    for name in ("t.json", "t.json.gz"):
        path = tr.save_trace(trace, tmp_path / name)
        assert tr.load_trace(path) == trace
    assert (tmp_path / "t.json.gz").read_bytes()[:2] == b"\x1f\x8b"


def test_gzip_detected_by_content_not_name(tmp_path):
    trace = spark_like_trace(jobs=1, tasks_per_stage=2)
    path = tmp_path / "trace.json"
    path.write_bytes(gzip.compress(trace.to_json().encode()))
    assert tr.load_trace(path).application.id == trace.application.id


def test_directory_finds_the_trace(tmp_path):
    tr.save_trace(spark_like_trace(jobs=1, tasks_per_stage=2), tmp_path / "crystalperf-trace.json.gz")
    assert tr.load_trace(tmp_path).application.framework == "spark"


def test_newer_major_version_rejected_with_one_line(tmp_path):
    doc = json.loads(spark_like_trace(jobs=1, tasks_per_stage=2).to_json())
    doc["schema_version"] = "2.0"
    path = tmp_path / "new.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedSchemaError) as info:
        tr.load_trace(path)
    assert "2.0" in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)


def test_newer_minor_version_with_unknown_fields_loads(tmp_path):
    doc = json.loads(spark_like_trace(jobs=1, tasks_per_stage=2).to_json())
    doc["schema_version"] = "1.7"
    doc["something_new"] = {"a": 1}
    trace = tr.parse_trace(doc)
    assert trace.schema_version == "1.7"


@pytest.mark.parametrize(
    "content, words",
    [
        (b"", "not valid JSON"),
        (b"[1, 2]", "not a crystalperf trace"),
        (b'{"traceEvents": []}', "no schema_version"),
        (b'{"schema_version": "x"}', "malformed"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
        (b"\xff\xfe\x00", "UTF-8"),
    ],
)
def test_foreign_or_broken_files(tmp_path, content, words):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(BadInputError) as info:
        tr.load_trace(path)
    assert words in str(info.value)


def test_truncated_trace(tmp_path):
    text = spark_like_trace(jobs=1, tasks_per_stage=2).to_json()
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(BadInputError, match="truncated"):
        tr.load_trace(path)


def test_invariants_live_in_the_models():
    app = tr.Application(framework="spark", id="a", start=0, end=1)
    with pytest.raises(ValueError, match="before start"):
        tr.Task(id="t", start=2, end=1)
    with pytest.raises(ValueError, match="not found"):
        tr.Trace(application=app, operations=[tr.Operation(id="a", name="a", start=0, end=1, parents=["zz"])])
    with pytest.raises(ValueError, match="differ in length"):
        tr.StackSamples(origin=0, frames=[tr.Frame(name="f")], stacks=[[0]], keys=[tr.SampleKey(operation="a")],
                        key=[0], bucket=[0, 1], stack=[0], count=[1])
    with pytest.raises(ValueError, match="frame that does not exist"):
        tr.StackSamples(origin=0, frames=[], stacks=[[3]])


def test_iter_operations_is_depth_first():
    trace = spark_like_trace(jobs=2, stages_per_job=2, tasks_per_stage=2)
    ids = [o.id for o in trace.iter_operations()]
    assert ids == ["job-0", "stage-0", "stage-1", "job-1", "stage-2", "stage-3"]
