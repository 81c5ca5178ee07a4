"""Event logs as Spark writes them besides plain text: the codecs' framings, logs in progress, damaged files,
and History Server directories (many applications). No pyspark needed.

The compressed files are made here from the real golden log (tests/data/spark-eventlog.json.gz): zstd with
``zstandard``, LZ4 and snappy framed as lz4-java's LZ4BlockOutputStream and snappy-java's SnappyOutputStream
write them around ``cramjam``'s raw blocks, LZF by a small compressor below. Tests of a codec whose library
is not installed skip; the Spark tier (tests/integrations/spark/test_spark_eventlog.py) reads the files
real Spark writes with every codec.
"""

from __future__ import annotations

import gzip
import json
import struct
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from crystalperf.core.cli import main
from crystalperf.core.errors import BadInputError
from crystalperf.integrations.spark import read_event_log
from crystalperf.integrations.spark.codecs import DamagedLogError, codec_of, lzf_decompress, open_binary
from crystalperf.integrations.spark.reader import IN_PROGRESS_WARNING, events, list_applications

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "spark-eventlog.json.gz"
PLAIN_LOG = gzip.decompress(GOLDEN.read_bytes())
APP_ID = "local-1795550840668"


# --- writers of the framings, as the Java libraries write them -------------------------------------------

def lz4_framed(data: bytes, block: int = 1 << 15) -> bytes:
    cramjam = pytest.importorskip("cramjam")
    level = max(0, (block - 1).bit_length() - 10)
    out = bytearray()
    for i in range(0, len(data), block):
        chunk = data[i:i + block]
        packed = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        method = 0x20
        if len(packed) >= len(chunk):  # LZ4BlockOutputStream stores a block that does not shrink
            packed, method = chunk, 0x10
        out += b"LZ4Block" + struct.pack("<BiiI", method | level, len(packed), len(chunk), 0) + packed
    return bytes(out + b"LZ4Block" + struct.pack("<BiiI", 0x10 | level, 0, 0, 0))


def snappy_framed(data: bytes, block: int = 1 << 15) -> bytes:
    cramjam = pytest.importorskip("cramjam")
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        packed = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out += struct.pack(">i", len(packed)) + packed
    return bytes(out)


def zstd_framed(data: bytes, block: int = 1 << 15) -> bytes:
    """One streamed zstd frame, flushed every 32 KiB as zstd-jni's stream under Spark's buffer flushes it
    (a one-shot frame cannot be decoded before its end, so a cut one would yield nothing)."""
    zstandard = pytest.importorskip("zstandard")
    stream = zstandard.ZstdCompressor(level=1).compressobj()
    out = bytearray()
    for i in range(0, len(data), block):
        out += stream.compress(data[i:i + block]) + stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    return bytes(out + stream.flush())


def lzf_compress(data: bytes) -> bytes:
    """A greedy LZF compressor (liblzf's format): literal runs of up to 32 bytes, back references of up to
    264 bytes at most 8192 back, found through the last position of each 3-byte prefix."""
    out, literal, last = bytearray(), bytearray(), {}
    i = 0

    def flush() -> None:
        for j in range(0, len(literal), 32):
            run = literal[j:j + 32]
            out.append(len(run) - 1)
            out.extend(run)
        literal.clear()

    while i < len(data):
        key = data[i:i + 3]
        ref = last.get(key)
        last[key] = i
        if ref is not None and len(key) == 3 and 0 < i - ref <= 8192:
            length = 3
            while i + length < len(data) and length < 264 and data[ref + length] == data[i + length]:
                length += 1
            flush()
            distance = i - ref - 1
            code = length - 2
            if code < 7:
                out += bytes([(code << 5) | (distance >> 8), distance & 0xFF])
            else:
                out += bytes([(7 << 5) | (distance >> 8), code - 7, distance & 0xFF])
            i += length
            continue
        literal.append(data[i])
        i += 1
    flush()
    return bytes(out)


def lzf_framed(data: bytes, block: int = 0xFFFF) -> bytes:
    out = bytearray()
    for i in range(0, len(data), block):
        chunk = data[i:i + block]
        packed = lzf_compress(chunk)
        if len(packed) >= len(chunk):
            out += b"ZV\x00" + struct.pack(">H", len(chunk)) + chunk
        else:
            out += b"ZV\x01" + struct.pack(">HH", len(packed), len(chunk)) + packed
    return bytes(out)


WRITERS: dict[str, Callable[[bytes], bytes]] = {
    "plain": lambda data: data, "gzip": gzip.compress, "zstd": zstd_framed, "lz4": lz4_framed,
    "snappy": snappy_framed, "lzf": lzf_framed,
}
SUFFIX = {"plain": "", "gzip": ".gz", "zstd": ".zstd", "lz4": ".lz4", "snappy": ".snappy", "lzf": ".lzf"}


def write_log(where: Path, codec: str, data: bytes = PLAIN_LOG, name: str = APP_ID, end: str = "") -> Path:
    path = where / f"{name}{SUFFIX[codec]}{end}"
    path.write_bytes(WRITERS[codec](data))
    return path


def plain_events() -> list[dict]:
    return [json.loads(line) for line in PLAIN_LOG.decode().splitlines() if line.strip()]


# --- LZF, by hand ------------------------------------------------------------------------------------------

def test_lzf_literals_and_back_references_by_hand() -> None:
    # "abc" as a literal run (control 2 = 3 bytes), then 6 bytes from 3 back: the copy overlaps itself
    assert lzf_decompress(b"\x02abc" + bytes([4 << 5, 2]), 9) == b"abcabcabc"
    # length 7 means "add the next byte": 7 + 10 + 2 = 19 copies of the byte 1 back
    assert lzf_decompress(b"\x00x" + bytes([7 << 5, 10, 0]), 20) == b"x" * 20
    # a distance above 256 uses the control byte's low 5 bits
    text = bytes(range(256)) + bytes(range(44))  # 300 bytes as literal runs, then 5 bytes from 300 back
    runs = b"".join(bytes([len(text[i:i + 32]) - 1]) + text[i:i + 32] for i in range(0, 300, 32))
    assert lzf_decompress(runs + bytes([(3 << 5) | (299 >> 8), 299 & 0xFF]), 305) == text + text[:5]


@pytest.mark.parametrize("block, size, problem", [
    (b"\x00x" + bytes([1 << 5, 5]), 4, "before the start"),  # 6 back after 1 byte
    (b"\x05abc", 6, "past the end"),  # a literal run longer than the block
    (b"\x00x" + bytes([7 << 5]), 10, "ends inside a back reference"),
    (b"\x02abc", 4, "3 bytes instead of 4"),
])
def test_lzf_damage_is_a_value_error(block: bytes, size: int, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        lzf_decompress(block, size)


def test_lzf_compressor_round_trips_the_golden_log() -> None:
    chunk = PLAIN_LOG[:0xFFFF]
    assert lzf_decompress(lzf_compress(chunk), len(chunk)) == chunk


# --- every codec: the same events as the plain log ------------------------------------------------------

@pytest.mark.parametrize("codec", list(WRITERS))
def test_every_codec_reads_the_same_events(tmp_path: Path, codec: str) -> None:
    path = write_log(tmp_path, codec)
    assert codec_of(path) == codec
    assert list(events(path)) == plain_events()
    trace = read_event_log(path)
    assert trace.application.id == APP_ID and len(trace.operations) == 3 and trace.warnings == []


@pytest.mark.parametrize("codec", ["zstd", "lz4", "snappy", "lzf", "gzip"])
def test_magic_bytes_win_over_the_name(tmp_path: Path, codec: str) -> None:
    path = tmp_path / f"{APP_ID}.lz4" if codec != "lz4" else tmp_path / f"{APP_ID}.snappy"
    path.write_bytes(WRITERS[codec](PLAIN_LOG))
    assert codec_of(path) == codec
    assert len(list(events(path))) == len(plain_events())


def test_streams_hold_one_block_not_the_file(tmp_path: Path) -> None:
    big = PLAIN_LOG * 4
    path = tmp_path / "app.lzf"
    path.write_bytes(lzf_framed(big))
    stream = open_binary(path)
    first = stream.read(100)
    raw = stream.raw
    # one 64 KiB chunk decoded, the rest of the 1.4 MB still compressed on disk
    assert first == big[:100] and len(raw._pending) <= 0xFFFF  # type: ignore[attr-defined]
    assert stream.read() == big[100:]
    stream.close()


def test_rolling_log_of_compressed_files(tmp_path: Path) -> None:
    rolling = tmp_path / f"eventlog_v2_{APP_ID}"
    rolling.mkdir()
    lines = PLAIN_LOG.splitlines(keepends=True)
    half = len(lines) // 2
    (rolling / f"events_1_{APP_ID}.lzf").write_bytes(lzf_framed(b"".join(lines[:half])))
    (rolling / f"events_2_{APP_ID}.gz").write_bytes(gzip.compress(b"".join(lines[half:])))
    (rolling / f"appstatus_{APP_ID}").write_bytes(b"")
    assert list(events(rolling)) == plain_events()


# --- damage and logs in progress -----------------------------------------------------------------------

@pytest.mark.parametrize("codec", ["zstd", "lz4", "snappy", "lzf", "gzip"])
def test_a_truncated_log_keeps_the_events_before_the_cut(tmp_path: Path, codec: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    data = WRITERS[codec](PLAIN_LOG)
    path = tmp_path / f"{APP_ID}{SUFFIX[codec]}"
    path.write_bytes(data[:len(data) * 9 // 10])
    with pytest.raises(DamagedLogError, match="truncated"):
        list(events(path))
    trace = read_event_log(path)
    (damage,) = [w for w in trace.warnings if "truncated" in w]
    assert str(path) in damage and "events before it were used" in damage
    assert 0 < sum(len(s.tasks) for j in trace.operations for s in j.children) < 28
    assert main(["import", "spark-eventlog", str(path), "--out", str(tmp_path / "t.json.gz")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any(str(path) in line and "truncated" in line for line in err)


@pytest.mark.parametrize("codec", ["zstd", "lz4", "snappy", "lzf", "gzip"])
def test_a_log_in_progress_is_read_to_where_spark_got(tmp_path: Path, codec: str) -> None:
    data = WRITERS[codec](PLAIN_LOG)
    path = tmp_path / f"{APP_ID}{SUFFIX[codec]}.inprogress"
    path.write_bytes(data[:len(data) * 2 // 3])
    trace = read_event_log(path)
    assert IN_PROGRESS_WARNING in trace.warnings and "in progress" in IN_PROGRESS_WARNING
    assert not any("truncated" in w for w in trace.warnings)  # the cut is where Spark is writing: no damage


def test_plain_log_in_progress_and_its_missing_end(tmp_path: Path) -> None:
    lines = PLAIN_LOG.decode().splitlines()
    path = tmp_path / f"{APP_ID}.inprogress"
    path.write_text("\n".join(line for line in lines if "ApplicationEnd" not in line)[:-40])
    warnings = read_event_log(path).warnings
    assert IN_PROGRESS_WARNING in warnings
    assert "the event log has no application end (a running or crashed app)" in warnings


def test_rolling_log_in_progress_by_its_appstatus_file(tmp_path: Path) -> None:
    rolling = tmp_path / f"eventlog_v2_{APP_ID}"
    rolling.mkdir()
    (rolling / f"events_1_{APP_ID}.lzf").write_bytes(lzf_framed(PLAIN_LOG)[:-1000])
    (rolling / f"appstatus_{APP_ID}.inprogress").write_bytes(b"")
    assert IN_PROGRESS_WARNING in read_event_log(rolling).warnings
    (rolling / f"appstatus_{APP_ID}.inprogress").rename(rolling / f"appstatus_{APP_ID}")
    assert any("truncated" in w for w in read_event_log(rolling).warnings)


@pytest.mark.parametrize("codec", ["zstd", "lz4", "snappy", "lzf", "gzip"])
def test_a_file_damaged_from_the_start_is_one_error_line(tmp_path: Path, codec: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    data = bytearray(WRITERS[codec](PLAIN_LOG))
    head = {"zstd": 4, "lz4": 8, "snappy": 16, "lzf": 0, "gzip": 10}[codec]
    data[head:head + 64] = b"\xff" * 64
    path = tmp_path / f"{APP_ID}{SUFFIX[codec]}"
    path.write_bytes(bytes(data))
    with pytest.raises(BadInputError):
        read_event_log(path)
    assert main(["import", "spark-eventlog", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "crystalperf: error:" in err
    assert not (tmp_path / "crystalperf-trace.json.gz").exists()


def test_damage_in_the_middle_keeps_what_came_before(tmp_path: Path) -> None:
    data = bytearray(lzf_framed(PLAIN_LOG))
    data[len(data) * 3 // 4:len(data) * 3 // 4 + 8] = b"XXXXXXXX"
    path = tmp_path / f"{APP_ID}.lzf"
    path.write_bytes(bytes(data))
    trace = read_event_log(path)
    (damage,) = [w for w in trace.warnings if "damaged lzf" in w]
    assert str(path) in damage and trace.application.id == APP_ID
    assert 0 < sum(len(s.tasks) for j in trace.operations for s in j.children) < 28


def test_a_codec_named_but_not_there(tmp_path: Path) -> None:
    path = tmp_path / f"{APP_ID}.lzf"
    path.write_bytes(b"not lzf at all\n" * 10)
    with pytest.raises(DamagedLogError, match="no ZV chunk header"):
        read_event_log(path)


@pytest.mark.parametrize("codec, library", [("zstd", "zstandard"), ("lz4", "cramjam"), ("snappy", "cramjam")])
def test_a_missing_codec_library_names_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   codec: str, library: str) -> None:
    monkeypatch.setitem(sys.modules, library, None)  # import fails as if it were not installed
    path = tmp_path / f"{APP_ID}{SUFFIX[codec]}"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(BadInputError, match=rf"{codec}-compressed event log: pip install {library} "):
        read_event_log(path)


# --- History Server directories ------------------------------------------------------------------------

def _app_log(app_id: str, name: str, *, end: bool = True) -> bytes:
    out = []
    for line in PLAIN_LOG.decode().splitlines():
        event = json.loads(line)
        if event["Event"] == "SparkListenerApplicationStart":
            event.update({"App ID": app_id, "App Name": name})
        if event["Event"] == "SparkListenerApplicationEnd" and not end:
            continue
        out.append(json.dumps(event))
    return ("\n".join(out) + "\n").encode()


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """Three applications as Spark leaves them in spark.eventLog.dir: a single-file log, one in progress and
    a rolling log; plus Hadoop's checksum file and a trace imported earlier, which are not logs."""
    logs = tmp_path / "spark-events"
    logs.mkdir()
    write_log(logs, "lzf", _app_log("local-1001", "first"), "local-1001")
    write_log(logs, "gzip", _app_log("local-1002", "second", end=False), "local-1002", ".inprogress")
    rolling = logs / "eventlog_v2_local-1003"
    rolling.mkdir()
    (rolling / "events_1_local-1003").write_bytes(_app_log("local-1003", "third"))
    (rolling / "appstatus_local-1003").write_bytes(b"")
    (logs / ".local-1001.lzf.crc").write_bytes(b"crc")
    (logs / "crystalperf-trace.json.gz").write_bytes(gzip.compress(b'{"schema_version": "1.0"}'))
    (logs / "notes").mkdir()
    return logs


def test_list_applications(history: Path) -> None:
    apps = list_applications(history)
    assert [(a.id, a.name, a.status) for a in apps] == [
        ("eventlog_v2_local-1003"[12:], "third", "complete"), ("local-1001", "first", "complete"),
        ("local-1002", "second", "in progress")]
    assert all(a.start == 1795550840.668 or a.start for a in apps)
    assert apps[1].size == (history / "local-1001.lzf").stat().st_size
    # one log (a file, a rolling directory) is a catalog of one
    assert [a.id for a in list_applications(history / "local-1001.lzf")] == ["local-1001"]
    assert [a.id for a in list_applications(history / "eventlog_v2_local-1003")] == ["local-1003"]


def test_cli_list(history: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "spark-eventlog", str(history), "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert lines[2].startswith("local-1002  second  ") and "UTC  in progress  " in lines[2]
    assert lines[1].split("  ")[-1].endswith("KiB")


def test_cli_many_applications_need_a_choice(history: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "spark-eventlog", str(history)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--app" in err and "--list" in err and "--all" in err


def test_cli_app_and_all(history: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from crystalperf.core.trace import load_trace

    out = tmp_path / "one.json.gz"
    assert main(["import", "spark-eventlog", str(history), "--app", "local-1002", "--out", str(out)]) == 0
    trace = load_trace(out)
    assert trace.application.name == "second" and IN_PROGRESS_WARNING in trace.warnings
    assert main(["import", "spark-eventlog", str(history), "--app", "local-9"]) == 2
    assert "local-1001, local-1002" in capsys.readouterr().err.replace("local-1003, ", "")

    # a name that is not a trace file's is a directory to make, holding the trace (and the reports beside it)
    assert main(["import", "spark-eventlog", str(history), "--app", "local-1002", "--out", str(tmp_path / "t1"),
                 "--analyze"]) == 0
    assert load_trace(tmp_path / "t1" / "crystalperf-trace.json.gz").application.name == "second"
    assert (tmp_path / "t1" / "crystalperf-report.json").is_file()

    root = tmp_path / "all"
    assert main(["import", "spark-eventlog", str(history), "--all", "--out", str(root)]) == 0
    written = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.json.gz"))
    assert written == [f"local-100{i}/crystalperf-trace.json.gz" for i in (1, 2, 3)]
    assert load_trace(root / "local-1003" / "crystalperf-trace.json.gz").application.name == "third"


def test_cli_one_log_works_as_before(history: Path, tmp_path: Path) -> None:
    rolling = history / "eventlog_v2_local-1003"
    assert main(["import", "spark-eventlog", str(rolling)]) == 0
    assert (history / "crystalperf-trace.json.gz").stat().st_size > 1000
    single = tmp_path / "single"
    single.mkdir()
    write_log(single, "plain")
    # a directory holding one application's log imports it
    assert main(["import", "spark-eventlog", str(single), "--out", str(tmp_path / "s.json.gz")]) == 0


def test_cli_choosing_needs_a_catalog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "flink-metrics", str(tmp_path), "--list"]) == 2
    assert "cannot list applications" in capsys.readouterr().err


def test_a_damaged_log_is_listed_and_named_when_imported(history: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A file Spark would have named as a log that does not read as one (damaged from its first byte) is
    listed, so that importing every log says what is wrong with it instead of leaving it out unseen."""
    (history / "local-1004.zstd").write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00garbage" * 8)
    (history / "README.txt").write_text("not a log, not named like one\n")
    assert [a.id for a in list_applications(history)][-1] == "local-1004"
    assert "README.txt" not in {a.path.name for a in list_applications(history)}
    assert main(["import", "spark-eventlog", str(history), "--all", "--out", str(tmp_path / "all")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("crystalperf: error:")]
    assert len(errors) == 1 and "local-1004.zstd: damaged zstd data" in errors[0]
    assert len(list((tmp_path / "all").rglob("crystalperf-trace.json.gz"))) == 3
