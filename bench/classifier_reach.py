"""What a JVM method reaches, read from the jars' bytecode (a prototype, not shipped): does knowing the methods a
method calls two and three calls deep help the sparse classifier tell an I/O-bound method from a computing one?

A measured label is inclusive (a method is disk-bound when what it calls is) while the sparse classifier reads
the method's own text, which names only its direct calls. Here each JVM method of the kept corpus (and of the
framework set) is found in the class files — the JDK's (``jimage extract``), ``/usr/share/java``, and for the
framework set only, the pyspark and apache-flink wheels' jars — and its calls are followed breadth-first, by the
constant pool's owner and name, up to ``--depth`` calls deep. The callees two or more calls deep become extra
features (``reach:Owner.member``, ``reachm:member``), and the sparse classifier is trained with and without them on
the same split. Selection would be by validation only; the test and framework rows are printed for the record.

Usage: python bench/classifier_reach.py --work DIR [--measured data/measured] [--depth 3]
       [--framework-jars DIR ...]   (pyspark/jars, pyflink/lib: only to look up the framework set's methods)
"""

from __future__ import annotations

import argparse
import zipfile
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from crystalperf.core.attribution.sources import classfile
from crystalperf.models import features as feature_module
from crystalperf.models import framework_eval as fe
from crystalperf.models.evaluate import measured_scores, to_function
from crystalperf.models.measure.jvm import extract_jdk_classes
from crystalperf.models.measured import measured_splits
from crystalperf.models.sparse_train import train_sparse_classifier

JDK_MODULES = ("java.base", "java.logging", "java.net.http", "java.sql", "java.xml", "java.naming", "jdk.httpserver",
               "java.management", "jdk.zipfs", "java.desktop", "java.rmi", "jdk.net")
MAX_VISITED = 600


class ClassIndex:
    """Dotted class name -> its class file, over extracted JDK module trees and jars; parsed on demand."""

    def __init__(self, trees: Iterable[Path], jars: Iterable[Path]) -> None:
        self.where: dict[str, tuple[Path, str | None]] = {}
        self.parsed: dict[str, classfile.ClassFile | None] = {}
        for tree in trees:
            for path in tree.rglob("*.class"):
                parts = path.relative_to(tree).parts[1:]  # drop the module directory
                self.where.setdefault(".".join(parts)[: -len(".class")], (path, None))
        for jar in jars:
            try:
                with zipfile.ZipFile(jar) as archive:
                    for entry in archive.namelist():
                        if entry.endswith(".class") and not entry.startswith("META-INF/"):
                            self.where.setdefault(entry[: -len(".class")].replace("/", "."), (jar, entry))
            except (OSError, zipfile.BadZipFile):
                continue

    def get(self, name: str) -> classfile.ClassFile | None:
        if name not in self.parsed:
            found = self.where.get(name)
            parsed = None
            if found is not None:
                path, entry = found
                try:
                    if entry is None:
                        data = path.read_bytes()
                    else:
                        with zipfile.ZipFile(path) as archive:
                            data = archive.read(entry)
                    parsed = classfile.parse_class(data)
                except (OSError, KeyError, zipfile.BadZipFile, classfile.ClassFileError, IndexError, ValueError):
                    parsed = None
            self.parsed[name] = parsed
        return self.parsed[name]


def calls(cls: classfile.ClassFile, method: classfile.Method) -> list[tuple[str, str]]:
    out = []
    try:
        for _pc, op, operands in classfile.instructions(method.code):
            if op in (0xB6, 0xB7, 0xB8, 0xB9):
                owner, name, _desc = cls.member(int.from_bytes(operands[:2], "big"))
                out.append((owner, name))
    except (classfile.ClassFileError, IndexError, ValueError):
        pass
    return out


def reached(index: ClassIndex, qualified_name: str, depth: int) -> list[tuple[int, str, str]] | None:
    """(depth, owner, member) of the calls reachable from every overload of the method; None when not found."""
    owner, _, name = qualified_name.rpartition(".")
    cls = index.get(owner)
    if cls is None or not any(m.name == name for m in cls.methods):
        return None
    out: list[tuple[int, str, str]] = []
    seen = {(owner, name)}
    queue = deque([(owner, name, 0)])
    while queue and len(seen) < MAX_VISITED:
        current_owner, current_name, level = queue.popleft()
        current = index.get(current_owner)
        if current is None or level >= depth:
            continue
        for method in current.methods:
            if method.name != current_name or not method.code:
                continue
            for callee in calls(current, method):
                if callee in seen:
                    continue
                seen.add(callee)
                out.append((level + 1, *callee))
                queue.append((callee[0], callee[1], level + 1))
    return out


# The JDK's own entry points to a device or a wait (the classes whose native calls read, write, connect or park).
PRIMITIVES = {
    "disk": ("java.io.FileInputStream", "java.io.FileOutputStream", "java.io.RandomAccessFile",
             "sun.nio.ch.FileChannelImpl", "sun.nio.fs.UnixNativeDispatcher", "java.io.UnixFileSystem",
             "sun.nio.ch.FileDispatcherImpl", "java.nio.file.Files"),
    "network": ("sun.nio.ch.SocketChannelImpl", "sun.nio.ch.NioSocketImpl", "sun.nio.ch.SocketDispatcher",
                "sun.nio.ch.Net", "sun.nio.ch.DatagramChannelImpl", "java.net.Socket", "java.net.ServerSocket",
                "java.net.InetAddress", "sun.nio.ch.ServerSocketChannelImpl"),
    "waiting": ("java.util.concurrent.locks.LockSupport", "java.lang.Object.wait", "java.lang.Thread.sleep",
                "java.lang.Thread.join", "java.util.concurrent.locks.Condition", "java.util.concurrent.Future.get",
                "java.util.concurrent.BlockingQueue"),
}


def reach_features(calls_reached: list[tuple[int, str, str]], mode: str = "callees") -> list[str]:
    feats = []
    for level, owner, member in calls_reached:
        if mode == "primitives":
            for kind, prefixes in PRIMITIVES.items():
                if any(owner == p or f"{owner}.{member}" == p for p in prefixes):
                    feats.append(f"reach-io:{kind}:{min(level, 4)}")
            continue
        if level < 2:
            continue  # the method's own calls are in its rendering already
        simple = owner.rsplit(".", 1)[-1].split("$")[-1]
        feats += [f"reach:{simple}.{member}", f"reachm:{member}"]
    return sorted(set(feats)) if mode == "primitives" else feats


def score(classifier: Any, rows: list[dict[str, Any]]) -> str:
    probs = classifier.predict_proba4([to_function(r) for r in rows])
    s = measured_scores(probs, rows)["4-class"]
    return f"{s['accuracy']:.3f} / {s['macro_f1']:.3f} (n={len(rows)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measured", type=Path, default=Path("data/measured"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--framework-jars", type=Path, nargs="*", default=[])
    parser.add_argument("--mode", choices=("callees", "primitives"), default="callees",
                        help="callees: every callee two or more deep; primitives: which of the JDK's device and wait "
                        "entry points are reached, and how deep")
    args = parser.parse_args()
    jdk = args.work / "jdk"
    jdk.mkdir(parents=True, exist_ok=True)
    extract_jdk_classes(JDK_MODULES, jdk)
    system_jars = sorted({p.resolve() for p in Path("/usr/share/java").glob("*.jar")})
    framework_jars = sorted(p for d in args.framework_jars for p in d.glob("*.jar"))
    index = ClassIndex([jdk], [*system_jars, *framework_jars])
    print(f"{len(index.where)} classes indexed")

    train, val, test = measured_splits(args.measured)
    framework = fe.load_set()
    extra: dict[str, list[str]] = {}
    names = {r["qualified_name"] for r in train + val + test if r["language"] in ("java", "scala")}
    names |= {f.qualified_name for f in framework if f.language in ("java", "scala")}
    for name in sorted(names):
        result = reached(index, name, args.depth)
        if result is not None:
            extra[name] = reach_features(result, args.mode)
    print(f"JVM methods: {len(names)}, found in the class files: {len(extra)}, "
          f"with callees two or more deep: {sum(1 for v in extra.values() if v)}")

    plain = feature_module.feature_strings
    jvm = {s: [r for r in rows if r["language"] in ("java", "scala")] for s, rows in (("val", val), ("test", test))}
    print(f"with a feature: {sum(1 for v in extra.values() if v)}")
    for label, use in (("without reach features", False), (f"with {args.mode} reach features (depth {args.depth})", True)):
        def with_reach(function: Any, use: bool = use) -> list[str]:
            return plain(function) + (extra.get(function.qualified_name, []) if use else [])

        feature_module.feature_strings = with_reach  # hashed_features looks it up at call time
        classifier = train_sparse_classifier(train, val, args.work / label.split()[0], weight_decay=1e-4)
        framework_probs = classifier.predict_proba4([f.source() for f in framework])
        y = np.asarray([fe.CLASSES.index(f.label) for f in framework])
        seam = fe.seam_classes(framework, framework_probs)
        per = {k: float(np.mean((seam == y)[[f.framework == k for f in framework]])) for k in fe.FRAMEWORKS}
        print(f"{label}: validation macro-F1 {classifier.config['training']['validation_macro_f1']:.3f}; "
              f"val JVM {score(classifier, jvm['val'])}; test all {score(classifier, test)}; "
              f"test JVM {score(classifier, jvm['test'])}; framework set (seam) {np.mean(seam == y):.3f} "
              + " ".join(f"{k} {v:.3f}" for k, v in per.items()), flush=True)
    feature_module.feature_strings = plain


if __name__ == "__main__":
    main()
