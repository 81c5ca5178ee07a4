"""JVM frames (Java and Scala): class + method (+ file:line) -> the method's source and doc comment.

Where the source is looked for, in order: the user's source roots (directories, ``*-sources.jar``,
checkouts), the source jars in the local Maven / Ivy / Coursier caches, the JDK's ``src.zip``; and when no
source exists anywhere, the method's bytecode from the job's classpath (``classfile.py``), rendered as
text the code classifier reads.

The trace names the jars and directories (classpath, source roots, a frame's module), so each is read within
bounds (``crystalperf.core.limits``): regular files only, a jar's index and each entry up to a size limit, and
what is cached is bounded in bytes.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from crystalperf.core import limits
from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.core.attribution.sources import LocateContext
from crystalperf.core.attribution.sources.classfile import ClassFileError, describe_method, parse_class
from crystalperf.core.errors import BadInputError
from crystalperf.core.trace import Frame

MAX_CODE_LINES = 200  # a Scala class body standing in for its constructor can be huge
MAX_CACHED_TEXT = 256 << 20  # characters of source text a locator keeps for the frames that follow
_MASK_CACHED_UP_TO = 1 << 20  # longer texts are masked each time rather than kept in the cache
JVM_LANGUAGES = ("java", "scala", "unknown")
SOURCE_SUFFIXES = (".java", ".scala")


# ---------------------------------------------------------------------------------------------------
# Names: what the JVM calls a method -> what the source calls it.


@dataclass(frozen=True)
class JvmName:
    """A frame's class and method as they appear in source."""

    class_name: str  # binary name, e.g. org.apache.spark.rdd.RDD$$anonfun$1
    outer_class: str  # the top-level class whose file holds the code, e.g. org.apache.spark.rdd.RDD
    method: str  # source-level method name, '<init>' for constructors
    simple_class: str  # innermost named class, e.g. 'Entry' for Map$Entry, 'RDD' for RDD$$anonfun$1

    @property
    def package_path(self) -> str:
        return self.outer_class.rsplit(".", 1)[0].replace(".", "/") if "." in self.outer_class else ""


_SYNTHETIC_SUFFIX = re.compile(r"(\$adapted|\$mc[A-Za-z]*\$sp|\$\d+)+$")


def source_method_name(method: str) -> str:
    """``lambda$run$0`` -> run, ``$anonfun$collect$2`` -> collect, ``apply$mcV$sp`` -> apply,
    ``org$apache$spark$Foo$$bar`` -> bar: lambdas and Scala's synthetic names map to the method they
    were written in."""
    if method.startswith("lambda$"):
        parts = method.split("$")
        return parts[1] if len(parts) > 1 and parts[1] else method
    if method.startswith("$anonfun$"):
        rest = method[len("$anonfun$") :]
        method = rest.split("$", 1)[0] or rest
    if "$$" in method:
        method = method.rsplit("$$", 1)[1]
    stripped = _SYNTHETIC_SUFFIX.sub("", method)
    return stripped or method


def parse_jvm_name(qualified: str) -> JvmName | None:
    """Split ``pkg.Class$Inner.method``; None for names that are not JVM methods."""
    if "." not in qualified or "(" in qualified:
        return None
    class_name, method = qualified.rsplit(".", 1)
    # A hidden lambda class (``Foo$$Lambda$12/0x7f...``) has no file of its own: its code is in Foo.
    class_name = re.sub(r"\$\$Lambda.*$", "", class_name)
    if "/" in class_name or " " in class_name:
        return None
    outer = class_name.split("$", 1)[0]
    if not outer or outer.endswith("."):
        return None
    named = [p for p in class_name[len(outer) :].split("$") if p and not p.isdigit()]
    named = [p for p in named if p not in ("anon", "anonfun", "Lambda")]
    simple = named[-1] if named else outer.rsplit(".", 1)[-1]
    return JvmName(class_name, outer, source_method_name(method), simple)


# ---------------------------------------------------------------------------------------------------
# Finding a method in source text.


_NOT_CODE = re.compile(
    r'//[^\n]*|/\*.*?(?:\*/|\Z)|"""[\s\S]*?(?:"""|\Z)|"(?:\\.|[^"\\\n])*"?|\'(?:\\.|[^\'\\\n]){1,6}\'',
    re.S,
)


def mask_code(text: str) -> tuple[str, list[tuple[int, int]]]:
    """The text with comments and string/char literals blanked (same length, newlines kept), and the
    spans of ``/** ... */`` doc comments. Brace matching and name search then see only code."""
    return _mask_cached(text) if len(text) <= _MASK_CACHED_UP_TO else _mask(text)


@functools.lru_cache(maxsize=256)
def _mask_cached(text: str) -> tuple[str, list[tuple[int, int]]]:
    return _mask(text)


def _mask(text: str) -> tuple[str, list[tuple[int, int]]]:
    docs: list[tuple[int, int]] = []
    parts: list[str] = []
    last = 0
    for m in _NOT_CODE.finditer(text):
        token = m.group()
        if token.startswith("/**") and not token.startswith("/**/"):
            docs.append(m.span())
        parts.append(text[last : m.start()])
        parts.append(re.sub(r"[^\n]", " ", token))
        last = m.end()
    parts.append(text[last:])
    return "".join(parts), docs


def _match_brace(masked: str, open_at: int) -> int:
    depth = 0
    for k in range(open_at, len(masked)):
        if masked[k] == "{":
            depth += 1
        elif masked[k] == "}":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(masked)


def _match_paren(masked: str, open_at: int) -> int:
    depth = 0
    for k in range(open_at, len(masked)):
        if masked[k] in "([":
            depth += 1
        elif masked[k] in ")]":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(masked)


def _line_start(text: str, pos: int) -> int:
    return text.rfind("\n", 0, pos) + 1


def _indent(text: str, line_start: int) -> int:
    k = line_start
    while k < len(text) and text[k] in " \t":
        k += 1
    return k - line_start


@dataclass(frozen=True)
class Declaration:
    name: str
    start: int  # start of the declaration's first line (modifiers, annotations excluded)
    end: int
    first_line: int
    last_line: int


_JAVA_NOT_DECL = {"new", "return", "else", "throw", "case", "assert", "yield"}
_JAVA_KEYWORD_CALLS = {"if", "for", "while", "switch", "catch", "synchronized", "try", "return", "new"}


def java_declarations(masked: str, name: str | None = None) -> list[Declaration]:
    """Method and constructor declarations with a body (``name(...) [throws ...] {``)."""
    pattern = re.compile(r"\b(" + (re.escape(name) if name else r"[A-Za-z_$][\w$]*") + r")\s*\(")
    found = []
    for m in pattern.finditer(masked):
        ident = m.group(1)
        if ident in _JAVA_KEYWORD_CALLS:
            continue
        before = masked[max(0, m.start() - 200) : m.start()].rstrip()  # the tail is all we look at
        if not before or before[-1] in ".=(,!&|?:+-*/%<>^~[" and not before.endswith(">"):
            continue
        prev_word = re.search(r"([\w$]+)\s*$", before)
        if prev_word and prev_word.group(1) in _JAVA_NOT_DECL:
            continue
        close = _match_paren(masked, m.end() - 1)
        rest = masked[close:]
        header = re.match(r"\s*(throws\s+[\w$.,\s<>]+?)?\s*\{", rest)
        if not header:
            continue
        open_at = close + header.end() - 1
        end = _match_brace(masked, open_at)
        start = _line_start(masked, m.start())
        found.append(Declaration(ident, start, end, masked.count("\n", 0, start) + 1, masked.count("\n", 0, end) + 1))
    return found


def scala_declarations(masked: str, name: str | None = None) -> list[Declaration]:
    """``def`` declarations; a brace body is brace-matched, an expression body runs while lines are
    indented deeper than the ``def``."""
    pattern = re.compile(r"\bdef\s+(" + (re.escape(name) if name else r"[^\s(\[:=]+") + r")(?=[\s(\[:=])")
    found = []
    for m in pattern.finditer(masked):
        pos = m.end()
        while pos < len(masked) and masked[pos] in " \t\n([":
            if masked[pos] in "([":
                pos = _match_paren(masked, pos)
            else:
                pos += 1
        eq_or_brace = re.compile(r"[={]").search(masked, pos)
        start = _line_start(masked, m.start())
        if eq_or_brace is None:
            continue
        after = masked[eq_or_brace.end() :].lstrip(" \t\n")
        if masked[eq_or_brace.start()] == "{" or after.startswith("{"):
            open_at = masked.index("{", eq_or_brace.start())
            end = _match_brace(masked, open_at)
        else:
            base = _indent(masked, start)
            end = masked.find("\n", eq_or_brace.end())
            end = len(masked) if end < 0 else end
            while end < len(masked):
                nxt = masked.find("\n", end + 1)
                nxt = len(masked) if nxt < 0 else nxt
                line = masked[end + 1 : nxt]
                if line.strip() and _indent(masked, end + 1) <= base:
                    break
                end = nxt
        found.append(Declaration(m.group(1), start, end, masked.count("\n", 0, start) + 1, masked.count("\n", 0, end) + 1))
    return found


def _class_body(masked: str, simple: str, scala: bool) -> list[Declaration]:
    """A Scala constructor is its class body; Java constructors are found by name like methods."""
    if not scala:
        return java_declarations(masked, simple)
    m = re.search(r"\b(class|object|trait)\s+" + re.escape(simple) + r"\b", masked)
    if not m:
        return []
    brace = masked.find("{", m.end())
    start = _line_start(masked, m.start())
    end = _match_brace(masked, brace) if brace >= 0 else masked.find("\n", m.end())
    return [Declaration(simple, start, end, masked.count("\n", 0, start) + 1, masked.count("\n", 0, end) + 1)]


def _doc_before(text: str, masked: str, docs: Sequence[tuple[int, int]], start: int) -> str:
    """The ``/** */`` comment right above a declaration (annotations may sit between them)."""
    for doc_start, doc_end in reversed(docs):
        if doc_end > start:
            continue
        between = masked[doc_end:start]
        between = re.sub(r"@[\w$.]+(\s*\([^)]*\))?", " ", between)
        if between.strip():
            return ""
        body = text[doc_start + 3 : doc_end - 2]
        lines = [re.sub(r"^\s*\*\s?", "", line).rstrip() for line in body.splitlines()]
        return "\n".join(line for line in lines).strip()
    return ""


def extract_method(text: str, name: JvmName, line: int | None, scala: bool) -> tuple[str, str, int] | None:
    """(code, doc, first line) of the method a frame is in; overloads are told apart by the line."""
    masked, docs = mask_code(text)
    finder = scala_declarations if scala else java_declarations
    if name.method == "<init>":
        candidates = _class_body(masked, name.simple_class, scala)
    elif name.method == "<clinit>":
        return None
    else:
        candidates = finder(masked, name.method)
    chosen: Declaration | None = None
    if line is not None:
        containing = [d for d in candidates if d.first_line <= line <= d.last_line]
        if not containing:
            # Synthetic names we could not map (e.g. a Scala local function): the innermost
            # declaration around the line is where the code was written.
            containing = [d for d in finder(masked) if d.first_line <= line <= d.last_line]
        if containing:
            chosen = min(containing, key=lambda d: d.end - d.start)
    if chosen is None and candidates and (line is None or len(candidates) == 1):
        chosen = candidates[0]
    if chosen is None:
        return None
    lines = text[chosen.start : chosen.end].splitlines()[:MAX_CODE_LINES]
    return "\n".join(lines), _doc_before(text, masked, docs, chosen.start), chosen.first_line


# ---------------------------------------------------------------------------------------------------
# Where sources live.


class SourceArchive:
    """A directory, ``*-sources.jar`` or ``src.zip``: relative source path -> text. JDK ``src.zip`` puts
    a module directory first (``java.base/java/io/File.java``); paths are found with or without it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.is_dir = os.path.isdir(path)
        if not self.is_dir and not limits.is_regular_file(path):
            raise BadInputError("neither a directory nor a regular file", path)
        self._index: dict[str, str] | None = None
        self._zip: zipfile.ZipFile | None = None

    def _entries(self) -> dict[str, str]:
        if self._index is None:
            index: dict[str, str] = {}
            self._zip = limits.open_zip(self.path)
            for entry in self._zip.namelist():
                if entry.endswith(SOURCE_SUFFIXES):
                    index.setdefault(entry, entry)
                    head, _, tail = entry.partition("/")
                    if tail and "." in head:  # a JDK module directory such as java.base
                        index.setdefault(tail, entry)
            self._index = index
        return self._index

    def read(self, relative: str) -> tuple[str, str] | None:
        """(text, location) or None."""
        if self.is_dir:
            full = os.path.join(self.path, relative)
            if limits.is_regular_file(full):
                data = limits.read_regular(full, limits.MAX_SOURCE_FILE_BYTES, "source file")
                return data.decode("utf-8", errors="replace"), full
            return None
        entry = self._entries().get(relative)
        if entry is None or self._zip is None:
            return None
        data = limits.read_zip_entry(self._zip, entry, self.path, limits.MAX_SOURCE_FILE_BYTES)
        return data.decode("utf-8", errors="replace"), f"{self.path}!/{entry}"


def cache_source_jars(max_files: int = 200_000) -> dict[str, str]:
    """``<artifact>-<version>-sources.jar`` file name -> path, from the local Maven, Ivy and Coursier
    caches (walked once, bounded: a huge cache must not stall the analysis)."""
    home = Path.home()
    roots = [home / ".m2" / "repository", home / ".ivy2" / "cache", home / ".ivy2" / "local",
             home / ".cache" / "coursier", home / "Library" / "Caches" / "Coursier"]
    found: dict[str, str] = {}
    seen = 0
    for root in roots:
        if not root.is_dir():
            continue
        for dirpath, _, files in os.walk(root):
            for f in files:
                seen += 1
                if f.endswith("-sources.jar"):
                    found.setdefault(f, os.path.join(dirpath, f))
            if seen > max_files:
                return found
    return found


def jdk_src_zip() -> str | None:
    """The src.zip of the JDK that ``java`` on the PATH (or JAVA_HOME) belongs to, else any JDK's."""
    homes = []
    if os.environ.get("JAVA_HOME"):
        homes.append(Path(os.environ["JAVA_HOME"]))
    java = shutil.which("java")
    if java:
        homes.append(Path(os.path.realpath(java)).parent.parent)
    homes.extend(sorted(Path("/usr/lib/jvm").glob("*")) if Path("/usr/lib/jvm").is_dir() else [])
    for home in homes:
        for candidate in (home / "lib" / "src.zip", home / "src.zip"):
            if candidate.is_file():
                return str(candidate)
    return None


def _stamp(path: str) -> tuple[float, int]:
    st = os.stat(path)
    return st.st_mtime, st.st_size


@functools.lru_cache(maxsize=64)
def _open_archive(path: str, mtime: float, size: int) -> SourceArchive:
    """Archives are indexed once per process (the JDK's src.zip has ~15k entries), and again only if
    the file changed: a service analysing many traces must not re-read them for each."""
    archive = SourceArchive(path)
    if not archive.is_dir:
        archive._entries()
    return archive


class JvmLocator:
    """Java and Scala frames: source first (roots, build-tool caches, JDK), bytecode when no source."""

    name = "jvm"

    def __init__(self, *, use_caches: bool = True, use_jdk: bool = True, use_bytecode: bool = True) -> None:
        self.use_caches = use_caches
        self.use_jdk = use_jdk
        self.use_bytecode = use_bytecode
        self._archives: dict[str, SourceArchive | None] = {}
        self._texts: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._text_chars = 0
        self._classes: dict[str, object] = {}
        self._jar_entries: dict[str, frozenset[str] | None] = {}
        self._open_jars: dict[str, zipfile.ZipFile] = {}

    # -- archives -------------------------------------------------------------------------------

    def _archive(self, path: str, context: LocateContext) -> SourceArchive | None:
        if path not in self._archives:
            archive: SourceArchive | None = None
            try:
                archive = _open_archive(path, *_stamp(path))
            except (OSError, zipfile.BadZipFile, BadInputError, ValueError, EOFError, NotImplementedError) as exc:
                context.report(f"jvm: {path}: unreadable source archive ({type(exc).__name__}: {exc})")
                archive = None
            self._archives[path] = archive
        return self._archives[path]

    @staticmethod
    @functools.cache
    def _cache_jars() -> dict[str, str]:
        return cache_source_jars()

    @staticmethod
    @functools.cache
    def _jdk() -> str | None:
        return jdk_src_zip()

    def _source_archives(self, frame: Frame, context: LocateContext) -> Iterator[tuple[str, SourceArchive]]:
        for root in context.source_roots:
            archive = self._archive(root, context)
            if archive is not None:
                yield "source-root", archive
        if self.use_caches and frame.module:
            jar = os.path.basename(frame.module)
            if jar.endswith(".jar"):
                sources_jar = self._cache_jars().get(jar[: -len(".jar")] + "-sources.jar")
                if sources_jar:
                    archive = self._archive(sources_jar, context)
                    if archive is not None:
                        yield "build-cache", archive
        if self.use_jdk:
            src_zip = self._jdk()
            if src_zip:
                archive = self._archive(src_zip, context)
                if archive is not None:
                    yield "jdk-src", archive

    def _relative_paths(self, name: JvmName, frame: Frame, archive: SourceArchive) -> list[str]:
        pkg = name.package_path
        prefix = f"{pkg}/" if pkg else ""
        simple_outer = name.outer_class.rsplit(".", 1)[-1]
        files = [frame.file] if frame.file and frame.file.endswith(SOURCE_SUFFIXES) else []
        files += [simple_outer + suffix for suffix in SOURCE_SUFFIXES]
        paths = [prefix + f for f in dict.fromkeys(files)]
        if archive.is_dir:
            # A checkout: the package directory may sit under src/main/java, src/main/scala, ...
            paths += [f"src/main/{lang}/{p}" for p in list(paths) for lang in ("java", "scala")]
        return paths

    # -- the locator ----------------------------------------------------------------------------

    def locate(self, frame: Frame, context: LocateContext) -> FunctionSource | None:
        if frame.language not in JVM_LANGUAGES:
            return None
        name = parse_jvm_name(frame.name)
        if name is None:
            return None
        found = self._from_source(frame, name, context)
        if found is None and self.use_bytecode:
            found = self._from_bytecode(frame, name, context)
        return found

    def _from_source(self, frame: Frame, name: JvmName, context: LocateContext) -> FunctionSource | None:
        for kind, archive in self._source_archives(frame, context):
            for relative in self._relative_paths(name, frame, archive):
                key = (archive.path, relative)
                if key in self._texts:
                    hit = self._texts[key]
                else:
                    try:
                        hit = archive.read(relative)
                    except (OSError, zipfile.BadZipFile, KeyError, BadInputError, ValueError, EOFError,
                            NotImplementedError) as exc:
                        context.report(f"jvm: {archive.path}!/{relative}: unreadable ({exc})")
                        hit = None
                    size = len(hit[0]) if hit is not None else 0
                    if self._text_chars + size <= MAX_CACHED_TEXT:
                        self._texts[key] = hit
                        self._text_chars += size
                if hit is None:
                    continue
                text, location = hit
                scala = relative.endswith(".scala")
                extracted = extract_method(text, name, frame.line, scala)
                if extracted is None:
                    continue
                code, doc, first_line = extracted
                return FunctionSource(
                    qualified_name=f"{name.class_name}.{name.method}",
                    language="scala" if scala else "java",
                    code=code,
                    doc=doc,
                    origin=kind,
                    location=f"{location}:{first_line}",
                )
        return None

    # -- bytecode -------------------------------------------------------------------------------

    def _jar_has(self, jar: str, entry: str, context: LocateContext) -> bool:
        if jar not in self._jar_entries:
            try:
                if os.path.isdir(jar):
                    self._jar_entries[jar] = None  # a classes directory: checked per entry below
                else:
                    with limits.open_zip(jar) as z:
                        self._jar_entries[jar] = frozenset(n for n in z.namelist() if n.endswith(".class"))
            except (OSError, zipfile.BadZipFile, BadInputError, ValueError, EOFError, NotImplementedError) as exc:
                context.report(f"jvm: {jar}: unreadable jar ({type(exc).__name__}: {exc})")
                self._jar_entries[jar] = frozenset()
        entries = self._jar_entries[jar]
        if entries is None:
            return os.path.isfile(os.path.join(jar, entry))
        return entry in entries

    def _read_class(self, jar: str, entry: str) -> bytes:
        if os.path.isdir(jar):
            return limits.read_regular(Path(jar, entry), limits.MAX_ARCHIVE_ENTRY_BYTES, "class file")
        if jar not in self._open_jars:
            if len(self._open_jars) >= 64:  # bounded: file handles are a resource of the user's machine
                self._open_jars.pop(next(iter(self._open_jars))).close()
            self._open_jars[jar] = limits.open_zip(jar)
        return limits.read_zip_entry(self._open_jars[jar], entry, jar)

    def _from_bytecode(self, frame: Frame, name: JvmName, context: LocateContext) -> FunctionSource | None:
        entry = name.class_name.replace(".", "/") + ".class"
        jars = ([frame.module] if frame.module else []) + [p for p in context.classpath if p != frame.module]
        raw_method = frame.name.rsplit(".", 1)[1]
        for jar in jars:
            if not (jar.endswith(".jar") or os.path.isdir(jar)) or not os.path.exists(jar):
                continue
            if not self._jar_has(jar, entry, context):
                continue
            cache_key = f"{jar}!{entry}"
            try:
                if cache_key not in self._classes:
                    self._classes[cache_key] = parse_class(self._read_class(jar, entry))
                text = describe_method(self._classes[cache_key], raw_method, frame.line)  # type: ignore[arg-type]
            except (ClassFileError, OSError, zipfile.BadZipFile, KeyError, BadInputError, ValueError, EOFError,
                    NotImplementedError) as exc:
                context.report(f"jvm: {cache_key}: unreadable class ({type(exc).__name__}: {exc})")
                return None
            if text is None:
                return None
            return FunctionSource(
                qualified_name=f"{name.class_name}.{raw_method}",
                language="java" if frame.language != "scala" else "scala",
                code=text,
                origin="bytecode",
                location=cache_key,
            )
        return None
