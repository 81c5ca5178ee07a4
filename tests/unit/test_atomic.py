"""Files appear whole or not at all, under unique temporary names (crystalperf.core.atomic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crystalperf.core import atomic
from crystalperf.core.report import write_reports


def test_a_symlink_planted_under_the_old_fixed_temp_name_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (tmp_path / "crystalperf-report.json.tmp").symlink_to(victim)
    atomic.write_text(tmp_path / "crystalperf-report.json", "{}")
    assert victim.read_text() == "keep me"
    assert (tmp_path / "crystalperf-report.json").read_text() == "{}"


def test_an_existing_file_is_replaced_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    target = tmp_path / "trace.json"
    target.write_text("old")
    atomic.write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]


def test_a_failed_set_leaves_the_previous_files_and_no_temporary_file(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "missing-dir" / "b.html"
    first.write_text("previous")
    with pytest.raises(OSError):
        atomic.replace_set({first: b"new", second: b"new"})
    assert first.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_text_that_cannot_be_encoded_is_written_with_replacements(tmp_path: Path) -> None:
    target = atomic.write_text(tmp_path / "x.txt", "frame \udcff.py")
    assert target.read_text(encoding="utf-8") == "frame ?.py"


def test_reports_are_written_as_a_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = _minimal_report()
    written = write_reports(report, tmp_path, ("json", "html"))
    assert [p.name for p in written] == ["crystalperf-report.json", "crystalperf-report.html"]
    before = {p.name: p.read_bytes() for p in written}

    def broken(self: object, report: dict[str, object]) -> str:
        raise RuntimeError("renderer failed")

    monkeypatch.setattr("crystalperf.core.report.html.HtmlRenderer.render", broken)
    with pytest.raises(RuntimeError):
        write_reports({**report, "total_runtime_s": 99.0}, tmp_path, ("json", "html"))
    # the JSON was not replaced either: the two files still describe the same analysis
    assert {p.name: p.read_bytes() for p in written} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crystalperf-report.html", "crystalperf-report.json"]


def _minimal_report() -> dict[str, object]:
    from crystalperf.core.analysis import analyze
    from crystalperf.core.attribution.classify import KeywordClassifier
    from crystalperf.core.trace.synthetic import spark_like_trace

    return analyze(spark_like_trace(jobs=1, tasks_per_stage=2), classifier=KeywordClassifier()).report


def test_a_trace_with_a_name_that_is_not_utf8_is_written_and_reads_back_escaped(tmp_path: Path) -> None:
    from crystalperf.core import trace as tr
    from crystalperf.core.trace.synthetic import spark_like_trace

    trace = spark_like_trace(jobs=1, tasks_per_stage=2)
    # what os.fsdecode gives for the file name b"udf_\xff.py", and a lone surrogate from nowhere
    trace.application.name = "udf_\udcff.py \ud800"
    saved = tr.save_trace(trace, tmp_path / "crystalperf-trace.json.gz")
    assert tr.load_trace(saved).application.name == "udf_\\xff.py \ufffd"


def test_a_link_is_replaced_atomically_but_a_regular_file_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "report.html").write_text(d)
    link = tmp_path / "report.html"
    atomic.symlink(link, Path("a") / "report.html")
    atomic.symlink(link, Path("b") / "report.html")
    assert link.is_symlink() and link.read_text() == "b"
    regular = tmp_path / "other.html"
    regular.write_text("mine")
    with pytest.raises(FileExistsError):
        atomic.symlink(regular, Path("a") / "report.html")
    assert not regular.is_symlink() and regular.read_text() == "mine"
    assert not list(tmp_path.glob(".crystalperf-*"))
