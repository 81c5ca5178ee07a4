"""Hashed sparse features of a located function, for the sparse classifier (numpy inference, no torch).

What a function does shows in what it calls and the types it touches more than in its own identifiers:
``out.write(packet)`` on a ``Socket``'s stream, ``fsync``, ``LockSupport.park``. The features read only
what the core's locators give (qualified name, code or its bytecode rendering, doc) and need no parser:
regular expressions find calls (``owner.member(`` in source, ``Owner.member();`` in the bytecode text
``crystalperf.core.attribution.sources.classfile`` renders) and type names, so the same features come out of Java,
Scala, Python and C++ text. Each feature is a string hashed (crc32, stable across processes and
platforms) into one of ``2 ** HASH_BITS`` buckets; counts are log-scaled and the vector L2-normalised.
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from collections.abc import Iterable

from crystalperf.core.attribution.classify import DISK_WORDS, NETWORK_WORDS, FunctionSource

HASH_BITS = 18
MAX_CODE_CHARS = 8000  # past this a function's text adds cost, not signal
MAX_DOC_CHARS = 2000

_SUBTOKEN = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+")
_QUALIFIED_CALL = re.compile(r"([A-Za-z_$][\w$]*)\s*(?:\.|::|->)\s*([A-Za-z_$][\w$]*)\s*\(")
_BARE_CALL = re.compile(r"(?<![\w$.:>])([A-Za-z_$][\w$]*)\s*\(")
_NEW = re.compile(r"\bnew\s+([A-Za-z_$][\w$.]*)")
_TYPE = re.compile(r"\b([A-Z][\w$]*[a-z][\w$]*)\b")
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")
_DOC_WORD = re.compile(r"[A-Za-z][A-Za-z]+")
_CONTROL = frozenset(
    "if for while switch catch return synchronized print super this new def sizeof elif with assert".split()
)
# Waiting shows in a handful of calls whatever the language; their sub-tokens alone ("park", "wait") are
# ambiguous, so the whole member name is a feature of its own too.
_WAIT_WORDS = frozenset(
    "sleep park parknanos await wait join take poll acquire lock lockinterruptibly tryacquire select "
    "epoll condition latch barrier semaphore future get".split()
)


def subtokens(text: str) -> list[str]:
    """``readFully_now`` -> ``read fully now`` (lower case, digits dropped)."""
    return [t.lower() for t in _SUBTOKEN.findall(text)]


def _split_qualified_name(name: str) -> tuple[list[str], str, str]:
    """(package parts, class, method) of ``java.io.FileInputStream.read`` or ``pkg.mod.Class.func``."""
    name = name.split("#", 1)[0].split("(", 1)[0]
    name = name.split(":", 1)[1] if ":" in name and not name.startswith("::") else name
    parts = [p for p in re.split(r"[.$/]|::", name) if p]
    if not parts:
        return [], "", ""
    method = parts[-1]
    owner = ""
    for i in range(len(parts) - 2, -1, -1):
        if parts[i][:1].isupper():
            owner = parts[i]
            return parts[:i], owner, method
    return parts[:-1], owner, method


def _call_grams(member: str) -> list[str]:
    """Character 4-grams of a called name: ``fwrite``, ``writeBytes`` and ``write`` share ``writ``."""
    padded = f"<{member.lower()}>"
    return [f"kg:{padded[i:i + 4]}" for i in range(len(padded) - 3)]


def feature_strings(function: FunctionSource) -> list[str]:
    """The named features of one function (repeated when they occur repeatedly)."""
    out: list[str] = []
    package, owner, method = _split_qualified_name(function.qualified_name)
    for part in package[-4:]:
        out.extend(f"p:{t}" for t in subtokens(part))
    out.extend(f"c:{t}" for t in subtokens(owner))
    method_tokens = subtokens(method)
    out.extend(f"m:{t}" for t in method_tokens)
    out.append(f"M:{method.lower()}")
    if owner:
        out.append(f"CM:{owner.lower()}.{method.lower()}")
    padded = f"<{method.lower()}>"
    out.extend(f"g:{padded[i:i + 3]}" for i in range(len(padded) - 2))
    code = function.code[:MAX_CODE_CHARS]
    for target, member in _QUALIFIED_CALL.findall(code):
        low = member.lower()
        out.append(f"K:{low}")
        out.append(f"KO:{target.lower()}.{low}")
        out.extend(f"k:{t}" for t in subtokens(member))
        out.extend(f"o:{t}" for t in subtokens(target))
        out.extend(_call_grams(member))
        if low in _WAIT_WORDS:
            out.append(f"W:{low}")
    for member in _BARE_CALL.findall(code):
        low = member.lower()
        if low in _CONTROL:
            continue
        out.append(f"K:{low}")
        out.extend(f"k:{t}" for t in subtokens(member))
        out.extend(_call_grams(member))
    for created in _NEW.findall(code):
        out.append(f"N:{created.rsplit('.', 1)[-1].lower()}")
    for type_name in _TYPE.findall(code):
        out.append(f"T:{type_name.lower()}")
        out.extend(f"t:{t}" for t in subtokens(type_name))
    words = [t for ident in _IDENTIFIER.findall(code) for t in subtokens(ident)]
    out.extend(f"w:{t}" for t in words)
    doc_words = [w.lower() for w in _DOC_WORD.findall(function.doc[:MAX_DOC_CHARS])]
    out.extend(f"d:{w}" for w in doc_words)
    # Language-free counts of the keyword classifier's resource words: a prior the model can weigh.
    every = method_tokens + words + doc_words
    out.extend("R:network" for t in every if t in NETWORK_WORDS)
    out.extend("R:disk" for t in every if t in DISK_WORDS)
    if function.origin == "bytecode" or function.code.startswith("// bytecode of"):
        out.append("X:bytecode")
    if not code.strip() or code.strip() == function.qualified_name:
        out.append("X:name-only")
    return out


def bucket(feature: str) -> int:
    return zlib.crc32(feature.encode("utf-8")) & ((1 << HASH_BITS) - 1)


def hashed_features(function: FunctionSource) -> tuple[list[int], list[float]]:
    """Sorted bucket indices and their L2-normalised log-scaled counts."""
    counts: Counter[int] = Counter(bucket(f) for f in feature_strings(function))
    if not counts:
        return [], []
    indices = sorted(counts)
    values = [1.0 + math.log(counts[i]) for i in indices]
    norm = math.sqrt(sum(v * v for v in values))
    return indices, [v / norm for v in values]


def batch_features(functions: Iterable[FunctionSource]) -> tuple[list[int], list[float], list[int]]:
    """Flattened (indices, values, offsets) of a batch: function ``i`` owns ``offsets[i]:offsets[i+1]``."""
    indices: list[int] = []
    values: list[float] = []
    offsets = [0]
    for f in functions:
        idx, val = hashed_features(f)
        indices.extend(idx)
        values.extend(val)
        offsets.append(len(indices))
    return indices, values, offsets
