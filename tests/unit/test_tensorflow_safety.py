"""Hostile inputs to the TensorFlow integration, without TensorFlow: TF_CONFIG values that would move the
report outside its directory, file names that are not UTF-8 in sampled frames, profiles larger than the
memory budget."""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
from pathlib import Path

import pytest

from crystalperf.core import trace as tr
from crystalperf.integrations.tensorflow import config
from crystalperf.integrations.tensorflow.assemble import build_trace, printable
from crystalperf.integrations.tensorflow.reader import (
    Recording,
    Step,
    Timeline,
    decode_xspace,
    read_timeline,
    timeline_from_planes,
    timeline_from_xspace,
)

DATA = Path(__file__).resolve().parents[1] / "data"
XPLANE = DATA / "tensorflow-fit.xplane.pb.gz"


def _suffix(task: object) -> str | None:
    return config.worker_suffix(config.tf_config({"TF_CONFIG": json.dumps({"task": task})}))


@pytest.mark.parametrize("kind", ["../../etc", "..", ".", ".hidden", "/abs", "a/b", "a\\b", "", "x" * 65,
                                  "wörker", "a b", "a\x00b", 7, None, ["worker"], {"type": "worker"}])
def test_a_task_type_that_is_not_a_plain_name_becomes_task(kind: object, caplog: pytest.LogCaptureFixture,
                                                            tmp_path: Path) -> None:
    with caplog.at_level(logging.WARNING, logger="crystalperf.tensorflow"):
        suffix = _suffix({"type": kind, "index": 1})
    assert suffix == "task-1"
    assert "not a plain name" in caplog.text
    chosen = config.output_dir(tmp_path, None, "fit-1", {"task": {"type": kind, "index": 1}})
    assert chosen.parent == tmp_path


@pytest.mark.parametrize("index", ["../1", "1.5", -1, 1.5, True, 10**9, "x", None, [1], "١"])
def test_a_task_index_that_is_not_a_small_integer_becomes_0(index: object, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="crystalperf.tensorflow"):
        assert _suffix({"type": "worker", "index": index}) == "worker-0"
    assert "not an integer" in caplog.text


@pytest.mark.parametrize(("task", "suffix"), [({"type": "worker", "index": 3}, "worker-3"),
                                              ({"type": "chief"}, "chief-0"),
                                              ({"type": "evaluator", "index": "2"}, "evaluator-2"),
                                              ({"type": "ps.v2_a-1", "index": 0}, "ps.v2_a-1-0")])
def test_plain_task_names_are_kept(task: dict[str, object], suffix: str) -> None:
    assert _suffix(task) == suffix


def test_a_task_that_is_not_an_object_is_no_task() -> None:
    assert _suffix("worker") is None and _suffix(["worker", 1]) is None


def test_text_that_is_not_unicode_is_escaped() -> None:
    undecodable = b"/tmp/x/\xff\xfe.py".decode("utf-8", "surrogateescape")
    assert printable(undecodable) == "/tmp/x/\\xff\\xfe.py"
    assert printable("lone \ud800 surrogate").encode("utf-8")
    assert printable("plain é") == "plain é"


def test_sampled_frames_with_undecodable_file_names_leave_a_writable_trace(tmp_path: Path) -> None:
    name = b"/tmp/x/\xff.py".decode("utf-8", "surrogateescape")
    samples = tr.StackSamples(
        interval_s=0.02, bucket_s=1.0, origin=100.0,
        frames=[tr.Frame(name="\udcffmod.load", file=name, line=1, language="python", module="\udcffmod")],
        stacks=[[0]], keys=[tr.SampleKey(operation="s0", thread="reader-\udcff")],
        key=[0], bucket=[0], stack=[0], count=[5])
    rec = Recording(steps=[Step(0, 0, 100.0, 101.0)], timeline=None, python_samples=samples, threads=2,
                    cpu_count=2, cpu_seconds=1.0, memory_bytes=None)
    trace = build_trace(rec, run_id="fit-\udcff", name="model-\udcff", framework_version="2.21")
    path = tr.save_trace(trace, tmp_path / "t.json.gz")
    loaded = tr.load_trace(path)
    assert loaded.samples is not None
    assert [f.file for f in loaded.samples.frames] == ["/tmp/x/\\xff.py"]


def test_the_streaming_reader_gives_the_decoded_planes_timeline() -> None:
    data = gzip.decompress(XPLANE.read_bytes())
    assert timeline_from_xspace(data) == timeline_from_planes(decode_xspace(data))


def test_kernel_events_over_the_budget_are_cut_at_one_instant(tmp_path: Path) -> None:
    data = gzip.decompress(XPLANE.read_bytes())
    whole = timeline_from_xspace(data)
    cut = timeline_from_xspace(data, max_ops=500)
    assert len(cut.ops) == 500 and cut.dropped_ops == len(whole.ops) - 500
    assert cut.complete_until is not None
    assert cut.ops == [op for op in whole.ops if op.start < cut.complete_until]  # whole before the instant
    assert all(start < cut.complete_until for start, _ in cut.input_waits)
    plain = tmp_path / "profile.xplane.pb"
    plain.write_bytes(data)
    assert read_timeline(plain, max_ops=500) == cut and read_timeline(plain) == whole


@pytest.mark.parametrize("data", [b"", b"\x0a", b"\x0a\x05ab", b"\xff" * 10])
def test_a_damaged_profile_gives_a_timeline_or_a_plain_error(data: bytes) -> None:
    with contextlib.suppress(ValueError, IndexError):  # what the callback's guard logs
        assert isinstance(timeline_from_xspace(data, max_ops=10), Timeline)
