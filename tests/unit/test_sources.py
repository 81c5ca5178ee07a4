"""Source locators on real files: the stdlib, a Java + Scala tree, a jar compiled here with javac, a
src.zip-style archive, and broken inputs that must be reported per frame without aborting."""

from __future__ import annotations

import inspect
import json.decoder
import shutil
import subprocess
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from crystalperf.core.attribution.sources import FrameResolver, LocateContext, installed_locators
from crystalperf.core.attribution.sources.classfile import ClassFileError, describe_method, parse_class
from crystalperf.core.attribution.sources.jvm import JvmLocator, parse_jvm_name, source_method_name
from crystalperf.core.attribution.sources.python import PythonLocator
from crystalperf.core.trace import Frame

JAVA = textwrap.dedent("""\
    package demo.io;

    import java.io.FileOutputStream;
    import java.io.IOException;
    import java.net.Socket;

    public class Copier {
        private final Socket socket;

        public Copier(Socket socket) {
            this.socket = socket;
        }

        /** Sends the buffer to the peer over the socket. */
        public void send(byte[] buf) throws IOException {
            socket.getOutputStream().write(buf);
        }

        /**
         * Writes the buffer to a file, {@code times} times.
         */
        @Deprecated
        public void send(byte[] buf, String path, int times) throws IOException {
            try (FileOutputStream out = new FileOutputStream(path)) {
                for (int i = 0; i < times; i++) {
                    out.write(buf);
                }
            }
        }

        public Runnable checksum(byte[] buf) {
            return () -> {
                long sum = 0;
                for (byte b : buf) { sum = sum * 31 + b; }
                System.out.println("sum " + sum + " {");
            };
        }
    }
    """)

SCALA = textwrap.dedent("""\
    package demo.io

    import java.io.FileOutputStream

    /** Writes partitions to local files. */
    class PartitionWriter(path: String) {
      private val out = new FileOutputStream(path)

      /** Appends one record to the partition file. */
      def write(record: Array[Byte]): Unit = {
        out.write(record)
        out.flush()
      }

      /** Sums the record's bytes. */
      def checksum(record: Array[Byte]): Long =
        record.foldLeft(0L)((acc, b) => acc * 31 + b)

      def close(): Unit = out.close()
    }

    object PartitionWriter {
      /** Opens a writer for the given path. */
      def apply(path: String): PartitionWriter = new PartitionWriter(path)
    }
    """)


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# --- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [
    ("lambda$checksum$0", "checksum"),
    ("$anonfun$collect$2", "collect"),
    ("$anonfun$collect$2$adapted", "collect"),
    ("apply$mcV$sp", "apply"),
    ("org$apache$spark$util$Utils$$copyStream", "copyStream"),
    ("write", "write"),
])
def test_synthetic_method_names_map_to_the_written_method(raw: str, expected: str) -> None:
    assert source_method_name(raw) == expected


def test_jvm_names_find_the_top_level_class_file() -> None:
    name = parse_jvm_name("org.apache.spark.rdd.RDD$$anonfun$collect$1.apply")
    assert name is not None and name.outer_class == "org.apache.spark.rdd.RDD" and name.package_path == "org/apache/spark/rdd"
    lam = parse_jvm_name("org.apache.spark.sql.execution.FileSourceScanExec$$Lambda$3873/0x00007f4f591fea60.<init>")
    assert lam is not None and lam.outer_class == "org.apache.spark.sql.execution.FileSourceScanExec"
    assert parse_jvm_name("main") is None


# --- Python ----------------------------------------------------------------------------------------


def test_stdlib_function_with_its_docstring() -> None:
    lines, start = inspect.getsourcelines(json.decoder.JSONDecoder.raw_decode)
    frame = Frame(name="json.decoder.JSONDecoder.raw_decode", file=json.decoder.__file__, line=start + len(lines) - 2,
                  language="python")
    found = PythonLocator().locate(frame, LocateContext())
    assert found is not None and found.origin == "source"
    assert found.code.lstrip().startswith("def raw_decode") and "scan_once" in found.code
    assert "Decode a JSON document" in found.doc


def test_decorators_and_nested_functions(tmp_path: Path) -> None:
    source = textwrap.dedent('''\
        import functools

        @functools.lru_cache(maxsize=None)
        def outer(path):
            """Reads the file."""
            def inner(chunk):
                """Hashes one chunk."""
                return hash(chunk)
            with open(path) as f:
                return [inner(c) for c in f]
        ''')
    path = tmp_path / "mod.py"
    path.write_text(source)
    locator, context = PythonLocator(), LocateContext()
    inner = locator.locate(Frame(name="mod.outer.<locals>.inner", file=str(path), line=8, language="python"), context)
    outer = locator.locate(Frame(name="mod.outer", file=str(path), line=10, language="python"), context)
    assert inner is not None and inner.doc == "Hashes one chunk." and inner.code.lstrip().startswith("def inner")
    assert outer is not None and outer.code.startswith("@functools.lru_cache") and outer.doc == "Reads the file."
    module_level = locator.locate(Frame(name="mod.<module>", file=str(path), line=1, language="python"), context)
    assert module_level is None and not context.problems


def test_moved_files_are_found_under_source_roots_and_missing_ones_reported(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "job.py").write_text("def run():\n    return 1\n")
    context = LocateContext(source_roots=[str(tmp_path)])
    moved = Frame(name="job.run", file="/opt/container/app/job.py", line=2, language="python")
    found = PythonLocator().locate(moved, context)
    assert found is not None and found.location == f"{tmp_path / 'app' / 'job.py'}:1"
    missing = Frame(name="gone.f", file=str(tmp_path / "gone.py"), line=3, language="python")
    assert PythonLocator().locate(missing, context) is None
    assert any("gone.py" in p and "missing" in p for p in context.problems)


def test_unparseable_python_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("def f(:\n    pass\n")
    context = LocateContext()
    assert PythonLocator().locate(Frame(name="broken.f", file=str(path), line=1, language="python"), context) is None
    assert any("broken.py" in p and "SyntaxError" in p for p in context.problems)


def test_code_imported_from_a_zip_archive_is_read_from_the_archive(tmp_path: Path) -> None:
    # PySpark's workers import pyspark from pyspark.zip; --py-files ships zips: the frame's file goes through one
    archive = tmp_path / "lib" / "deps.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("deps/serializers.py", 'def dump(rows, out):\n    """Pickles the rows."""\n    '
                                            'return out.write(repr(rows))\n')
    locator, context = PythonLocator(), LocateContext()
    found = locator.locate(Frame(name="deps.serializers.dump", file=f"{archive}/deps/serializers.py", line=3,
                                 language="python"), context)
    assert found is not None and found.doc == "Pickles the rows." and "out.write" in found.code
    assert found.location == f"{archive}/deps/serializers.py:1"
    # recorded elsewhere, found under a source root, the archive included
    moved = Frame(name="deps.serializers.dump", file="/opt/spark/lib/deps.zip/deps/serializers.py", line=3,
                  language="python")
    assert PythonLocator().locate(moved, LocateContext(source_roots=[str(tmp_path)])) is not None
    absent = Frame(name="deps.gone.f", file=f"{archive}/deps/gone.py", line=1, language="python")
    assert locator.locate(absent, context) is None
    assert any("gone.py" in p and "missing" in p for p in context.problems)
    (tmp_path / "bad.zip").write_bytes(b"PK\x05\x06 not an archive")
    damaged = Frame(name="m.f", file=f"{tmp_path / 'bad.zip'}/m.py", line=1, language="python")
    assert locator.locate(damaged, context) is None
    assert any("bad.zip" in p and "unreadable archive" in p for p in context.problems)


def test_a_frozen_standard_library_module_is_read_from_the_standard_librarys_source() -> None:
    # CPython 3.11 on freezes os, posixpath, codecs and the import system: their frames' file is "<frozen os>"
    stdlib_os = Path(sysconfig.get_paths()["stdlib"], "os.py")  # inspect cannot read a frozen module's source
    walk_line = next(n for n, text in enumerate(stdlib_os.read_text().splitlines(), 1) if text.startswith("def walk("))
    locator, context = PythonLocator(), LocateContext()
    walk = locator.locate(Frame(name="os.walk", file="<frozen os>", line=walk_line + 3, language="python"), context)
    assert walk is not None and walk.code.lstrip().startswith("def walk") and "scandir" in walk.code
    assert walk.location is not None and walk.location.endswith(f"os.py:{walk_line}")
    # another Python's lines: the function is found by its name
    elsewhere = locator.locate(Frame(name="os.walk", file="<frozen os>", line=1, language="python"), context)
    assert elsewhere is not None and elsewhere.code == walk.code
    package = locator.locate(Frame(name="importlib.invalidate_caches", file="<frozen importlib>", line=None,
                                   language="python"), context)
    assert package is not None and "invalidate_caches" in package.code
    for file in ("<frozen no_such_module>", "<string>", "<frozen ../../etc/passwd>"):
        assert locator.locate(Frame(name="m.f", file=file, line=3, language="python"), context) is None


def test_a_lambda_frame_is_the_lambda_and_the_def_around_one_is_the_def(tmp_path: Path) -> None:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent('''\
        slug = udf(lambda url: url.strip("/").upper(), "string")

        def top(rows):
            """The largest rows."""
            return sorted(rows, key=lambda r: r[1])[:3]
        '''))
    locator, context = PythonLocator(), LocateContext()
    module_lambda = locator.locate(Frame(name="__main__.<lambda>", file=str(path), line=1, language="python"), context)
    assert module_lambda is not None and "upper()" in module_lambda.code and module_lambda.doc == ""
    inner_lambda = locator.locate(Frame(name="job.top.<locals>.<lambda>", file=str(path), line=5, language="python"),
                                  context)
    assert inner_lambda is not None and inner_lambda.location == f"{path}:5"
    around = locator.locate(Frame(name="job.top", file=str(path), line=5, language="python"), context)
    assert around is not None and around.doc == "The largest rows." and around.location == f"{path}:3"


# --- JVM source ------------------------------------------------------------------------------------


@pytest.fixture
def source_tree(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "src/main/java/demo/io").mkdir(parents=True)
    (root / "src/main/scala/demo/io").mkdir(parents=True)
    (root / "src/main/java/demo/io/Copier.java").write_text(JAVA)
    (root / "src/main/scala/demo/io/PartitionWriter.scala").write_text(SCALA)
    return root


def _locate(frame: Frame, context: LocateContext, **kw: bool):
    return JvmLocator(use_caches=False, use_jdk=False, **kw).locate(frame, context)


def test_java_overloads_are_told_apart_by_line(source_tree: Path) -> None:
    context = LocateContext(source_roots=[str(source_tree)])
    net = _locate(Frame(name="demo.io.Copier.send", file="Copier.java", line=_line_of(JAVA, "getOutputStream"),
                        language="java"), context)
    disk = _locate(Frame(name="demo.io.Copier.send", file="Copier.java", line=_line_of(JAVA, "out.write(buf)"),
                         language="java"), context)
    assert net is not None and "getOutputStream" in net.code and net.doc == "Sends the buffer to the peer over the socket."
    assert disk is not None and "FileOutputStream" in disk.code and "Writes the buffer to a file" in disk.doc
    assert net.origin == disk.origin == "source-root"
    assert net.key != disk.key  # two overloads, two classification-cache entries


def test_java_lambda_maps_to_its_enclosing_method_and_braces_in_strings_do_not_confuse(source_tree: Path) -> None:
    context = LocateContext(source_roots=[str(source_tree)])
    lam = _locate(Frame(name="demo.io.Copier.lambda$checksum$0", file="Copier.java",
                        line=_line_of(JAVA, "sum * 31"), language="java"), context)
    assert lam is not None and lam.code.lstrip().startswith("public Runnable checksum")
    assert lam.code.rstrip().endswith("}") and "private final Socket" not in lam.code
    ctor = _locate(Frame(name="demo.io.Copier.<init>", file="Copier.java", line=_line_of(JAVA, "this.socket ="),
                         language="java"), context)
    assert ctor is not None and "public Copier(Socket socket)" in ctor.code


def test_scala_methods_anonfuns_and_companion_objects(source_tree: Path) -> None:
    context = LocateContext(source_roots=[str(source_tree)])
    write = _locate(Frame(name="demo.io.PartitionWriter.write", language="scala"), context)
    assert write is not None and write.language == "scala" and "out.flush()" in write.code
    assert write.doc == "Appends one record to the partition file."
    anon = _locate(Frame(name="demo.io.PartitionWriter.$anonfun$checksum$1", file="PartitionWriter.scala",
                         line=_line_of(SCALA, "foldLeft"), language="scala"), context)
    assert anon is not None and anon.code.strip().startswith("def checksum") and "foldLeft" in anon.code
    assert "def close" not in anon.code  # the expression body ends where the indentation does
    companion = _locate(Frame(name="demo.io.PartitionWriter$.apply", language="scala"), context)
    assert companion is not None and "new PartitionWriter(path)" in companion.code
    assert companion.doc == "Opens a writer for the given path."


def test_src_zip_style_archive_with_module_directories(tmp_path: Path) -> None:
    archive = tmp_path / "src.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("demo.module/demo/io/Copier.java", JAVA)
    context = LocateContext(source_roots=[str(archive)])
    found = _locate(Frame(name="demo.io.Copier.send", file="Copier.java", line=_line_of(JAVA, "getOutputStream"),
                          language="java"), context)
    assert found is not None and found.location.startswith(f"{archive}!/demo.module/demo/io/Copier.java:")


def test_the_jdk_src_zip_when_installed() -> None:
    locator = JvmLocator(use_caches=False)
    if locator._jdk() is None:
        pytest.skip("no JDK src.zip on this machine (Debian: openjdk-17-source)")
    found = locator.locate(Frame(name="java.io.BufferedOutputStream.flushBuffer", language="java"), LocateContext())
    assert found is not None and found.origin == "jdk-src" and "out.write(buf, 0, count)" in found.code


# --- JVM bytecode ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("javac") is None or shutil.which("jar") is None:
        pytest.skip("no JDK (javac, jar) on this machine")
    work = tmp_path_factory.mktemp("javac")
    (work / "src/demo/io").mkdir(parents=True)
    (work / "src/demo/io/Copier.java").write_text(JAVA)
    subprocess.run(["javac", "-g", "-d", str(work / "classes"), str(work / "src/demo/io/Copier.java")], check=True)
    jar = work / "copier.jar"
    subprocess.run(["jar", "cf", str(jar), "-C", str(work / "classes"), "."], check=True)
    return jar


def test_without_source_the_method_is_read_from_the_jar(compiled_jar: Path) -> None:
    context = LocateContext(classpath=[str(compiled_jar)])
    disk = _locate(Frame(name="demo.io.Copier.send", file="Copier.java", line=_line_of(JAVA, "out.write(buf)"),
                         language="java"), context)
    assert disk is not None and disk.origin == "bytecode" and disk.location == f"{compiled_jar}!demo/io/Copier.class"
    assert "new FileOutputStream();" in disk.code and "FileOutputStream.write();" in disk.code
    assert "while (loop)" in disk.code and "Socket" not in disk.code.split("{", 1)[1]
    net = _locate(Frame(name="demo.io.Copier.send", file="Copier.java", line=_line_of(JAVA, "getOutputStream"),
                        language="java", module=str(compiled_jar)), LocateContext())
    assert net is not None and "Socket.getOutputStream();" in net.code and "OutputStream.write();" in net.code
    lam = _locate(Frame(name="demo.io.Copier.lambda$checksum$0", language="java"), context)
    assert lam is not None and '"sum "' not in lam.code and "while (loop)" in lam.code
    assert not context.problems


def test_bytecode_renders_as_java_the_code_classifier_can_parse(compiled_jar: Path) -> None:
    with zipfile.ZipFile(compiled_jar) as z:
        cls = parse_class(z.read("demo/io/Copier.class"))
    assert cls.name == "demo.io.Copier" and cls.source_file == "Copier.java"
    text = describe_method(cls, "send", _line_of(JAVA, "getOutputStream"))
    assert text is not None and text.splitlines()[1] == "void send(byte[] p0) {"
    assert text.count("{") == text.count("}")
    assert describe_method(cls, "noSuchMethod") is None


def test_a_source_root_wins_over_bytecode(source_tree: Path, compiled_jar: Path) -> None:
    context = LocateContext(classpath=[str(compiled_jar)], source_roots=[str(source_tree)])
    found = _locate(Frame(name="demo.io.Copier.send", file="Copier.java", line=_line_of(JAVA, "getOutputStream"),
                          language="java"), context)
    assert found is not None and found.origin == "source-root"


def test_corrupt_jars_and_class_files_are_reported_per_frame(tmp_path: Path, compiled_jar: Path) -> None:
    corrupt = tmp_path / "corrupt.jar"
    corrupt.write_bytes(b"PK\x03\x04 not really a zip")
    truncated = tmp_path / "truncated.jar"
    with zipfile.ZipFile(compiled_jar) as src, zipfile.ZipFile(truncated, "w") as dst:
        dst.writestr("demo/io/Copier.class", src.read("demo/io/Copier.class")[:200])
    with pytest.raises(ClassFileError):
        parse_class(b"\xca\xfe\xba\xbe\x00")
    context = LocateContext(classpath=[str(corrupt), str(truncated)], source_roots=[str(tmp_path / "corrupt.jar")])
    frames = [Frame(name="demo.io.Copier.send", language="java"), Frame(name="demo.io.Copier.checksum", language="java")]
    resolver = FrameResolver([JvmLocator(use_caches=False, use_jdk=False)], context)
    assert resolver.resolve_stack([0, 1], frames) is None
    assert any("corrupt.jar" in p for p in context.problems)
    assert any("truncated.jar" in p and "ClassFileError" in p for p in context.problems)


def test_installed_locators_scan_down_past_native_frames(compiled_jar: Path) -> None:
    names = {loc.name for loc in installed_locators()}
    assert {"jvm", "python"} <= names
    frames = [Frame(name="libc.so.6!write", language="native"),
              Frame(name="demo.io.Copier.send", line=_line_of(JAVA, "out.write(buf)"), language="java")]
    resolver = FrameResolver(installed_locators(), LocateContext(classpath=[str(compiled_jar)]))
    found = resolver.resolve_stack([0, 1], frames)
    assert found is not None and found[0] == 1 and found[1].origin == "bytecode"


def test_a_file_name_of_many_archive_like_parts_costs_a_bounded_look(monkeypatch: pytest.MonkeyPatch) -> None:
    import crystalperf.core.limits as limits

    looked: list[str] = []
    real = limits.is_regular_file
    monkeypatch.setattr(limits, "is_regular_file", lambda p: looked.append(str(p)) or real(p))
    hostile = Frame(name="m.f", file="/" + "a.zip/" * 20_000 + "m.py", line=1, language="python")
    context = LocateContext()
    assert PythonLocator().locate(hostile, context) is None
    assert len(looked) < 200
