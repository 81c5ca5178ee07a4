"""Candidates for the hand-labelled framework evaluation set: every distinct Spark, Flink and TensorFlow
function on the stacks of recorded traces, with the code and doc crystalperf's locators give it.

The text is what the classifiers read at analysis time: each frame is located with the installed source
locators and the trace's own classpath (the JVM locator falls back to bytecode, as on a user's machine with no
Spark/Flink sources; TensorFlow ops get their ``tf.raw_ops`` documentation); a frame no locator resolves is
classified by its name (``frame-name``), as ``crystalperf.core.attribution.vectors`` does. Only frames whose name the
training corpus can never contain (``corpus.FORBIDDEN``) are kept. Anonymous-function and generated variants
of one method are one candidate (``function_key``).

    python -m crystalperf.models.framework_collect OUT.jsonl TRACE... [--remap OLD=NEW]

A TRACE is a crystalperf trace, a Flink reporter part, or a bare ``samples`` table (JSON, maybe gzipped).
Labelling is by hand (``crystalperf/models/evaldata/README.md``); this only gathers what is to be labelled.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.core.attribution.sources import FrameResolver, LocateContext, installed_locators, is_native
from crystalperf.core.attribution.sources.jvm import source_method_name
from crystalperf.models.frameworks import framework_of as framework_of

_LAMBDA_CLASS = re.compile(r"\$\$Lambda[^.]*")
_NUMBERED = re.compile(r"(CodegenStage|anon\$|anonfun\$|_)\d+")
_OP_SUFFIX = re.compile(r"^(_MklNative|_Mkl|_Fused|_)+")


def function_key(name: str) -> str:
    """One key for the variants of one method: lambdas and Scala anonymous functions map to the method they
    are written in, a Scala object's ``Foo$.bar`` to ``Foo.bar``, numbered generated classes to one name,
    oneDNN-rewritten TensorFlow ops to the public op."""
    if name.startswith("tensorflow.op."):
        return "tensorflow.op." + _OP_SUFFIX.sub("", name[len("tensorflow.op."):])
    name = _LAMBDA_CLASS.sub("", name)
    if "." not in name:
        return name
    owner, method = name.rsplit(".", 1)
    owner = _NUMBERED.sub(r"\1N", owner).replace("$.", ".").rstrip("$")
    method = _NUMBERED.sub(r"\1N", source_method_name(method))
    return f"{owner}.{method}"


@dataclass
class Seen:
    frame: tr.Frame
    samples: int = 0
    top_samples: int = 0
    state: Counter[str] | None = None


def _load(path: Path) -> tuple[tr.StackSamples | None, list[str]]:
    """The samples and classpath of a trace, a Flink reporter part, or a bare samples table."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    document = json.loads(raw)
    if isinstance(document, dict) and document.get("format") == "crystalperf-flink-metrics":
        from crystalperf.integrations.flink.assemble import read_metrics

        trace = read_metrics(path)
        return trace.samples, list(trace.environment.classpath)
    if isinstance(document, dict) and "format" in document:
        return None, []  # another hook file (a PyFlink worker's CPU/io rows): no stacks of its own
    if isinstance(document, dict) and "schema_version" in document:
        trace = tr.load_trace(path)
        return trace.samples, list(trace.environment.classpath)
    return tr.StackSamples.model_validate(document), []


def frames_seen(samples: tr.StackSamples) -> Iterator[Seen]:
    """Each frame of the table with the samples of the stacks it is on (and of those it tops)."""
    seen = [Seen(frame) for frame in samples.frames]
    for stack_index, count in zip(samples.stack, samples.count, strict=False):
        stack = samples.stacks[stack_index]
        state = samples.states[stack_index] if stack_index < len(samples.states) else ""
        for position, frame_index in enumerate(dict.fromkeys(stack)):
            entry = seen[frame_index]
            entry.samples += count
            if position == 0:
                entry.top_samples += count
            entry.state = entry.state or Counter()
            entry.state[state or "unknown"] += count
    return iter(seen)


def _remapped(classpath: Sequence[str], remaps: Sequence[tuple[str, str]]) -> list[str]:
    out = []
    for entry in classpath:
        for old, new in remaps:
            if entry.startswith(old):
                entry = new + entry[len(old):]
        out.append(entry)
    return out


def collect(paths: Sequence[Path], remaps: Sequence[tuple[str, str]] = ()) -> list[dict[str, object]]:
    """One row per distinct framework function (by ``function_key``), the most-sampled variant's text."""
    best: dict[str, dict[str, object]] = {}
    locators = installed_locators()
    for path in paths:
        samples, classpath = _load(path)
        if samples is None:
            continue
        resolver = FrameResolver(locators, LocateContext(classpath=_remapped(classpath, remaps)))
        for index, entry in enumerate(frames_seen(samples)):
            frame = entry.frame
            framework = framework_of(frame.name)
            if framework is None or is_native(frame) or entry.samples == 0:
                continue
            for old, new in remaps:
                if frame.file and frame.file.startswith(old):
                    frame = frame.model_copy(update={"file": new + frame.file[len(old):]})
            located = resolver.resolve_frame(index, frame)
            function = located or FunctionSource(
                qualified_name=frame.name, language=frame.language if frame.language in
                ("java", "scala", "python", "cpp") else "unknown", code=frame.name, origin="frame-name")
            key = function_key(frame.name)
            previous = best.get(key)
            if previous is not None:
                previous["samples"] = int(str(previous["samples"])) + entry.samples
                if previous["origin"] != "frame-name" or function.origin == "frame-name":
                    continue
            best[key] = {
                "id": f"{framework}:{key}",
                "framework": framework,
                "qualified_name": function.qualified_name,
                "frame": frame.name,
                "language": function.language,
                "origin": function.origin,
                "code": function.code,
                "doc": function.doc,
                "declared_vector": function.extra.get("vector"),
                "samples": entry.samples + (int(str(previous["samples"])) if previous else 0),
                "top_samples": entry.top_samples,
                "states": dict(entry.state or {}),
                "source_trace": str(path),
            }
    return sorted(best.values(), key=lambda row: str(row["id"]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crystalperf.models.framework_collect")
    parser.add_argument("output", type=Path)
    parser.add_argument("traces", type=Path, nargs="+")
    parser.add_argument("--remap", action="append", default=[], metavar="OLD=NEW",
                        help="rewrite a classpath/file prefix recorded on another machine")
    args = parser.parse_args(argv)
    remaps = [tuple(r.split("=", 1)) for r in args.remap if "=" in r]
    rows = collect(args.traces, [(old, new) for old, new in remaps])
    with args.output.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    counts = Counter(str(r["framework"]) for r in rows)
    sys.stdout.write(f"{len(rows)} candidates: {dict(counts)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
