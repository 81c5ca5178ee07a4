"""The bounds on what the analyser reads (crystalperf.core.limits) and on what it prints."""

from __future__ import annotations

import gzip
import io
import os
import zipfile
from pathlib import Path

import pytest
from rich.console import Console

from crystalperf.core import limits
from crystalperf.core.cli import main
from crystalperf.core.errors import BadInputError, one_line
from crystalperf.core.report.terminal import TerminalRenderer
from crystalperf.core.trace import load_trace, save_trace
from crystalperf.core.trace.synthetic import spark_like_trace


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CRYSTALPERF_CACHE_DIR", str(tmp_path / "cache"))


def test_gunzip_reads_members_and_stops_a_bomb(tmp_path, monkeypatch):
    assert limits.gunzip(gzip.compress(b"ab") + gzip.compress(b"cd"), "x") == b"abcd"
    monkeypatch.setenv(limits.MAX_DECOMPRESSED_BYTES.env, "1m")
    bomb = gzip.compress(b"\0" * (8 << 20))
    with pytest.raises(BadInputError, match="compression bomb"):
        limits.gunzip(bomb, "x")
    with pytest.raises(BadInputError, match="truncated"):
        limits.gunzip(gzip.compress(b"x" * 1000)[:-12], "x")
    with pytest.raises(BadInputError, match="trailing garbage"):
        limits.gunzip(gzip.compress(b"x") + b"junk", "x")


def test_the_ratio_limit_applies_beyond_the_first_64_mib(monkeypatch):
    assert limits.ratio_cap(1000) == limits.RATIO_FREE_BYTES + 200 * 1000
    monkeypatch.setenv(limits.MAX_COMPRESSION_RATIO.env, "10")
    assert limits.ratio_cap(1000) == limits.RATIO_FREE_BYTES + 10_000
    monkeypatch.setenv(limits.MAX_DECOMPRESSED_BYTES.env, "1k")
    assert limits.ratio_cap(1000) == 1024


def test_a_limit_that_cannot_be_read_is_one_error(monkeypatch):
    monkeypatch.setenv(limits.MAX_TRACE_BYTES.env, "lots\n")
    with pytest.raises(BadInputError, match="CRYSTALPERF_MAX_TRACE_BYTES"):
        limits.MAX_TRACE_BYTES.get()
    monkeypatch.setenv(limits.MAX_TRACE_BYTES.env, "2k")
    assert limits.MAX_TRACE_BYTES.get() == 2048


def test_only_regular_files_within_the_limit_are_read(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, words in ((fifo, "FIFO"), (Path("/dev/zero"), "device"), (tmp_path, "directory"),
                        (tmp_path / "none", "no such file")):
        with pytest.raises(BadInputError, match=words):
            limits.read_regular(path, limits.MAX_SOURCE_FILE_BYTES, "source file")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 5000)
    monkeypatch.setenv(limits.MAX_SOURCE_FILE_BYTES.env, "4k")
    with pytest.raises(BadInputError, match="larger than the limit"):
        limits.read_regular(big, limits.MAX_SOURCE_FILE_BYTES)
    assert not limits.is_regular_file(fifo) and limits.is_regular_file(big)


def test_zip_entries_and_indexes_are_bounded(tmp_path, monkeypatch):
    jar = tmp_path / "a.jar"
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("small.class", b"cafe")
        z.writestr("bomb.class", b"\0" * (1 << 20))
    with limits.open_zip(jar) as z:
        assert limits.read_zip_entry(z, "small.class", jar) == b"cafe"
        monkeypatch.setenv(limits.MAX_ARCHIVE_ENTRY_BYTES.env, "64k")
        with pytest.raises(BadInputError, match="larger than the limit"):
            limits.read_zip_entry(z, "bomb.class", jar)
    monkeypatch.setenv(limits.MAX_ARCHIVE_INDEX_BYTES.env, "50")
    with pytest.raises(BadInputError, match="index"):
        limits.open_zip(jar)


def test_a_trace_file_that_is_a_fifo_or_a_bomb_is_refused(tmp_path, monkeypatch):
    fifo = tmp_path / "crystalperf-trace.json.gz"
    os.mkfifo(fifo)
    with pytest.raises(BadInputError, match="FIFO"):
        load_trace(fifo)
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b'{"schema_version": "1.4", "x": "' + b" " * (4 << 20), 9))
    monkeypatch.setenv(limits.MAX_DECOMPRESSED_BYTES.env, "1m")
    with pytest.raises(BadInputError, match="decompresses to more than"):
        load_trace(bomb)


def test_error_lines_are_one_printable_line():
    assert one_line("a\nb\x1b[2J\u202e\udcff") == "a\\nb\\x1b[2J\\u202e\\xff"
    assert one_line("x" * 50, 10) == "x" * 9 + "…"


def test_the_terminal_summary_escapes_and_cuts_names(tmp_path):
    trace = spark_like_trace(jobs=1, tasks_per_stage=2)
    evil = "[bold red]x[/] \x1b]52;c;ZXZpbA==\x07\x1b[2J\r\u202eevil " + "n" * 100_000
    trace.application.name = evil
    for op in trace.iter_operations():
        op.name = evil
    path = save_trace(trace, tmp_path / "crystalperf-trace.json.gz")
    buffer = io.StringIO()
    from crystalperf.core.analysis import analyze_path
    from crystalperf.core.attribution.classify import KeywordClassifier

    report = analyze_path(path, tmp_path, classifier=KeywordClassifier()).report
    TerminalRenderer().print(report, Console(file=buffer, width=120, force_terminal=True))
    text = buffer.getvalue()
    assert "\x07" not in text and "\r" not in text and "\u202e" not in text and "]52;" not in text.replace("\\x1b]52;", "")
    assert "[bold red]x[/]" in text  # printed as text, not applied as markup
    assert max(len(line) for line in text.splitlines()) < 2000
    html = (tmp_path / "crystalperf-report.html").read_text()
    assert "[bold red]x[/]" in html


def test_out_that_is_not_a_directory_is_one_line(tmp_path, capsys):
    trace = save_trace(spark_like_trace(jobs=1, tasks_per_stage=2), tmp_path / "crystalperf-trace.json.gz")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for out in (a_file, a_file / "sub", tmp_path / ("x" * 5000)):
        assert main(["analyze", str(trace), "--out", str(out), "-q", "--classifier", "keyword"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err


def test_a_newline_in_a_path_stays_on_one_line(tmp_path, capsys):
    path = tmp_path / "a\nb.json"
    path.write_text("{")
    assert main(["analyze", str(path), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a\\nb.json" in err
