"""The labelled training corpus: functions with their documentation, labelled cpu/disk/network.

Functions come from sources reachable offline: the JDK's ``src.zip`` (Java + Javadoc), the Python
standard library and the unpacked sources of chosen PyPI packages. Labels come from
``labelling_rules.txt`` (module/class/function patterns with a reason each, as the paper's authors
labelled by what a library is for); functions no rule claims are left out. The split into
train/val/test is by library so that names seen in training do not leak into the evaluation.

Output: JSONL, one record per function, see :data:`RECORD_FIELDS`.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import logging
import re
import sys
import tarfile
import zipfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from crystalperf.models import LABELS
from crystalperf.models.frameworks import FORBIDDEN as FORBIDDEN

log = logging.getLogger(__name__)

RECORD_FIELDS = ("id", "library", "language", "qualified_name", "code", "doc", "label", "split")
RULES_PATH = Path(__file__).resolve().parent / "labelling_rules.txt"
# Function-level rules for the Python I/O libraries, derived from the strace-verified subset:
# they agree with the measurements far better, but a model trained on them fails the unmistakable cases (see
# docs/models.md, "What we tried and why it lost"); ``crystalperf train --rules`` builds the corpus with them.
FUNCTION_RULES_PATH = Path(__file__).resolve().parent / "labelling_rules_functions.txt"
JDK_SRC_ZIPS = (
    Path("/usr/lib/jvm/java-17-openjdk-amd64/lib/src.zip"),
    Path("/usr/lib/jvm/openjdk-17/src.zip"),
)
MIN_LINES = 4
MIN_SUBTOKENS = 12
MAX_CODE_CHARS = 6000
MAX_PER_LIBRARY = 600
# The PyPI packages whose sources the shipped corpus was built from (sdists, pinned so that a rebuild
# reproduces it): networking clients/servers, file access, archives, crypto, math, serialization.
PYPI_PACKAGES = (
    "PySocks==1.7.1",
    "aiofiles==25.1.0",
    "cbor2==6.3.0",
    "ecdsa==0.19.2",
    "fsspec==2026.9.0",
    "ftputil==5.2.0",
    "h11==0.16.0",
    "httpcore==1.0.9",
    "httpx==0.28.1",
    "jsonlines==4.0.0",
    "mpmath==1.4.1",
    "paramiko==5.1.0",
    "pure-python-adb==0.3.0.dev0",
    "pyaes==1.6.1",
    "pyasn1==0.6.5",
    "pyftpdlib==2.2.0",
    "requests==2.34.2",
    "rsa==4.9.1",
    "s3transfer==0.19.3",
    "simplejson==4.3.0",
    "smbprotocol==1.17.0",
    "sortedcontainers==2.4.0",
    "sqlitedict==2.1.0",
    "tftpy==0.8.7",
    "urllib3==2.8.0",
    "websocket_client==1.9.2",
    "zipp==4.1.2",
)


@dataclass(frozen=True)
class Rule:
    label: str
    pattern: re.Pattern[str]
    reason: str


def load_rules(path: Path = RULES_PATH) -> list[Rule]:
    """Parse the rules file: ``LABEL | REGEX | REASON`` per line, first match wins."""
    rules = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) != 3 or parts[0] not in (*LABELS, "skip") or not parts[2]:
            raise ValueError(f"{path}:{number}: expected 'LABEL | REGEX | REASON', got {raw!r}")
        rules.append(Rule(parts[0], re.compile(parts[1]), parts[2]))
    return rules


def label_for(language: str, qualified_name: str, rules: list[Rule]) -> str | None:
    """The label of the first matching rule, or None (unlabelled or explicitly skipped)."""
    key = f"{language}:{qualified_name}"
    for rule in rules:
        if rule.pattern.search(key):
            return None if rule.label == "skip" else rule.label
    return None


# --------------------------------------------------------------------------------------------------
# Extraction


@dataclass
class Extracted:
    library: str
    language: str
    qualified_name: str
    code: str
    doc: str


def clean_javadoc(comment: str) -> str:
    """``/** ... */`` to plain text: markers and leading asterisks removed, whitespace collapsed."""
    body = comment.strip()
    body = body[3:] if body.startswith("/**") else body.lstrip("/*")
    body = body[:-2] if body.endswith("*/") else body
    lines = [re.sub(r"^\s*\*?\s?", "", line) for line in body.splitlines()]
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def _java_functions(source: bytes, fallback_package: str) -> Iterator[tuple[str, str, str]]:
    from crystalperf.models.sources import parser_for

    tree = parser_for("java").parse(source)
    package = fallback_package
    for child in tree.root_node.children:
        if child.type == "package_declaration":
            for sub in child.named_children:
                if sub.type in ("scoped_identifier", "identifier"):
                    package = sub.text.decode()
    type_kinds = {"class_declaration", "interface_declaration", "enum_declaration", "record_declaration"}

    def walk(node: object, owners: list[str]) -> Iterator[tuple[str, str, str]]:
        for child in node.named_children:  # type: ignore[attr-defined]
            if child.type in type_kinds:
                name = child.child_by_field_name("name")
                body = child.child_by_field_name("body")
                if name is not None and body is not None:
                    yield from walk(body, [*owners, name.text.decode()])
            elif child.type in ("method_declaration", "constructor_declaration"):
                name = child.child_by_field_name("name")
                if name is None or child.child_by_field_name("body") is None:
                    continue
                prev = child.prev_named_sibling
                doc = ""
                if prev is not None and prev.type == "block_comment" and prev.text.startswith(b"/**"):
                    doc = clean_javadoc(prev.text.decode(errors="replace"))
                qualified = ".".join([package, *owners, name.text.decode()])
                yield qualified, child.text.decode(errors="replace"), doc

    yield from walk(tree.root_node, [])


def java_library(qualified_name: str) -> str:
    """A JDK 'library' is its package: packages are the units the split keeps apart."""
    parts = qualified_name.split(".")[:-1]
    package = []
    for part in parts:
        if not part[:1].islower():
            break
        package.append(part)
    return "jdk:" + ".".join(package[:4])


def extract_jdk(src_zip: Path) -> Iterator[Extracted]:
    """Every method and constructor with a body in the JDK's ``src.zip``."""
    with zipfile.ZipFile(src_zip) as zf:
        for info in zf.infolist():
            name = info.filename
            if not name.endswith(".java") or "/test/" in name or name.endswith("module-info.java"):
                continue
            rel = name.split("/", 1)[1] if name.count("/") > 1 else name
            fallback_package = ".".join(rel.split("/")[:-1])
            try:
                for qualified, code, doc in _java_functions(zf.read(info), fallback_package):
                    yield Extracted(java_library(qualified), "java", qualified, code, doc)
            except Exception as exc:  # one odd file must not stop the corpus
                log.debug("skipping %s: %s", name, exc)


def _python_functions(source: str, module: str) -> Iterator[tuple[str, str, str]]:
    tree = ast.parse(source)
    lines = source.splitlines()

    def walk(node: ast.AST, owners: list[str]) -> Iterator[tuple[str, str, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from walk(child, [*owners, child.name])
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([child.lineno, *[d.lineno for d in child.decorator_list]]) - 1
                code = "\n".join(lines[start : child.end_lineno])
                doc = re.sub(r"\s+", " ", ast.get_docstring(child) or "").strip()
                yield ".".join([module, *owners, child.name]), code, doc

    yield from walk(tree, [])


def python_module_name(path: Path, root: Path) -> str:
    """Dotted module name: climbs while the parent directory is a package (or up to ``root``)."""
    parts = [path.stem] if path.stem != "__init__" else []
    parent = path.parent
    while parent != root and (parent / "__init__.py").exists():
        parts.insert(0, parent.name)
        parent = parent.parent
    if parent == root and parent != path.parent:
        pass
    return ".".join(parts)


_SKIP_DIRS = re.compile(
    r"(^|/)(tests?|testing|docs?|examples?|benchmarks?|site-packages|dist-packages|idle_test|__pycache__|build)(/|$)"
)


def extract_python_tree(
    root: Path, library_of: dict[str, str] | None = None, prefix: str = "py"
) -> Iterator[Extracted]:
    """Functions of every ``.py`` under ``root`` (tests, docs and examples excluded)."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if (
            _SKIP_DIRS.search(rel)
            or path.name.startswith("test_")
            or path.name in ("setup.py", "conftest.py")
        ):
            continue
        module = python_module_name(path, root)
        if not module or FORBIDDEN.search(module):
            continue
        top = module.split(".")[0]
        library = f"{prefix}:{(library_of or {}).get(top, top)}"
        try:
            source = path.read_text(encoding="utf-8")
            for qualified, code, doc in _python_functions(source, module):
                yield Extracted(library, "python", qualified, code, doc)
        except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
            log.debug("skipping %s: %s", path, exc)


def unpack_sdists(sdist_dir: Path, into: Path) -> list[Path]:
    """Unpack downloaded sdists/wheels once; returns the unpacked roots."""
    roots = []
    for archive in sorted(sdist_dir.iterdir()):
        target = into / re.sub(r"(\.tar\.gz|\.zip|\.whl)$", "", archive.name)
        if not archive.name.endswith((".tar.gz", ".zip", ".whl")):
            continue
        if not target.exists():
            target.mkdir(parents=True)
            if archive.name.endswith(".tar.gz"):
                with tarfile.open(archive) as tar:
                    tar.extractall(target, filter="data")
            else:
                with zipfile.ZipFile(archive) as zf:
                    zf.extractall(target)
        roots.append(target)
    return roots


def download_pypi_sources(into: Path, packages: Iterable[str] = PYPI_PACKAGES) -> None:
    """``pip download --no-deps --no-binary NAME`` of each package not yet in ``into``: the package's sdist,
    while its build backend (which pip runs to read the sdist's metadata) may come as a wheel; with
    ``--no-binary :all:`` every backend was built from source too, about two minutes a package."""
    import subprocess

    into.mkdir(parents=True, exist_ok=True)
    have = {re.sub(r"[-_.]+", "-", p.name.lower()) for p in into.iterdir()}
    for spec in packages:
        name, _, version = spec.partition("==")
        # Names and versions compared as normalised above ("cbor2-6.3.0.tar.gz" -> "cbor2-6-3-0-tar-gz").
        if any(h.startswith(re.sub(r"[-_.]+", "-", f"{name.lower()}-{version}-")) for h in have):
            continue
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                name,
                "-d",
                str(into),
                spec,
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            log.warning("could not download %s: %s", spec, result.stderr.strip().splitlines()[-1:])


def _package_roots(unpacked: Path) -> Iterator[Path]:
    """Directories that hold top-level packages inside an unpacked sdist (``src/`` layouts too)."""
    for candidate in [unpacked, *unpacked.glob("*"), *unpacked.glob("*/src")]:
        if candidate.is_dir() and any(
            (d / "__init__.py").exists() for d in candidate.iterdir() if d.is_dir()
        ):
            yield candidate


# --------------------------------------------------------------------------------------------------
# Building


_SUBTOKEN = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def _substantial(code: str) -> bool:
    return code.count("\n") + 1 >= MIN_LINES and len(_SUBTOKEN.findall(code)) >= MIN_SUBTOKENS


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def label_functions(functions: Iterable[Extracted], rules: list[Rule]) -> list[dict[str, str]]:
    """Label, filter and deduplicate; caps each library so no single package dominates a class."""
    records: list[dict[str, str]] = []
    seen: set[str] = set()
    per_library: Counter[str] = Counter()
    for fn in functions:
        if FORBIDDEN.search(fn.qualified_name) or FORBIDDEN.search(fn.library):
            continue
        label = label_for(fn.language, fn.qualified_name, rules)
        if label is None or not _substantial(fn.code) or len(fn.code) > MAX_CODE_CHARS:
            continue
        digest = hashlib.sha256(fn.code.encode()).hexdigest()[:16]
        if digest in seen:
            continue
        seen.add(digest)
        records.append(
            {
                "id": f"{fn.library}:{fn.qualified_name}#{digest[:8]}",
                "library": fn.library,
                "language": fn.language,
                "qualified_name": fn.qualified_name,
                "code": fn.code,
                "doc": fn.doc,
                "label": label,
            }
        )
        per_library[fn.library] += 1
    # Deterministic cap per library (by content hash, not by file order).
    by_library: dict[str, list[dict[str, str]]] = defaultdict(list)
    for r in records:
        by_library[r["library"]].append(r)
    capped = []
    for library in sorted(by_library):
        rows = sorted(by_library[library], key=lambda r: _stable_hash(r["id"]))
        capped.extend(rows[:MAX_PER_LIBRARY])
    return capped


def balance(records: list[dict[str, str]], max_ratio: float = 1.5) -> list[dict[str, str]]:
    """Down-sample the larger classes to at most ``max_ratio`` x the smallest (deterministically)."""
    counts = Counter(r["label"] for r in records)
    if len(counts) < len(LABELS):
        return records
    limit = int(min(counts.values()) * max_ratio)
    kept: list[dict[str, str]] = []
    for label in LABELS:
        rows = sorted((r for r in records if r["label"] == label), key=lambda r: _stable_hash(r["id"]))
        kept.extend(rows[:limit])
    return kept


def split_by_library(records: list[dict[str, str]], test: float = 0.2, val: float = 0.1) -> None:
    """Assign ``split`` per library: each class gets held-out libraries of its own."""
    majority: dict[str, Counter[str]] = defaultdict(Counter)
    for r in records:
        majority[r["library"]][r["label"]] += 1
    libraries_by_label: dict[str, list[str]] = defaultdict(list)
    for library, counts in majority.items():
        libraries_by_label[counts.most_common(1)[0][0]].append(library)
    assignment: dict[str, str] = {}
    for libraries in libraries_by_label.values():
        total = sum(sum(majority[lib].values()) for lib in libraries)
        taken = {"test": 0, "val": 0}
        for library in sorted(libraries, key=_stable_hash):
            size = sum(majority[library].values())
            if taken["test"] < test * total and len(libraries) > 2:
                split = "test"
            elif taken["val"] < val * total and len(libraries) > 2:
                split = "val"
            else:
                split = "train"
            if split != "train":
                taken[split] += size
            assignment[library] = split
    for r in records:
        r["split"] = assignment[r["library"]]


def build_corpus(
    out_path: Path,
    *,
    jdk_src_zip: Path | None = None,
    python_stdlib: Path | None = None,
    pypi_dir: Path | None = None,
    doctext_path: Path | None = None,
    rules_path: Path = RULES_PATH,
) -> list[dict[str, str]]:
    """Extract, label, balance and split; writes JSONL to ``out_path`` (and the doc text dump)."""
    rules = load_rules(rules_path)
    sources: list[Iterable[Extracted]] = []
    jdk = jdk_src_zip or next((p for p in JDK_SRC_ZIPS if p.exists()), None)
    if jdk is not None:
        sources.append(extract_jdk(jdk))
    else:
        log.warning("no JDK src.zip found (apt-get install openjdk-17-source); corpus without Java")
    stdlib = (
        python_stdlib
        or Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    )
    if stdlib.is_dir():
        sources.append(extract_python_tree(stdlib, prefix="pystd"))
    if pypi_dir is not None and pypi_dir.is_dir():
        for unpacked in unpack_sdists(pypi_dir, pypi_dir / "unpacked"):
            for root in _package_roots(unpacked):
                dist = re.sub(r"-[0-9][^-]*$", "", unpacked.name).lower()
                sources.append(extract_python_tree(root, prefix=f"pypi:{dist}"))

    all_docs: list[str] = []

    def tee() -> Iterator[Extracted]:
        for source in sources:
            for fn in source:
                if fn.doc and not FORBIDDEN.search(fn.qualified_name):
                    all_docs.append(fn.doc)
                yield fn

    records = balance(label_functions(tee(), rules))
    split_by_library(records)
    records.sort(key=lambda r: r["id"])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    if doctext_path is not None:
        buf = io.StringIO()
        for doc in dict.fromkeys(all_docs):
            buf.write(doc + "\n")
        doctext_path.write_text(buf.getvalue(), encoding="utf-8")
    return records


def load_corpus(path: Path) -> list[dict[str, str]]:
    """Read a corpus JSONL file."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def summarize(records: list[dict[str, str]]) -> dict[str, dict[str, int]]:
    """Counts per (split, language) and label: what docs/models.md reports."""
    table: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(LABELS, 0))
    for r in records:
        table[f"{r.get('split', '?')}/{r['language']}"][r["label"]] += 1
        table[f"all/{r['language']}"][r["label"]] += 1
        table["all"][r["label"]] += 1
    return dict(table)
