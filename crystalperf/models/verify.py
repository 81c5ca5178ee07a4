"""The verified subset (paper §3.4): functions whose dominant resource was measured, not assumed.

:mod:`.verify_workloads` runs library functions under ``strace -f -ttt -T -yy`` with marker syscalls
around each call of a target function. Here the log is cut at the markers: inside each call interval,
time in syscalls on files (and file-system calls) is disk, time in syscalls on TCP/UDP sockets (and
socket calls, polls on sockets) is network, and the thread's user-mode CPU time (``getrusage``,
carried in the closing marker) is CPU; waits for locks and descheduled time count for nothing. A function whose measured share of one resource is at least :data:`MIN_SHARE` gets that
label; the others are left out, like the corpus leaves out unclear functions.

strace slows every syscall down, so the I/O shares are upper bounds; functions are verified on
whole workloads (many calls), which is what the paper did with ``strace -c``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crystalperf.models import LABELS

MIN_SHARE = 0.6
MIN_WALL_S = 0.0005
_LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
_DURATION = re.compile(r"<(\d+\.\d+)>\s*$")
_CALL = re.compile(r"^([a-z_0-9]+)\(")
_RESUMED = re.compile(r"^<\.\.\. ([a-z_0-9]+) resumed>")
_MARK = re.compile(r'"/crystalperf-mark/([BE])/(\d+)/(\d+)/([^"]+)"')
_SOCKET_FD = re.compile(r"<(TCP|TCPv6|UDP|UDPv6):")
_FILE_FD = re.compile(r"\d+</(?!dev/|proc/|sys/)[^>]*>")
_CODE_FILE = re.compile(r"\.(py|pyc|so|pth)>|__pycache__|/crystalperf-mark/")
NETWORK_CALLS = frozenset(
    {
        "connect",
        "accept",
        "accept4",
        "socket",
        "sendto",
        "recvfrom",
        "sendmsg",
        "recvmsg",
        "shutdown",
        "getsockopt",
        "setsockopt",
        "bind",
        "listen",
    }
)
FILE_CALLS = frozenset(
    {"openat", "open", "stat", "newfstatat", "lstat", "statx", "unlink", "unlinkat", "mkdir", "mkdirat", "rmdir",
     "rename", "renameat", "renameat2", "getdents64", "fsync", "fdatasync", "ftruncate", "chmod", "fchmod",
     "utimensat", "readlink", "access", "faccessat2", "sendfile", "copy_file_range", "fstatfs", "statfs",
     "link", "symlink", "truncate", "fallocate", "flock", "fcntl", "chown", "fchown"}
)  # fmt: skip
POLL_CALLS = frozenset({"poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait"})
WAIT_CALLS = frozenset({"futex", "wait4", "clock_nanosleep", "nanosleep"})


def categorize(name: str, text: str) -> str:
    """'disk', 'network', 'wait' or 'cpu' (time counted as computation) for one syscall line."""
    if _SOCKET_FD.search(text) or name in NETWORK_CALLS:
        return "network"
    if name in POLL_CALLS:
        return "network" if _SOCKET_FD.search(text) else "wait"
    if name in WAIT_CALLS:
        return "wait"
    if _CODE_FILE.search(text):
        return "cpu"  # imports and the markers themselves are not the function's I/O
    if name in FILE_CALLS or _FILE_FD.search(text):
        return "disk"
    return "cpu"


@dataclass
class Measured:
    calls: int = 0
    wall: float = 0.0
    disk: float = 0.0
    network: float = 0.0
    wait: float = 0.0
    cpu: float = 0.0  # user-mode CPU of the calling thread, measured inside the call

    def shares(self) -> dict[str, float]:
        total = self.cpu + self.disk + self.network
        if total <= 0:
            return dict.fromkeys(LABELS, 0.0)
        return {"cpu": self.cpu / total, "disk": self.disk / total, "network": self.network / total}

    def label(self) -> str | None:
        shares = self.shares()
        best = max(shares, key=lambda k: shares[k])
        if self.wall < MIN_WALL_S or shares[best] < MIN_SHARE:
            return None
        return best


@dataclass
class _Open:
    name: str
    start: float
    disk: float = 0.0
    network: float = 0.0
    wait: float = 0.0


@dataclass
class _Thread:
    open: dict[str, _Open] = field(default_factory=dict)
    pending: str | None = None


def parse_strace(lines: Iterable[str]) -> dict[str, Measured]:
    """Per target function: wall time and disk/network/wait syscall time inside its calls."""
    threads: dict[str, _Thread] = defaultdict(_Thread)
    out: dict[str, Measured] = defaultdict(Measured)
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        tid, ts, rest = m.group(1), float(m.group(2)), m.group(3)
        thread = threads[tid]
        mark = _MARK.search(rest)
        if mark and rest.startswith(("newfstatat", "stat", "statx", "lstat")):
            kind, frame, user_us, name = mark.groups()
            if kind == "B":
                thread.open[frame] = _Open(name, ts)
            elif frame in thread.open:
                o = thread.open.pop(frame)
                rec = out[o.name]
                rec.calls += 1
                rec.wall += ts - o.start
                rec.disk += o.disk
                rec.network += o.network
                rec.wait += o.wait
                rec.cpu += int(user_us) / 1e6
            continue
        resumed = _RESUMED.match(rest)
        if resumed:
            category = thread.pending or "cpu"
            thread.pending = None
        else:
            call = _CALL.match(rest)
            if not call:
                continue
            category = categorize(call.group(1), rest)
            if rest.endswith("<unfinished ...>"):
                thread.pending = category
                continue
        d = _DURATION.search(rest)
        if not d or category == "cpu" or not thread.open:
            continue
        seconds = float(d.group(1))
        for o in thread.open.values():
            setattr(o, category, getattr(o, category) + seconds)
    return dict(out)


def run_verification(
    records: list[dict[str, Any]], work_dir: Path, *, python: str = sys.executable
) -> dict[str, Measured]:
    """Run the workloads under strace with markers on ``records``' functions; returns measurements."""
    work_dir.mkdir(parents=True, exist_ok=True)
    targets = work_dir / "targets.txt"
    targets.write_text("\n".join(sorted({r["qualified_name"] for r in records})) + "\n")
    log_path = work_dir / "strace.log"
    cmd = ["strace", "-f", "-ttt", "-T", "-yy", "-s", "120", "-o", str(log_path),
           python, "-m", "crystalperf.models.verify_workloads", str(targets)]  # fmt: skip
    subprocess.run(cmd, check=True, cwd=tempfile.gettempdir(), timeout=1800)
    with log_path.open(encoding="utf-8", errors="replace") as fh:
        return parse_strace(fh)


def verified_records(
    records: list[dict[str, Any]], measured: dict[str, Measured]
) -> Iterator[dict[str, Any]]:
    """Records whose function was measured clearly, labelled by the measurement."""
    for r in records:
        m = measured.get(r["qualified_name"])
        if m is None:
            continue
        label = m.label()
        if label is None:
            continue
        row = dict(r)
        row["rule_label"] = r.get("label")
        row["label"] = label
        row["measured"] = {
            "calls": m.calls,
            "wall_s": round(m.wall, 6),
            **{k: round(v, 3) for k, v in m.shares().items()},
        }
        yield row


def candidate_records(pypi_dir: Path | None = None) -> list[dict[str, Any]]:
    """Python functions of the stdlib and the downloaded PyPI packages, labelled by the rules when a
    rule claims them (the rest can still be verified: the measurement gives their label)."""
    from crystalperf.models import corpus

    stdlib = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    sources = [corpus.extract_python_tree(stdlib, prefix="pystd")]
    if pypi_dir is not None and pypi_dir.is_dir():
        for unpacked in corpus.unpack_sdists(pypi_dir, pypi_dir / "unpacked"):
            for root in corpus._package_roots(unpacked):
                sources.append(corpus.extract_python_tree(root, prefix="pypi"))
    rules = corpus.load_rules()
    out = []
    seen: set[str] = set()
    for source in sources:
        for fn in source:
            if (
                fn.qualified_name in seen
                or not corpus._substantial(fn.code)
                or corpus.FORBIDDEN.search(fn.qualified_name)
            ):
                continue
            seen.add(fn.qualified_name)
            out.append(
                {"id": f"{fn.library}:{fn.qualified_name}", "library": fn.library, "language": "python",
                 "qualified_name": fn.qualified_name, "code": fn.code, "doc": fn.doc,
                 "label": corpus.label_for("python", fn.qualified_name, rules)}
            )  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m crystalperf.models.verify PYPI_DIR OUT.jsonl [WORK_DIR]``."""
    args = argv if argv is not None else sys.argv[1:]
    candidates = candidate_records(Path(args[0]))
    work = Path(args[2]) if len(args) > 2 else Path(tempfile.mkdtemp(prefix="crystalperf-verify-"))
    measured = run_verification(candidates, work)
    rows = list(verified_records(candidates, measured))
    with Path(args[1]).open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    agree = sum(1 for r in rows if r["rule_label"] == r["label"])
    sys.stdout.write(
        f"measured {len(measured)} functions, {len(rows)} with a clear dominant resource; "
        f"rules agree on {agree}\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
