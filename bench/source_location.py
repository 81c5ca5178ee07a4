"""Speed and coverage of the source locators.

1. Every frame of a recorded trace (default: the bundled Spark demo trace): how much of the sampled time
   resolves to a located function, by how it was found (source root, build cache, JDK src.zip, bytecode).
2. Cold frames/s on N methods drawn from a jar of the trace's classpath (bytecode) and from the JDK's
   src.zip (source), each with a fresh locator.

    python bench/source_location.py [TRACE] [--n 2000]
"""

from __future__ import annotations

import argparse
import random
import time
import zipfile
from collections import Counter
from pathlib import Path

from crystalperf.core.attribution.sources import FrameResolver, LocateContext, installed_locators
from crystalperf.core.attribution.sources.classfile import parse_class
from crystalperf.core.attribution.sources.jvm import JvmLocator, jdk_src_zip
from crystalperf.core.trace import Frame, load_trace

HERE = Path(__file__).resolve().parent


def trace_coverage(path: Path) -> None:
    trace = load_trace(path)
    samples = trace.samples
    if samples is None:
        print(f"{path}: no samples")  # noqa: T201
        return
    context = LocateContext.from_environment(trace.environment)
    resolver = FrameResolver(installed_locators(), context)
    started = time.perf_counter()
    per_stack = {s: resolver.resolve_stack(stack, samples.frames) for s, stack in enumerate(samples.stacks)}
    elapsed = time.perf_counter() - started
    weight: Counter[str] = Counter()
    for _, _, stack, count in samples.rows():
        found = per_stack.get(stack)
        weight[found[1].origin if found else "not located"] += count
    total = sum(weight.values())
    print(f"{path.name}: {len(samples.frames)} frames, {len(samples.stacks)} stacks, {total} samples; "  # noqa: T201
          f"resolved in {elapsed:.2f} s")
    for origin, n in weight.most_common():
        print(f"  {origin:14} {n:6d} samples  {100 * n / total:5.1f} %")  # noqa: T201
    if context.problems:
        print(f"  {len(context.problems)} problems, e.g. {context.problems[0]}")  # noqa: T201


def bytecode_speed(jar: str, n: int) -> None:
    rng = random.Random(0)
    with zipfile.ZipFile(jar) as z:
        names = [e for e in z.namelist() if e.endswith(".class")]
        frames = []
        for entry in rng.sample(names, min(len(names), n)):
            cls = parse_class(z.read(entry))
            methods = [m for m in cls.methods if m.code]
            if methods:
                frames.append(Frame(name=f"{cls.name}.{rng.choice(methods).name}", language="java", module=jar))
    locator = JvmLocator(use_caches=False, use_jdk=False)
    context = LocateContext()
    started = time.perf_counter()
    found = sum(locator.locate(f, context) is not None for f in frames)
    elapsed = time.perf_counter() - started
    print(f"bytecode ({Path(jar).name}): {len(frames)} frames, {found} located, "  # noqa: T201
          f"{len(frames) / elapsed:.0f} frames/s cold")


def jdk_speed(n: int) -> None:
    src = jdk_src_zip()
    if src is None:
        print("no JDK src.zip")  # noqa: T201
        return
    import re

    rng = random.Random(0)
    frames = []
    with zipfile.ZipFile(src) as z:
        entries = [e for e in z.namelist() if e.startswith("java.base/java/") and e.endswith(".java")]
        for entry in rng.sample(entries, min(len(entries), n)):
            text = z.read(entry).decode("utf-8", "replace")
            methods = re.findall(r"\n\s+(?:public|protected|private)[\w\s<>,\[\]]*?\s(\w+)\s*\([^)]*\)\s*(?:throws[\w\s,.]+)?\{",
                                 text)
            if methods:
                cls = entry.split("/", 1)[1][: -len(".java")].replace("/", ".")
                frames.append(Frame(name=f"{cls}.{rng.choice(methods)}", language="java"))
    locator = JvmLocator(use_caches=False, use_bytecode=False)
    context = LocateContext()
    started = time.perf_counter()
    found = sum(locator.locate(f, context) is not None for f in frames)
    elapsed = time.perf_counter() - started
    print(f"JDK src.zip: {len(frames)} frames, {found} located, {len(frames) / elapsed:.0f} frames/s cold "  # noqa: T201
          "(includes indexing src.zip once)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(HERE.parent / "tests/data/spark-demo-trace.json.gz"))
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    trace_coverage(Path(args.trace))
    jars = [p for p in load_trace(args.trace).environment.classpath if "spark-core" in p and Path(p).is_file()]
    if jars:
        bytecode_speed(jars[0], args.n)
    jdk_speed(args.n)


if __name__ == "__main__":
    main()
