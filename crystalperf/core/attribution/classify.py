"""The seam between the core and the resource classifiers.

The core hands a classifier a batch of :class:`FunctionSource` (code + documentation of a function
found in the stacks) and gets one :class:`ResourceVector` per function. The neural classifiers live in
``crystalperf.models`` (extra ``models``); the core ships a keyword classifier so that it works, and is
tested, without torch. Results are cached by function key and classifier version.

A classifier that knows how sure it is also implements :class:`ConfidentClassifier`: the report then shows each
top function's confidence, and a class under :data:`LOW_CONFIDENCE` as a guess.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Protocol, runtime_checkable

from crystalperf.core.resources import ResourceVector

log = logging.getLogger(__name__)

LANGUAGES = ("java", "scala", "python", "cpp")


@dataclass(frozen=True)
class FunctionSource:
    """A function located for a stack frame: what the classifiers read."""

    qualified_name: str
    language: str
    code: str
    doc: str = ""
    origin: str = "source"  # source | bytecode | op-doc | frame-name | ...
    location: str | None = None  # file path, jar!entry, ...
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        """Qualified name + content hash: stable across jobs, changes when the code changes."""
        digest = hashlib.sha256(f"{self.language}\0{self.code}\0{self.doc}".encode()).hexdigest()[:16]
        return f"{self.qualified_name}#{digest}"


@runtime_checkable
class ResourceClassifier(Protocol):
    """Anything that maps functions to <cpu, disk, network> vectors summing to 1, read by the analysis as the share
    of each function's busy time on each resource (the sparse classifier calibrates its probabilities to that)."""

    @property
    def version(self) -> str:
        """Identifies the model (weights) so cached results of another version are not reused."""
        ...

    def classify(self, functions: Sequence[FunctionSource]) -> list[ResourceVector]: ...


# A confidence under this makes a function's class a guess: of the calls a calibrated classifier makes at such a
# confidence, fewer than two in three name the measured class.
LOW_CONFIDENCE = 2 / 3


@runtime_checkable
class ConfidentClassifier(ResourceClassifier, Protocol):
    """A classifier that also says how likely the class behind each function's vector is right."""

    def confidences(self, functions: Sequence[FunctionSource]) -> list[float | None]:
        """Per function, the chance (0 to 1) that its class is the one measured; None where it cannot say."""
        ...


# Words that make a function's time go to the network or the disk. The keyword classifier counts
# them in sub-tokens of the code and the doc; CPU wins when neither appears (paper §3.4's baseline).
NETWORK_WORDS = frozenset(
    "socket sockets send sendall recv receive rpc http https channel channels netty nio connect connection "
    "connections url request response fetch fetcher shuffle client server transport tcp udp port host "
    "remote download upload grpc stub selector inet address packet datagram ssl tls handshake "
    "block manager blocktransfer".split()
)
DISK_WORDS = frozenset(
    "file files write writer writes read reader reads path paths flush disk fsync sync dir directory "
    "directories stream fileinputstream fileoutputstream open close seek mmap spill spills parquet "
    "orc csv storage store persist checkpoint tmp temp mkdir unlink rename filesystem fs hdfs s3 log "
    "logs record io".split()
)

_SUBTOKEN = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def subtokens(text: str) -> list[str]:
    """Split identifiers into lower-case sub-tokens: ``readFully_now`` -> ``read fully now``."""
    return [t.lower() for t in _SUBTOKEN.findall(text)]


class KeywordClassifier:
    """Counts network and disk words; CPU when neither appears. Fast, dependency-free, a baseline."""

    version = "keyword-1"

    def classify_one(self, function: FunctionSource) -> ResourceVector:
        tokens = subtokens(function.qualified_name) * 3 + subtokens(function.code) + subtokens(function.doc)
        network = sum(1 for t in tokens if t in NETWORK_WORDS)
        disk = sum(1 for t in tokens if t in DISK_WORDS)
        if network == 0 and disk == 0:
            return ResourceVector(1.0, 0.0, 0.0)
        total = network + disk
        # Even an I/O-flavoured function burns some CPU; keep a floor so one word is not a verdict.
        cpu = max(0.15, 1.0 - total / 8.0)
        rest = 1.0 - cpu
        return ResourceVector.of(cpu, rest * disk / total, rest * network / total)

    def classify(self, functions: Sequence[FunctionSource]) -> list[ResourceVector]:
        return [self.classify_one(f) for f in functions]


class FixedClassifier:
    """Returns given vectors by qualified-name prefix (tests, and users who know their functions)."""

    def __init__(self, rules: dict[str, ResourceVector], default: ResourceVector | None = None) -> None:
        self.rules = sorted(rules.items(), key=lambda kv: -len(kv[0]))
        self.default = default or ResourceVector(1.0, 0.0, 0.0)
        self.version = "fixed-" + hashlib.sha256(repr(self.rules).encode()).hexdigest()[:8]

    def classify(self, functions: Sequence[FunctionSource]) -> list[ResourceVector]:
        out = []
        for f in functions:
            for prefix, vec in self.rules:
                if f.qualified_name.startswith(prefix):
                    out.append(vec)
                    break
            else:
                out.append(self.default)
        return out


def default_cache_dir() -> Path:
    base = os.environ.get("CRYSTALPERF_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "crystalperf"
    )
    return Path(base)


class CachedClassifier:
    """Wraps a classifier with a JSON-lines cache keyed by function key and classifier version (the file's name).

    A row holds a function's vector and, once asked for (:meth:`confidences`), the inner classifier's confidence
    in it; a row without one (written before it was asked for) is still read, and its confidence is asked again."""

    def __init__(self, inner: ResourceClassifier, cache_dir: Path | None = None) -> None:
        self.inner = inner
        self.version = inner.version
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", inner.version)
        self.path = (cache_dir or default_cache_dir()) / f"classified-{safe}.jsonl"
        self._memo: dict[str, ResourceVector] = {}
        self._confidence: dict[str, float] = {}
        self._loaded = False
        self.hits = 0
        self.misses = 0

    def _load(self) -> None:
        self._loaded = True
        try:
            with self.path.open(encoding="utf-8") as fh:
                for line in fh:
                    try:
                        row = json.loads(line)
                        self._memo[row["key"]] = ResourceVector.of(row["cpu"], row["disk"], row["network"])
                    except (ValueError, KeyError, TypeError):
                        continue  # a torn last line from a crashed writer is not worth failing over
                    confidence = row.get("confidence")
                    # a number from 0 to 1: json reads NaN, and a bool is an int
                    if type(confidence) in (int, float) and 0 <= confidence <= 1:
                        self._confidence[row["key"]] = float(confidence)
        except OSError:
            pass

    def classify(self, functions: Sequence[FunctionSource]) -> list[ResourceVector]:
        if not self._loaded:
            self._load()
        missing = [f for f in dict.fromkeys(functions) if f.key not in self._memo]
        self.hits += len(functions) - len(missing)
        self.misses += len(missing)
        if missing:
            vectors = self.inner.classify(missing)
            new_rows = []
            for f, v in zip(missing, vectors, strict=True):
                self._memo[f.key] = v
                new_rows.append({"key": f.key, "cpu": v.cpu, "disk": v.disk, "network": v.network})
            self._append(new_rows)
        return [self._memo[f.key] for f in functions]

    def confidences(self, functions: Sequence[FunctionSource]) -> list[float | None]:
        """The inner classifier's confidences (None throughout when it gives none), asked once per function and
        kept in the function's row: a later line of the same key adds it to the vector an earlier one holds."""
        if not isinstance(self.inner, ConfidentClassifier):
            return [None] * len(functions)
        if not self._loaded:
            self._load()
        missing = [f for f in dict.fromkeys(functions) if f.key not in self._confidence]
        if missing:
            vectors = self.classify(missing)
            new_rows = []
            for f, v, c in zip(missing, vectors, self.inner.confidences(missing), strict=True):
                if c is not None:
                    self._confidence[f.key] = float(c)
                    new_rows.append({"key": f.key, "cpu": v.cpu, "disk": v.disk, "network": v.network,
                                     "confidence": float(c)})
            self._append(new_rows)
        return [self._confidence.get(f.key) for f in functions]

    def _append(self, rows: Iterable[dict[str, object]]) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                for row in rows:
                    fh.write(json.dumps(row) + "\n")
        except OSError as exc:  # a read-only home must not stop an analysis
            log.debug("classification cache not written: %s", exc)


def available_classifiers() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group="crystalperf.classifiers")}


def load_classifier(name: str | None = None, *, cache: bool = True) -> ResourceClassifier:
    """The named classifier, or the best one installed: the sparse one (numpy, in the base install) when its
    weights are present, then the paper's neural pair (``models`` extra), else the keyword classifier. The
    one returned names itself by its ``version``, which the report shows."""
    eps = available_classifiers()
    order = [name] if name else ["sparse", "neural", "keyword"]
    last_error: Exception | None = None
    for candidate in order:
        if candidate == "keyword" and candidate not in eps:
            classifier: ResourceClassifier = KeywordClassifier()
        elif candidate in eps:
            try:
                factory = eps[candidate].load()
                classifier = factory()
            except Exception as exc:  # missing torch / weights: fall back, say why
                last_error = exc
                log.info("classifier %r unavailable: %s", candidate, exc)
                continue
        else:
            if name:
                raise ValueError(f"unknown classifier {name!r} (installed: {', '.join(sorted(eps)) or 'none'})")
            continue
        return CachedClassifier(classifier) if cache else classifier
    if name:
        raise ValueError(f"classifier {name!r} could not be loaded: {last_error}")
    return KeywordClassifier()
