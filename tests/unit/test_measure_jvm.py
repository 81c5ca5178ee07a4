"""JFR measurement: parsing, attribution to every method on the stack, labels; one real recording.

``tests/data/measure/tiny-jfr-print.json`` is ``jfr print --json`` of a real recording of a small program
(``Tiny``: writes a 1 MB file with ``FileOutputStream.write``, spins on ``Integer.toString(i).hashCode()``,
sleeps 20 ms, deletes the file), cut to 16 of its events: three native samples inside
``FileOutputStream.writeBytes``, the 0.543699597 s ``jdk.FileWrite``, ten execution samples in ``Tiny.spin``,
the 0.020124619 s ``jdk.ThreadSleep`` and a native sample in ``UnixFileSystem.delete0``.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from crystalperf.models.measure import jvm
from crystalperf.models.measure.jvm import Attribution, JfrEvent, JfrFrame
from crystalperf.models.measured import label_changes

DATA = Path(__file__).resolve().parents[1] / "data" / "measure" / "tiny-jfr-print.json"
PERIOD = 0.002


def _tiny_events() -> list[JfrEvent]:
    with DATA.open(encoding="utf-8") as stream:
        return list(jvm.read_jfr_json(stream, chunk_chars=4096))  # small chunks: events span reads


def _attributed() -> Attribution:
    attribution = Attribution()
    attribution.add_recording(_tiny_events(), "tiny", PERIOD, PERIOD, estimate_period=False)
    return attribution


def test_reads_every_event_with_its_stack_top_first() -> None:
    events = _tiny_events()
    assert [e.kind for e in events].count("jdk.ExecutionSample") == 10
    assert [e.kind for e in events].count("jdk.NativeMethodSample") == 4
    write = next(e for e in events if e.kind == "jdk.FileWrite")
    assert write.duration_s == pytest.approx(0.543699597)
    assert [f.qualified_name for f in write.frames] == ["java.io.FileOutputStream.write", "Tiny.save", "Tiny.main"]
    assert write.frames[0].module == "java.base" and write.frames[1].module is None
    assert write.thread == 1


def test_streamed_reading_equals_loading_the_whole_document() -> None:
    whole = json.loads(DATA.read_text())["recording"]["events"]
    streamed = jvm.read_jfr_json(io.StringIO(DATA.read_text()), chunk_chars=100)
    assert [e.kind for e in streamed] == [raw["type"] for raw in whole]


def test_a_cut_short_document_is_an_error_not_a_silent_end() -> None:
    text = DATA.read_text()
    with pytest.raises(ValueError, match="ends inside an event"):
        list(jvm.read_jfr_json(io.StringIO(text[: len(text) // 2]), chunk_chars=1000))


def test_attribution_by_hand() -> None:
    methods = _attributed().methods
    # main: the write (disk), 10 samples (cpu), the sleep (waiting), the delete's native sample (disk). The
    # delete's sample is 29 s after the thread's previous native sample: the gap is capped at 10 periods.
    main = methods["Tiny.main"]
    assert main.seconds["disk"] == pytest.approx(0.543699597 + 10 * PERIOD)
    assert main.seconds["cpu"] == pytest.approx(10 * PERIOD)
    assert main.seconds["waiting"] == pytest.approx(0.020124619)
    assert main.seconds["network"] == 0
    assert main.events == 13
    # The native samples under FileOutputStream.write are time the FileWrite event already holds.
    assert "java.io.FileOutputStream.writeBytes" not in methods
    assert methods["Tiny.save"].seconds["disk"] == pytest.approx(0.543699597)
    assert methods["Tiny.save"].events == 1
    assert methods["Tiny.spin"].seconds["cpu"] == pytest.approx(10 * PERIOD)
    assert methods["java.lang.String.hashCode"].events == 6
    assert methods["java.lang.Integer.toString"].events == 4
    assert methods["java.io.UnixFileSystem.delete0"].seconds["disk"] == pytest.approx(10 * PERIOD)
    assert methods["java.lang.Thread.sleep"].seconds["waiting"] == pytest.approx(0.020124619)


def test_labels_need_a_dominant_share_and_enough_evidence() -> None:
    methods = _attributed().methods

    def label(name: str) -> str | None:
        return jvm.label_of(methods[name].seconds, methods[name].events)[0]

    assert label("Tiny.main") == "disk"  # 0.5637 of 0.6038 s
    assert label("Tiny.spin") == "cpu"  # 20 ms over 10 samples
    assert label("java.lang.String.hashCode") == "cpu"  # 12 ms, 6 samples
    assert label("java.lang.Integer.toString") is None  # 8 ms: under 10 ms
    assert label("java.io.FileOutputStream.write") is None  # one event
    assert label("java.lang.Thread.sleep") is None  # one event
    shares = jvm.label_of(methods["Tiny.main"].seconds, methods["Tiny.main"].events)[1]
    assert sum(shares.values()) == pytest.approx(1.0)
    assert jvm.label_of({"cpu": 0.05, "disk": 0.05}, 20)[0] is None  # a 50/50 split is no label


def test_recursive_method_counts_once_per_event() -> None:
    attribution = Attribution()
    f = JfrFrame("p.Tree", "walk")
    attribution.add_event([f, f, f, JfrFrame("p.Main", "main")], "cpu", 0.01, "w")
    assert attribution.methods["p.Tree.walk"].seconds["cpu"] == pytest.approx(0.01)
    assert attribution.methods["p.Tree.walk"].events == 1


def test_a_class_loaded_on_first_use_is_not_its_callers_disk_time() -> None:
    attribution = Attribution()
    loading = [JfrFrame("java.io.RandomAccessFile", "read"), JfrFrame("java.util.zip.ZipFile$ZipFileInputStream", "read"),
               JfrFrame("jdk.internal.loader.BuiltinClassLoader", "defineClass"),
               JfrFrame("jdk.internal.loader.BuiltinClassLoader", "loadClassOrNull"),
               JfrFrame("java.lang.ClassLoader", "loadClass"), JfrFrame("org.lib.Client", "connect"),
               JfrFrame("p.Main", "main")]
    attribution.add_event(loading, "disk", 0.05, "w")
    attribution.add_event([JfrFrame("org.lib.Client", "connect"), JfrFrame("p.Main", "main")], "cpu", 0.01, "w")
    assert attribution.methods["java.io.RandomAccessFile.read"].seconds["disk"] == pytest.approx(0.05)
    assert attribution.methods["jdk.internal.loader.BuiltinClassLoader.defineClass"].seconds["disk"] == pytest.approx(0.05)
    for caller in ("org.lib.Client.connect", "p.Main.main"):
        assert attribution.methods[caller].seconds["disk"] == 0.0
        assert attribution.methods[caller].seconds["cpu"] == pytest.approx(0.01)
    # reading a file is not loading: the same reads under a plain caller are its disk time
    attribution.add_event(loading[:2] + loading[5:], "disk", 0.05, "w")
    assert attribution.methods["org.lib.Client.connect"].seconds["disk"] == pytest.approx(0.05)


def _stack(*names: str) -> list[JfrFrame]:
    """Frames top first; a JDK class gets its module, as JFR gives it."""
    return [JfrFrame(*n.rsplit(".", 1), module="java.base" if n.startswith(("java.", "jdk.", "sun.")) else None)
            for n in names]


# A Spark task reading Parquet through Hadoop's local file system, on an executor pool thread.
PARQUET_READ = _stack(
    "java.io.FileInputStream.read", "java.io.BufferedInputStream.read",
    "org.apache.hadoop.fs.RawLocalFileSystem$LocalFSFileInputStream.read", "org.apache.hadoop.fs.FSDataInputStream.read",
    "org.apache.parquet.hadoop.ParquetFileReader.readChunk", "org.apache.spark.sql.execution.FileScanRDD.next",
    "java.util.concurrent.ThreadPoolExecutor.runWorker", "java.lang.Thread.run")
# A Flink split fetcher waiting for its next fetch task.
FETCHER_WAIT = _stack(
    "jdk.internal.misc.Unsafe.park", "java.util.concurrent.locks.LockSupport.park",
    "java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject.await",
    "org.apache.flink.connector.base.source.reader.fetcher.SplitFetcher.getNextTaskUnsafe",
    "org.apache.flink.connector.base.source.reader.fetcher.SplitFetcher.runOnce",
    "org.apache.flink.connector.base.source.reader.fetcher.SplitFetcher.run",
    "java.util.concurrent.Executors$RunnableAdapter.call", "java.util.concurrent.FutureTask.run",
    "java.util.concurrent.ThreadPoolExecutor.runWorker", "java.lang.Thread.run")


def test_own_work_io_stops_above_the_library_that_asked_for_it() -> None:
    # disk: the JDK's stream classes, then Hadoop, which called them; Parquet and Spark asked Hadoop for bytes
    assert jvm.own_work_frames(PARQUET_READ, "disk") == [0, 1, 2, 3]
    assert jvm.own_work_frames(PARQUET_READ, "network") == [0, 1, 2, 3]
    # the same stack's CPU is every method's up to the pool that ran the task (a hand-off)
    assert jvm.own_work_frames(PARQUET_READ, "cpu") == [0, 1, 2, 3, 4, 5]
    # a library told apart by the caller's index: one library for Hadoop and Parquet lets the read reach Spark
    def hadoop_and_parquet_as_one(frame: JfrFrame) -> str:
        return "parquet-hadoop" if frame.class_name.startswith("org.apache.") and ".spark." not in frame.class_name \
            else jvm.package_library(frame)
    assert jvm.own_work_frames(PARQUET_READ, "disk", hadoop_and_parquet_as_one) == [0, 1, 2, 3, 4]


def test_own_work_waits_belong_to_the_first_caller_of_the_lock_up_to_the_hand_off() -> None:
    assert jvm.own_work_frames(FETCHER_WAIT, "waiting") == [3, 4, 5]
    idle_pool_thread = _stack("jdk.internal.misc.Unsafe.park", "java.util.concurrent.locks.LockSupport.park",
                              "java.util.concurrent.LinkedBlockingQueue.take",
                              "java.util.concurrent.ThreadPoolExecutor.getTask",
                              "java.util.concurrent.ThreadPoolExecutor.runWorker", "java.lang.Thread.run")
    assert jvm.own_work_frames(idle_pool_thread, "waiting") == []  # nobody's work
    assert jvm.package_library(JfrFrame("org.apache.hadoop.fs.Path", "toUri")) == "org.apache.hadoop"
    assert jvm.package_library(JfrFrame("java.io.File", "exists")) == jvm.JDK_LIBRARY
    assert jvm.package_library(JfrFrame("Main", "main")) == "Main"


def test_attribution_keeps_own_work_beside_inclusive_time() -> None:
    attribution = Attribution(library_of=jvm.package_library)
    attribution.add_event(PARQUET_READ, "disk", 0.4, "w")
    attribution.add_event(PARQUET_READ[4:], "cpu", 0.1, "w")  # decoding in Parquet's own code
    attribution.add_event(FETCHER_WAIT, "waiting", 0.3, "w")
    methods = attribution.methods
    read_chunk = methods["org.apache.parquet.hadoop.ParquetFileReader.readChunk"]
    assert read_chunk.seconds == {"cpu": 0.1, "disk": 0.4, "network": 0.0, "waiting": 0.0}  # inclusive: mostly disk
    assert read_chunk.own == {"cpu": 0.1, "disk": 0.0, "network": 0.0, "waiting": 0.0}  # its own work: decoding
    assert read_chunk.events == 2 and read_chunk.own_events == 1
    hadoop = methods["org.apache.hadoop.fs.FSDataInputStream.read"]
    assert hadoop.own["disk"] == pytest.approx(0.4) and hadoop.own_events == 1
    assert methods["java.lang.Thread.run"].own_events == 0 and methods["java.lang.Thread.run"].events == 3
    fetch = methods["org.apache.flink.connector.base.source.reader.fetcher.SplitFetcher.getNextTaskUnsafe"]
    assert fetch.own["waiting"] == pytest.approx(0.3)
    assert methods["jdk.internal.misc.Unsafe.park"].own_events == 0  # the primitive is the plumbing, not the work
    # without a library function the attribution is inclusive only, as before
    plain = Attribution()
    plain.add_event(PARQUET_READ, "disk", 0.4, "w")
    assert not plain.own_work and plain.methods["java.lang.Thread.run"].own_events == 0


def test_label_changes_by_hand() -> None:
    def row(id_: str, library: str, own: str | None, inclusive: str | None) -> dict:
        return {"id": id_, "library": library, "label": own, "inclusive": {"label": inclusive}}

    rows = [row("java:a", "lib1", "cpu", "cpu"), row("java:a#bytecode", "lib1", "cpu", "cpu"),
            row("java:b", "lib1", "disk", "cpu"), row("java:c", "lib2", None, "cpu"),
            row("java:d", "lib2", "network", None), row("java:e", "lib2", None, None),
            row("java:f", "lib3", "cpu", "waiting"), {"id": "python:g", "library": "x", "label": "cpu"}]
    changes = label_changes(rows)
    assert changes["methods"] == 6  # the bytecode twin once, the row without an inclusive part not at all
    assert changes["labelled_both"] == 3 and changes["agree"] == 1 and changes["agree_share"] == 0.3333
    assert changes["changes"] == {"cpu -> disk": 1, "cpu -> none": 1, "none -> network": 1, "waiting -> cpu": 1}
    assert changes["libraries_most_changed"] == {"lib2": 2, "lib1": 1, "lib3": 1}


def test_native_samples() -> None:
    def frames(*names: str) -> list[JfrFrame]:
        return [JfrFrame(*n.rsplit(".", 1)) for n in names]

    assert jvm.native_resource(frames("java.util.zip.Inflater.inflateBytesBytes", "java.util.zip.Inflater.inflate")) == "cpu"
    assert jvm.native_resource(frames("sun.nio.fs.UnixNativeDispatcher.stat0", "java.nio.file.Files.size")) == "disk"
    assert jvm.native_resource(frames("sun.nio.ch.Net.accept", "sun.nio.ch.NioSocketImpl.accept")) == "network"
    assert jvm.native_resource(frames("sun.nio.ch.Net.poll", "sun.nio.ch.NioSocketImpl.park",
                                      "java.net.Socket$SocketInputStream.read")) is None  # SocketRead holds it
    assert jvm.native_resource(frames("jdk.internal.misc.Unsafe.park", "java.util.concurrent.locks.LockSupport.park")) is None
    assert jvm.native_resource(frames("sun.nio.ch.FileDispatcherImpl.write0", "sun.nio.ch.IOUtil.write",
                                      "sun.nio.ch.SinkChannelImpl.write")) == "waiting"  # a Pipe, not a file


def test_effective_period_follows_the_recording() -> None:
    samples = [JfrEvent("jdk.ExecutionSample", k * 10_000_000, 0.0, 1, ()) for k in range(20)]
    assert jvm.effective_period(samples, 0.002) == pytest.approx(0.010)  # asked 2 ms, got 10 ms
    assert jvm.effective_period(samples[:3], 0.002) == 0.002  # too few to tell
    sparse = [JfrEvent("jdk.ExecutionSample", k * 1_000_000_000, 0.0, 1, ()) for k in range(20)]
    assert jvm.effective_period(sparse, 0.002) == pytest.approx(jvm.MAX_PERIOD_FACTOR * 0.002)


def test_driver_and_generated_frames_are_excluded() -> None:
    assert jvm.excluded(JfrFrame("cpwork.JdkFiles", "main"))
    assert jvm.excluded(JfrFrame("java.lang.invoke.LambdaForm$MH", "invoke", hidden=True))
    assert jvm.excluded(JfrFrame("org.apache.spark.rdd.RDD", "iterator"))
    assert not jvm.excluded(JfrFrame("java.io.FileInputStream", "read"))


def test_compact_lines_reader() -> None:
    lines = [
        '{"f":0,"c":"java.io.FileInputStream","m":"read","d":"([B)I","l":115,"mod":"java.base","h":false}',
        '{"f":1,"c":"app.Main","m":"main","d":"()V","l":-1,"mod":null,"h":false}',
        '{"e":"jdk.FileRead","t":5,"d":1500000,"th":3,"s":[0,1]}',
    ]
    (event,) = jvm.read_jfr_lines(lines)
    assert event.duration_s == pytest.approx(0.0015)
    assert event.frames[0] == JfrFrame("java.io.FileInputStream", "read", 115, "java.base", False)
    assert event.frames[1].line is None


def test_rows_are_written_atomically(tmp_path: Path) -> None:
    out = tmp_path / "jvm.jsonl"
    assert jvm.write_jsonl_atomic([{"id": "a"}, {"id": "b"}], out) == 2
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["a", "b"]
    assert [p.name for p in tmp_path.iterdir()] == ["jvm.jsonl"]


REAL_PROGRAM = """
package cpwork;
import java.io.*;
public class Probe {
    static long spin(int n) { long x = 0; for (int i = 0; i < n; i++) x += Integer.toString(i).hashCode(); return x; }
    public static void main(String[] a) throws Exception {
        File f = new File(a[0], "probe.bin");
        byte[] block = new byte[64 * 1024];
        try (FileOutputStream out = new FileOutputStream(f)) { for (int i = 0; i < 512; i++) out.write(block); }
        try (FileInputStream in = new FileInputStream(f)) { while (in.read(block) > 0) { } }
        System.out.println(spin(3_000_000));
    }
}
"""


@pytest.mark.skipif(shutil.which("java") is None or shutil.which("javac") is None or shutil.which("jfr") is None,
                    reason="needs a JDK (java, javac, jfr)")
def test_real_recording(tmp_path: Path) -> None:
    src = tmp_path / "Probe.java"
    src.write_text(REAL_PROGRAM)
    classes = tmp_path / "classes"
    subprocess.run(["javac", "-d", str(classes), str(src), str(jvm.WORKLOAD_DIR / "JfrLines.java")],
                   check=True, capture_output=True, timeout=120)
    settings = tmp_path / "s.jfc"
    settings.write_text(jvm.jfc_settings())
    recording = tmp_path / "probe.jfr"
    done = jvm.record("cpwork.Probe", [str(classes)], [str(tmp_path)], recording, settings, timeout_s=120)
    assert done.returncode == 0, done.stderr
    lines = list(jvm.recording_events(recording, classes))
    printed = subprocess.run(["jfr", "print", "--json", "--stack-depth", "256", str(recording)],
                             check=True, capture_output=True, text=True, timeout=120).stdout
    via_json = [e for e in jvm.read_jfr_json(io.StringIO(printed)) if e.frames]

    def key(e: JfrEvent) -> tuple:
        return e.kind, tuple(f.qualified_name for f in e.frames)

    # Our converter and `jfr print --json` see the same events with the same stacks.
    assert sorted(map(key, lines)) == sorted(map(key, via_json))
    attribution = Attribution()
    assert attribution.add_recording(lines, "probe") > 0
    write = attribution.methods["java.io.FileOutputStream.write"]
    assert write.events >= 512 and write.seconds["disk"] > 0  # 512 blocks, and System.out is a file too
    # No socket or wait under a file write; an execution sample may land inside it now and then (the JNI call's
    # own CPU), but the disk time dominates: 32 MiB written, so that one such sample (a few ms) cannot outweigh
    # it (64 blocks took 2.7 ms, and one sample 3.4 ms, on a loaded machine).
    assert write.seconds["network"] == 0 and write.seconds["waiting"] == 0
    assert write.seconds["disk"] > write.seconds["cpu"]
    assert attribution.methods["java.io.FileInputStream.read"].seconds["disk"] > 0
    assert attribution.methods["cpwork.Probe.main"].seconds["disk"] > 0
    index = jvm.ClassIndex([])
    own = Attribution(library_of=index.library_name)
    own.add_recording(lines, "probe")
    # own work: the driver called the JDK's streams, so the writes are its disk time as well as theirs
    assert own.methods["cpwork.Probe.main"].own["disk"] > 0
    assert own.methods["java.io.FileOutputStream.write"].own["disk"] == pytest.approx(write.seconds["disk"])
    own_rows = {r["id"]: r for r in jvm.method_rows(own, index, None, [str(classes)])}
    assert own_rows and all(r["inclusive"]["events"] >= r["events"] for r in own_rows.values())
    rows = list(jvm.method_rows(attribution, index, None, [str(classes)]))
    assert not [r for r in rows if "inclusive" in r]
    assert not [r for r in rows if r["qualified_name"].startswith("cpwork.")]  # our driver gets no row
    if jvm.jdk_src_zip_available():
        row = next(r for r in rows if r["id"] == "java:java.io.FileOutputStream.write")
        assert row["origin"] == "source" and "write" in row["code"] and row["library"] == "java.base/java.io"
        assert row["licence"] == jvm.JDK_LICENCE and row["method"] == "jfr" and row["workloads"] == ["probe"]


def test_drivers_option_rejects_unknown_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="Nope"):
        jvm.run_all(tmp_path, drivers=["LibStore", "Nope"])
    monkeypatch.setattr(jvm.shutil, "which", lambda tool: f"/usr/bin/{tool}")  # no JDK needed to get here
    assert jvm.main(["--out", str(tmp_path), "--drivers", "LibNet2", "Nope"]) == 2
    assert "unknown driver Nope" in capsys.readouterr().err
    assert not (tmp_path / "jvm.jsonl").exists()


def test_every_driver_has_its_source_and_options_name_drivers() -> None:
    for name in jvm.WORKLOADS:
        assert (jvm.WORKLOAD_DIR / f"{name}.java").is_file(), name
    assert set(jvm.DRIVER_JVM_OPTIONS) <= set(jvm.WORKLOADS)
    sources = (jvm.WORKLOAD_DIR.parent / "SOURCES.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in sources for name in jvm.WORKLOADS)  # each driver documented
