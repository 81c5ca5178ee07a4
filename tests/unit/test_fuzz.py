"""Hostile inputs to the real command line: every one ends in exit 0, or in exit 2 with one line on stderr.

Two suites:

- ``test_fuzzed_traces_never_give_a_traceback``: random mutations of a valid trace, through ``main()`` in this
  process (fast, many cases);
- ``test_hostile_inputs_through_the_real_cli``: a seeded generator of several hundred hostile inputs of every
  kind the analyser can be handed (corrupt, truncated and bomb gzip; FIFOs, devices, symlinks, directories;
  non-UTF-8, deep nesting, NaN/Inf/1e400, huge ints, negative spans, duplicate ids, cycles, missing fields and
  wrong types; control characters, rich markup and megabyte names; frames naming devices and FIFOs, jars that
  are zip bombs; hostile ``--set`` values and ``--out`` paths; Spark event logs for ``crystalperf import``),
  each run as ``python -m crystalperf`` in its own process, a few at a time, with a time limit (a hang) and
  its peak RSS read from ``wait4``. For every one: exit 0, or exit 2 with exactly one line on stderr; never a
  traceback, never exit 1 (an internal error), never a hang, never more than 1 GB. Most cases run as forks
  of a process that already imported the CLI (``cli_zygote.py``: the same ``main()`` in a process of its own,
  without a second of imports each); every case with an environment of its own and one in
  ``REAL_PROCESS_EVERY`` starts a fresh interpreter.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from crystalperf.core.cli import main
from crystalperf.core.trace.synthetic import spark_like_trace

# A longer campaign with other inputs, by hand (never in CI): CRYSTALPERF_FUZZ_SEED=101 CRYSTALPERF_FUZZ_CASES=2000
# pytest tests/unit/test_fuzz.py. The seed moves both suites; the defaults are what CI runs.
_FUZZ_SEED = os.environ.get("CRYSTALPERF_FUZZ_SEED")
CASES = int(os.environ.get("CRYSTALPERF_FUZZ_CASES", "240"))
MUTATION_SEED = int(_FUZZ_SEED) if _FUZZ_SEED else 1234
HOSTILE_SEED = int(_FUZZ_SEED) if _FUZZ_SEED else 16
TIMEOUT_S = 20.0  # a case still running after this long is a hang
# A valid trace of 20,000 operations is real work, not a hang: 15-18 s alone on a 2-core CI machine (prediction
# simulates every operation ~90 times), more beside the other workers.
SLOW_CASE_TIMEOUT_S = {"-structure-20000-operations": 90.0}
MAX_RSS_BYTES = 1 << 30
WORKERS = 3
REAL_PROCESS_EVERY = 8
ZYGOTE = Path(__file__).resolve().with_name("cli_zygote.py")
DATA = Path(__file__).resolve().parents[1] / "data"
EVENT_LOG = DATA / "spark-eventlog.json.gz"
# What must never reach a terminal from a trace: C0 controls but the newline, DEL, C1, bidi overrides.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _mutations(doc: dict, rng: random.Random):
    """Yield broken variants of a valid trace document."""
    text = json.dumps(doc)
    junk = [None, -1, 1e309, "x", [], {}, True, 2**70, -1e-9, "NaN"]
    paths = []

    def collect(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                collect(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node[:4]):
                collect(v, (*path, i))

    collect(doc, ())
    while True:
        kind = rng.randrange(5)
        if kind == 0:  # truncated text
            yield text[: rng.randrange(len(text))], "text"
            continue
        mutated = copy.deepcopy(doc)
        path = rng.choice(paths[1:])
        parent = mutated
        for p in path[:-1]:
            parent = parent[p]
        if kind == 1:
            parent[path[-1]] = rng.choice(junk)
        elif kind == 2 and isinstance(parent, dict):
            del parent[path[-1]]
        elif kind == 3:
            parent[path[-1]] = copy.deepcopy(rng.choice([mutated.get("application"), [1, 2], "zz"]))
        else:
            raw = bytearray(text.encode())
            for _ in range(rng.randrange(1, 6)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            yield bytes(raw), "bytes"
            continue
        yield json.dumps(mutated, allow_nan=True), "text"


def _base_document() -> dict:
    return json.loads(spark_like_trace(jobs=1, stages_per_job=2, tasks_per_stage=3, samples_per_second=4).to_json())


def test_fuzzed_traces_never_give_a_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CRYSTALPERF_CACHE_DIR", str(tmp_path / "cache"))
    doc = _base_document()
    rng = random.Random(MUTATION_SEED)
    outcomes = {0: 0, 2: 0}
    gen = _mutations(doc, rng)
    for i in range(CASES):
        payload, kind = next(gen)
        path = tmp_path / f"case{i}.json"
        if kind == "bytes":
            path.write_bytes(payload)
        else:
            path.write_text(payload)
        try:
            code = main(["analyze", str(path), "--out", str(tmp_path / "out"), "-q", "--classifier", "keyword"])
        except SystemExit as exc:  # pragma: no cover - would be a bug
            pytest.fail(f"case {i} raised SystemExit({exc.code})")
        err = capsys.readouterr().err
        assert code in (0, 2), f"case {i}: exit {code}: {err}"
        outcomes[code] += 1
        if code == 2:
            assert err.count("\n") == 1 and "Traceback" not in err, f"case {i}: {err!r}"
            assert str(path) in err, f"case {i}: the error does not name the file: {err!r}"
    assert outcomes[2] >= CASES // 2, outcomes


# -- the hostile inputs, through the real command line ------------------------------------------------------


@dataclass
class Case:
    """One run of the command line: its arguments (after ``python -m crystalperf``) and its environment."""

    name: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # Checks beyond the common ones, on (exit status, stdout, stderr); return a problem or None.
    check: Callable[[int, str, str], str | None] | None = None


@dataclass
class Outcome:
    case: Case
    status: int | None  # None: killed after TIMEOUT_S
    stdout: str
    stderr: str
    rss_bytes: int
    seconds: float

    def problem(self) -> str | None:
        if self.status is None:
            return f"no answer after {self.seconds:.0f} s (a hang)"
        if "Traceback" in self.stderr or "Traceback" in self.stdout:
            return "a traceback"
        if self.rss_bytes > MAX_RSS_BYTES:
            return f"peak RSS {self.rss_bytes / 2**20:.0f} MiB"
        if self.status not in (0, 2):
            return f"exit {self.status}"
        if self.status == 2:
            lines = self.stderr.splitlines()
            if len(lines) != 1 or not self.stderr.endswith("\n"):
                return f"exit 2 with {len(lines)} lines on stderr"
            if CONTROL.search(self.stderr.rstrip("\n")):
                return "a control character in the error line"
        if CONTROL.search(self.stdout):
            return "a control character reached stdout"
        if self.case.check is not None:
            return self.case.check(self.status, self.stdout, self.stderr)
        return None


def _limit_s(case: Case) -> float:
    return next((s for suffix, s in SLOW_CASE_TIMEOUT_S.items() if case.name.endswith(suffix)), TIMEOUT_S)


def _outcome(case: Case, status: int | None, out_path: Path, err_path: Path, rss: int, seconds: float) -> Outcome:
    return Outcome(case, status, out_path.read_text(errors="replace"), err_path.read_text(errors="replace"),
                   rss, seconds)


def _run(case: Case, cwd: Path, base_env: dict[str, str]) -> Outcome:
    """``python -m crystalperf`` in a fresh interpreter."""
    out_path, err_path = cwd / f"{case.name}.stdout", cwd / f"{case.name}.stderr"
    started = time.monotonic()
    limit = _limit_s(case)
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "crystalperf", *case.args], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, cwd=cwd, env={**base_env, **case.env},
                                start_new_session=True)
        status: int | None = None
        rss = 0
        while True:
            pid, wait_status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status = os.waitstatus_to_exitcode(wait_status)
                rss = usage.ru_maxrss * 1024  # kilobytes on Linux
                break
            if time.monotonic() - started > limit:
                os.killpg(proc.pid, signal.SIGKILL)
                _, _, usage = os.wait4(proc.pid, 0)
                rss = usage.ru_maxrss * 1024
                break
            time.sleep(0.01)
        proc.returncode = status if status is not None else -9  # reaped here: Popen must not wait again
    return _outcome(case, status, out_path, err_path, rss, time.monotonic() - started)


class Zygote:
    """One ``cli_zygote.py`` process: runs cases as its forks, one at a time."""

    def __init__(self, base_env: dict[str, str]) -> None:
        self.env = base_env
        self.proc = subprocess.Popen([sys.executable, str(ZYGOTE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=base_env, text=True)

    def run(self, case: Case, cwd: Path) -> Outcome:
        out_path, err_path = cwd / f"{case.name}.stdout", cwd / f"{case.name}.stderr"
        request = {"args": case.args, "env": {**self.env, **case.env}, "cwd": str(cwd), "stdout": str(out_path),
                   "stderr": str(err_path), "timeout_s": _limit_s(case)}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the zygote died running {case.name} (exit {self.proc.poll()})"
        answer = json.loads(line)
        return _outcome(case, answer["status"], out_path, err_path, answer["rss_bytes"], answer["seconds"])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class Inputs:
    """Writes the hostile files into a directory and yields the cases that use them."""

    def __init__(self, root: Path, rng: random.Random) -> None:
        self.root = root
        self.rng = rng
        self.doc = _base_document()
        self.count = 0
        (root / "out").mkdir()

    def path(self, suffix: str = ".json") -> Path:
        self.count += 1
        return self.root / f"in{self.count:04d}{suffix}"

    def write_doc(self, doc: Any, *, gz: bool = False) -> Path:
        text = json.dumps(doc, allow_nan=True)
        path = self.path(".json.gz" if gz else ".json")
        path.write_bytes(gzip.compress(text.encode(), 1) if gz else text.encode())
        return path

    def analyze(self, name: str, path: Path | str, *extra: str, env: dict[str, str] | None = None,
                check: Callable[[int, str, str], str | None] | None = None, quiet: bool = True) -> Case:
        args = ["analyze", str(path), "--out", str(self.root / "out"), "--classifier", "keyword", *extra]
        return Case(name, args + (["-q"] if quiet else []), env or {}, check)

    def predict(self, name: str, path: Path | str, *sets: str) -> Case:
        args = ["predict", str(path), "--classifier", "keyword"]
        for s in sets:
            args += ["--set", s]
        return Case(name, args)

    def edited(self, edit: Callable[[dict], Any]) -> dict:
        doc = copy.deepcopy(self.doc)
        edit(doc)
        return doc

    # -- the kinds ----------------------------------------------------------------------------------

    def files(self) -> Iterator[Case]:
        """Files that are not traces, or not files."""
        valid = self.write_doc(self.doc, gz=True)
        raw = valid.read_bytes()
        yield self.analyze("valid-gz", valid, quiet=False)
        for i in range(6):  # truncated gzip
            p = self.path(".json.gz")
            p.write_bytes(raw[: self.rng.randrange(1, len(raw))])
            yield self.analyze(f"gzip-truncated-{i}", p)
        for i in range(6):  # gzip with flipped bytes
            data = bytearray(raw)
            for _ in range(self.rng.randrange(1, 8)):
                data[self.rng.randrange(10, len(data))] = self.rng.randrange(256)
            p = self.path(".json.gz")
            p.write_bytes(bytes(data))
            yield self.analyze(f"gzip-corrupt-{i}", p)
        p = self.path(".json.gz")
        p.write_bytes(raw + raw)  # two members: what gzip.decompress reads as one
        yield self.analyze("gzip-two-members", p)
        p = self.path(".json.gz")
        p.write_bytes(raw + b"garbage after the end")
        yield self.analyze("gzip-trailing-garbage", p)
        for name, prefix, fill in (("zeros", b"", b"\0"), ("spaces-in-json", b'{"schema_version": "1.4", "a": "', b" "),
                                   ("numbers", b'{"schema_version": "1.4", "a": [', b"0,")):
            p = self.path(".json.gz")
            p.write_bytes(_gzip_bomb(prefix, fill, 300 << 20))
            yield self.analyze(f"gzip-bomb-{name}", p)
        for name, target in (("dev-zero", "/dev/zero"), ("dev-null", "/dev/null"), ("dev-urandom", "/dev/urandom"),
                             ("proc-self-mem", "/proc/self/mem"), ("root-dir", "/"), ("dev-stdin", "/dev/stdin")):
            yield self.analyze(f"special-{name}", target)
        fifo = self.path(".fifo")
        os.mkfifo(fifo)
        yield self.analyze("fifo", fifo)
        link = self.path(".json")
        link.symlink_to("/dev/zero")
        yield self.analyze("symlink-to-dev-zero", link)
        link = self.path(".json")
        link.symlink_to(fifo)
        yield self.analyze("symlink-to-fifo", link)
        loop_a, loop_b = self.path(".json"), self.path(".json")
        loop_a.symlink_to(loop_b)
        loop_b.symlink_to(loop_a)
        yield self.analyze("symlink-loop", loop_a)
        dangling = self.path(".json")
        dangling.symlink_to(self.root / "nowhere")
        yield self.analyze("symlink-dangling", dangling)
        folder = self.path(".d")
        folder.mkdir()
        yield self.analyze("empty-directory", folder)
        folder = self.path(".d")
        folder.mkdir()
        os.mkfifo(folder / "crystalperf-trace.json.gz")
        yield self.analyze("directory-with-fifo-trace", folder)
        folder = self.path(".d")
        (folder / "crystalperf-trace.json").mkdir(parents=True)
        yield self.analyze("directory-with-directory-trace", folder)
        newline = self.root / "a\nname\x1b[2J.json"
        newline.write_text("{")
        yield self.analyze("newline-in-path", newline)
        yield self.analyze("missing-with-control-chars", self.root / "no\rsuch\x07file")
        yield self.analyze("name-too-long", self.root / ("x" * 5000))
        for name, data in (("empty", b""), ("not-utf8", b"\xff\xfe{\x00\x80"), ("utf16", '{"a":1}'.encode("utf-16")),
                           ("bom", b"\xef\xbb\xbf" + valid.read_bytes()), ("deep-list", b"[" * 200_000),
                           ("deep-object", b'{"a":' * 100_000), ("big-int", b'{"schema_version": ' + b"9" * 5000 + b"}"),
                           ("just-null", b"null"), ("string", b'"trace"'), ("number", b"1e400"),
                           ("nan", b"NaN"), ("array", b"[1,2,3]"), ("binary", bytes(range(256)) * 16)):
            p = self.path(".json")
            p.write_bytes(data)
            yield self.analyze(f"content-{name}", p)

    def values(self) -> Iterator[Case]:
        """A valid trace with one field made hostile."""
        task = ("operations", 0, "children", 0, "tasks", 0)
        op = ("operations", 0, "children", 0)
        hostile_numbers = [float("nan"), float("inf"), -float("inf"), 1e308, -1e308, 1e300, -1.0, 0.0, 2**63,
                           2**31, -(2**63), 10**400, 1e-300, "12", None, True, [], {}]
        targets = [(*task, "start"), (*task, "end"), (*task, "metrics", "cpu_time_s"),
                   (*task, "metrics", "run_time_s"), (*task, "metrics", "shuffle_read_bytes"), (*task, "index"),
                   (*task, "attempt"), (*task, "slot"), (*op, "start"), (*op, "end"), (*op, "parallelism"),
                   (*op, "task_count"), (*op, "metrics", "network_wait_s"), ("application", "start"),
                   ("application", "end"), ("environment", "total_slots"), ("environment", "cpu_count"),
                   ("environment", "cores_per_executor"), ("environment", "memory_bytes"),
                   ("environment", "network_bandwidth"), ("environment", "disk_bandwidth"),
                   ("environment", "cpu_speed"), ("samples", "interval_s"), ("samples", "bucket_s"),
                   ("samples", "origin"), ("samples", "dropped"), ("metrics", "data_bytes")]
        for target in targets:
            for value in self.rng.sample(hostile_numbers, 2):
                doc = self.edited(lambda d, t=target, v=value: _set(d, t, v))
                yield self.analyze(f"value-{'.'.join(map(str, target))}={str(value)[:20]}", self.write_doc(doc))
        for column in ("key", "bucket", "stack", "count"):
            for value in self.rng.sample([-1, 2**31, 2**62, 10**30, 1.5, "0"], 3):
                doc = self.edited(lambda d, c=column, v=value: d["samples"][c].__setitem__(0, v))
                yield self.analyze(f"samples-{column}={value}", self.write_doc(doc))
        for count in (2**31, 2**40):  # a sampled operation standing for more tasks than any job runs
            yield self.analyze(f"task-count-{count}", self.write_doc(self.edited(
                lambda d, c=count: d["operations"][0]["children"][0].__setitem__("task_count", c))))
        yield self.analyze("executor-cores-2**31", self.write_doc(self.edited(
            lambda d: d["environment"].__setitem__("executors", [{"id": "1", "cores": 2**31}]))))
        yield self.analyze("executors-100k", self.write_doc(self.edited(
            lambda d: d["environment"].__setitem__("executors", [{"id": str(i), "cores": 64} for i in range(100_000)]))))

    def structure(self) -> Iterator[Case]:
        """Broken structure: ids, parents, nesting, missing and mistyped fields."""
        def duplicate(d):
            d["operations"].append(copy.deepcopy(d["operations"][0]))

        def cycle(d):
            a, b = d["operations"][0]["children"][:2]
            a["parents"], b["parents"] = [b["id"]], [a["id"]]

        def self_parent(d):
            d["operations"][0]["parents"] = [d["operations"][0]["id"]]

        def unknown_parent(d):
            d["operations"][0]["parents"] = ["nope"]

        def deep(d, levels):
            node = d["operations"][0]
            for i in range(levels):
                node["children"] = [{"id": f"deep{i}", "name": "d", "start": node["start"], "end": node["end"]}]
                node = node["children"][0]

        def many_ops(d):
            first = d["operations"][0]
            d["operations"] = [dict(first, id=f"op{i}", children=[], parents=[]) for i in range(20_000)]

        def negative_span(d):
            op = d["operations"][0]
            op["start"], op["end"] = op["end"], op["start"]

        def duplicate_task_ids(d):
            tasks = d["operations"][0]["children"][0]["tasks"]
            tasks.extend(copy.deepcopy(tasks))

        def task_outside_op(d):
            d["operations"][0]["children"][0]["tasks"][0]["start"] -= 1e6

        def sample_key_unknown_op(d):
            d["samples"]["keys"][0]["operation"] = "no-such-operation"

        def stack_frame_out_of_range(d):
            d["samples"]["stacks"][0] = [10**6]

        def empty_everything(d):
            d["operations"], d["samples"] = [], None

        def unknown_state(d):
            d["samples"]["states"] = ["zombie"] * len(d["samples"]["stacks"])

        def resolution_bad(d):
            d["samples"]["resolution"] = {"classifier": "x", "functions": [{"qualified_name": "f", "vector": [0, 0, 0]}],
                                          "stack_function": [0] * len(d["samples"]["stacks"])}

        def resolution_nan(d):
            d["samples"]["resolution"] = {"classifier": "x",
                                          "functions": [{"qualified_name": "f", "vector": [float("nan"), 1, 0]}],
                                          "stack_function": [0] * len(d["samples"]["stacks"])}

        def waits_on_work(d, value):
            d["operations"][0]["children"][0]["attributes"]["waits_on_work"] = value

        def io_rows(d, value):
            d["io"] = [{"t": 1.7e9, "source": "driver", "storage_read_bytes": 0},
                       {"t": 1.7e9 + 1, "source": "driver", "storage_read_bytes": value}]

        def same_time_io(d):
            d["io"] = [{"t": 1.7e9, "source": "d", "network_rx_bytes": 0}, {"t": 1.7e9, "source": "d", "network_rx_bytes": 1e9}]

        edits: list[tuple[str, Callable[[dict], Any]]] = [
            ("duplicate-ids", duplicate), ("parent-cycle", cycle), ("self-parent", self_parent),
            ("unknown-parent", unknown_parent), ("nested-40", lambda d: deep(d, 40)),
            ("nested-31", lambda d: deep(d, 29)), ("nested-250", lambda d: deep(d, 250)),
            ("20000-operations", many_ops), ("negative-span", negative_span),
            ("duplicate-task-ids", duplicate_task_ids), ("task-outside-operation", task_outside_op),
            ("sample-key-unknown-operation", sample_key_unknown_op), ("stack-frame-out-of-range", stack_frame_out_of_range),
            ("empty", empty_everything), ("unknown-thread-state", unknown_state), ("resolution-zero-vector", resolution_bad),
            ("resolution-nan-vector", resolution_nan), ("waits-on-work-garbage", lambda d: waits_on_work(d, "cpu=x,disk=")),
            ("waits-on-work-nan", lambda d: waits_on_work(d, "cpu=nan,disk=inf,network=-1")),
            ("waits-on-work-huge", lambda d: waits_on_work(d, "cpu=1e400,disk=0,network=0")),
            ("io-inf", lambda d: io_rows(d, float("inf"))), ("io-huge", lambda d: io_rows(d, 1e300)),
            ("io-same-time", same_time_io), ("schema-2.0", lambda d: d.__setitem__("schema_version", "2.0")),
            ("schema-garbage", lambda d: d.__setitem__("schema_version", "\x1b[31mred")),
            ("schema-number", lambda d: d.__setitem__("schema_version", 1.4)),
            ("no-schema", lambda d: d.pop("schema_version")), ("no-application", lambda d: d.pop("application")),
            ("application-list", lambda d: d.__setitem__("application", [])),
            ("operations-dict", lambda d: d.__setitem__("operations", {})),
            ("framework-unknown", lambda d: d["application"].__setitem__("framework", "hadoop")),
            ("partial-long", lambda d: d.__setitem__("partial", "x" * 5000)),
            ("partial-control", lambda d: d.__setitem__("partial", "killed\x1b]52;c;ZXZpbA==\x07\r\x1b[2J")),
            ("warnings-control", lambda d: d.__setitem__("warnings", ["\x1b[2J\x1b]0;title\x07", "[/bold][red]x"])),
            ("streaming-inf", lambda d: d.__setitem__("streaming", {"latency_s": float("inf")})),
            ("streaming-huge", lambda d: d.__setitem__("streaming", {"input_rate": 1e300, "throughput": 1e300})),
            ("metrics-steps-huge", lambda d: d["metrics"].__setitem__("steps", 1e20)),
            ("metrics-input-wait-nan", lambda d: d["metrics"].__setitem__("input_wait_fraction", float("nan"))),
            ("metrics-input-wait-big", lambda d: d["metrics"].__setitem__("input_wait_fraction", 1e20)),
            ("scaling-garbage", lambda d: d["environment"].__setitem__("scaling", ["\x1b[2J", "cores", "cores"])),
            ("devices-many", lambda d: d["environment"].__setitem__("devices", [{"kind": "gpu", "count": 2**20}])),
        ]
        for name, edit in edits:
            yield self.analyze(f"structure-{name}", self.write_doc(self.edited(edit)))
        for i in range(6):  # a missing field anywhere
            doc = copy.deepcopy(self.doc)
            path = self.rng.choice(_paths(doc))
            parent = _get(doc, path[:-1])
            if isinstance(parent, dict):
                del parent[path[-1]]
            yield self.analyze(f"missing-{i}-{'.'.join(map(str, path))}", self.write_doc(doc))
        for i in range(8):  # a field of the wrong type anywhere
            doc = copy.deepcopy(self.doc)
            path = self.rng.choice(_paths(doc))
            _set(doc, path, self.rng.choice([None, "x", [], {}, True, [[1]], {"a": {}}, 2**80, -1]))
            yield self.analyze(f"mistyped-{i}-{'.'.join(map(str, path))}", self.write_doc(doc))

    def names(self) -> Iterator[Case]:
        """Names made to fight the terminal, the HTML and the layout."""
        nasty = ["[/bold]", "[bold red]x[/]", "[link=file:///etc/passwd]y[/link]", "\x1b]52;c;ZXZpbA==\x07",
                 "\x1b[2J\x1b[H", "a\rb", "\x07bell", "\u202eevil\u202c", "\u2066iso\u2069", "a\nb\nc", "\x00nul",
                 "<script>alert(1)</script>", "&amp;\"'<>", "\\", "[", "\U0001f600", "\ud800lone", "\x9b31m",
                 ":smile:", "x" * 200_000]

        def html_escaped(status: int, out: str, err: str) -> str | None:
            html = (self.root / "out" / "crystalperf-report.html").read_text(errors="replace")
            return "unescaped markup in the HTML report" if "<script>alert" in html else None

        for i, name in enumerate(nasty):
            def edit(d, n=name):
                d["application"]["name"] = n
                d["operations"][0]["name"] = n
                for child in d["operations"][0]["children"]:
                    child["name"] = n + child["name"]
                d["samples"]["frames"][0]["name"] = n
            yield self.analyze(f"name-{i}", self.write_doc(self.edited(edit)), quiet=False,
                               check=html_escaped if "script" in name else None)
        big = "n" * (1 << 20)
        yield self.analyze("name-1mb", self.write_doc(self.edited(
            lambda d: [op.__setitem__("name", big) for op in d["operations"][0]["children"]])), quiet=False)
        yield self.analyze("app-id-1mb", self.write_doc(self.edited(
            lambda d: d["application"].__setitem__("id", big))), quiet=False)
        yield self.analyze("frame-name-1mb", self.write_doc(self.edited(
            lambda d: d["samples"]["frames"][0].__setitem__("name", big + "." + big)), gz=True), quiet=False)
        yield self.analyze("many-frames-long-names", self.write_doc(self.edited(
            lambda d: d["samples"]["frames"].extend({"name": f"f{i}." + "m" * 10_000} for i in range(300))), gz=True))

    def frames(self) -> Iterator[Case]:
        """Frames and environments that name files the locators must not read: devices, FIFOs, bombs."""
        fifo = self.path(".py")
        os.mkfifo(fifo)
        fifo_jar = self.path(".jar")
        os.mkfifo(fifo_jar)
        big_py = self.path(".py")
        big_py.write_bytes(b"def f():\n    pass\n" + b"# " + b"x" * (9 << 20) + b"\n")
        nested_py = self.path(".py")
        nested_py.write_text("def f():\n    return " + "(" * 100_000 + ")" * 100_000 + "\n")
        zip_bomb = self.path(".jar")
        with zipfile.ZipFile(zip_bomb, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("org/x/Bomb.class", b"\0" * (200 << 20))
            z.writestr("org/x/Bomb.java", b" " * (100 << 20))
        not_zip = self.path(".jar")
        not_zip.write_bytes(b"PK\x03\x04" + os.urandom(4000))
        many_entries = self.path(".jar")
        with zipfile.ZipFile(many_entries, "w", zipfile.ZIP_STORED) as z:
            for i in range(20_000):
                z.writestr(f"p/C{i}.class", b"")
        src_dir = self.path(".d")
        (src_dir / "org" / "x").mkdir(parents=True)
        os.mkfifo(src_dir / "org" / "x" / "Bomb.java")
        (src_dir / "org" / "x" / "Big.java").symlink_to("/dev/zero")
        python_files = [("/dev/zero", "python"), ("/dev/urandom", "python"), ("/proc/self/mem", "python"),
                        (str(fifo), "python"), (str(big_py), "python"), (str(nested_py), "python"), ("/", "python"),
                        ("a/" * 20_000 + "x.py", "python"), ("x\x00y.py", "python"), ("/etc/shadow", "python")]
        jvm = [("org.x.Bomb.run", str(zip_bomb)), ("org.x.Bomb.run", str(fifo_jar)), ("org.x.Bomb.run", str(not_zip)),
               ("org.x.Big.run", "/dev/zero"), ("p.C1.run", str(many_entries)), ("org.x.Bomb.run", "/dev/zero.jar")]

        def with_frames(d, frames, classpath=(), roots=()):
            d["samples"]["frames"] = frames + d["samples"]["frames"]
            shift = len(frames)
            d["samples"]["stacks"] = [[i for i in range(shift)] + [f + shift for f in s] for s in d["samples"]["stacks"]]
            d["environment"]["classpath"] = list(classpath)
            d["environment"]["source_roots"] = list(roots)

        for file, language in python_files:
            doc = self.edited(lambda d, f=file, lang=language: with_frames(
                d, [{"name": "mod.func", "file": f, "line": 1, "language": lang}]))
            yield self.analyze(f"frame-python-{Path(file).name[:20]}", self.write_doc(doc))
        for name, module in jvm:
            doc = self.edited(lambda d, n=name, m=module: with_frames(
                d, [{"name": n, "file": n.split(".")[2] + ".java", "line": 3, "language": "java", "module": m}],
                classpath=[m]))
            yield self.analyze(f"frame-jvm-{Path(module).name[:20]}", self.write_doc(doc))
        for roots in ([str(src_dir)], ["/dev/zero"], [str(fifo_jar)], [str(zip_bomb)], ["/"] * 1000):
            doc = self.edited(lambda d, r=roots: with_frames(
                d, [{"name": "org.x.Bomb.run", "file": "Bomb.java", "line": 3, "language": "java"},
                    {"name": "org.x.Big.run", "file": "Big.java", "line": 3, "language": "java"}], roots=r))
            yield self.analyze(f"source-roots-{Path(roots[0]).name[:20]}", self.write_doc(doc))
        yield self.analyze("source-root-option-fifo", self.write_doc(self.doc), "--source-root", str(fifo_jar),
                           "--reclassify")
        yield self.analyze("classpath-100k", self.write_doc(self.edited(lambda d: with_frames(
            d, [{"name": "org.x.Nope.run", "language": "java"}], classpath=[f"/nonexistent/{i}.jar" for i in range(100_000)]))))

    def what_ifs(self, trace: Path) -> Iterator[Case]:
        """Hostile ``--set`` values."""
        values = ["cores=1000000000", "cores=0", "cores=-1", "cores=1e400", "cores=" + "9" * 400, "cores=nan",
                  "cores=inf", "cores=1.5", "cores=²", "executors=1000000000", "executors=0", "parallelism=2147483648",
                  "slots=1099511627776", "memory=0", "memory=-1g", "memory=" + "9" * 400, "memory=1e400",
                  "memory=99999999999999999p", "cpu_speed=inf", "cpu_speed=nan", "cpu_speed=0", "cpu_speed=1e-300",
                  "cpu_speed=1e300", "cpu_share=0", "cpu_share=inf", "cpu_share=1e-300", "network=0", "network=inf",
                  "network=" + "9" * 400 + "gbit", "network=1e-300bit", "disk=-1MB/s", "disk=nan", "disk=1e400MB/s",
                  "device=\x1b[2J", "device=gpu", "gpu_speedup=inf", "gpu_speedup=0", "gpu_speedup=nan",
                  "cores=", "=4", "cores==4", "\x1b]52;c;eA==\x07=1", "cores=4\nnetwork=1gbit"]
        for value in values:
            yield self.predict(f"set-{value[:30]}", trace, value)
        yield self.predict("set-many", trace, *[f"cores={i}" for i in range(1, 200)])

    def outs(self, trace: Path) -> Iterator[Case]:
        """Hostile ``--out`` directories."""
        a_file = self.path(".txt")
        a_file.write_text("x")
        for name, out in (("existing-file", a_file), ("under-a-file", a_file / "sub"), ("dev-null", "/dev/null"),
                          ("proc", "/proc/self/nope"), ("sys", "/sys/kernel/nope"), ("too-long", "x" * 5000),
                          ("newline", self.root / "out\nx"), ("fifo", self._fifo())):
            yield Case(f"out-{name}", ["analyze", str(trace), "--out", str(out), "--classifier", "keyword", "-q"])
        read_only = self.path(".d")
        read_only.mkdir()
        (read_only / "crystalperf-report.json").mkdir()  # a directory where a report file goes
        yield Case("out-report-is-a-directory", ["analyze", str(trace), "--out", str(read_only), "--classifier",
                                                  "keyword", "-q"])
        yield Case("out-import-under-a-file", ["import", "spark-eventlog", str(EVENT_LOG), "--out", str(a_file / "t")])

    def _fifo(self) -> Path:
        fifo = self.path(".fifo")
        os.mkfifo(fifo)
        return fifo

    def event_logs(self) -> Iterator[Case]:
        """Spark event logs for ``crystalperf import spark-eventlog``."""
        lines = gzip.decompress(EVENT_LOG.read_bytes()).decode().splitlines()

        def imported(name: str, path: Path, *extra: str, env: dict[str, str] | None = None) -> Case:
            return Case(name, ["import", "spark-eventlog", str(path), "--out", str(self.root / "out" / f"{name}.json.gz"),
                               *extra], env or {})

        yield imported("eventlog-valid", EVENT_LOG, "--analyze")
        hostile = [None, "x", -1, 0, 2**80, 10**400, 1e308, float("inf"), float("nan"), [], {}, True, "\x1b[2J"]
        for i in range(25):
            events = [json.loads(line) for line in lines]
            for _ in range(self.rng.randrange(1, 4)):
                event = self.rng.choice(events)
                path = self.rng.choice(_paths(event) or [("Event",)])
                _set(event, path, self.rng.choice(hostile)) if self.rng.random() < 0.8 else _drop(event, path)
            p = self.path(".log")
            p.write_text("\n".join(json.dumps(e, allow_nan=True) for e in events))
            yield imported(f"eventlog-mutated-{i}", p)
        for i in range(6):
            text = "\n".join(lines)
            p = self.path(".log")
            p.write_text(text[: self.rng.randrange(len(text))])
            yield imported(f"eventlog-truncated-{i}", p)
        for name, content in (("empty", b""), ("not-json", b"hello\nworld\n"), ("json-array", b"[1,2]\n"),
                              ("only-unknown", b'{"Event": "X"}\n'), ("binary", os.urandom(5000)),
                              ("big-int-line", b'{"Event": "SparkListenerJobStart", "Job ID": ' + b"9" * 5000 + b"}\n"),
                              ("deep", b"[" * 100_000 + b"\n"),
                              ("job-id-string", b'{"Event":"SparkListenerJobStart","Job ID":"a","Stage IDs":["x",{}]}\n'),
                              ("stage-info-garbage", b'{"Event":"SparkListenerStageCompleted","Stage Info":[1]}\n'
                                                     b'{"Event":"SparkListenerStageSubmitted","Stage Info":{"Stage ID":"q"}}\n'),
                              ("task-garbage", b'{"Event":"SparkListenerApplicationStart","App ID":{},"Timestamp":1e400}\n'
                                               b'{"Event":"SparkListenerTaskEnd","Stage ID":1e300,"Task Info":{"Launch Time":5,'
                                               b'"Index":"x","Attempt":-5,"Finish Time":-1},"Task Metrics":[1]}\n'),
                              ("properties-garbage", b'{"Event":"SparkListenerEnvironmentUpdate","Spark Properties":5,'
                                                     b'"Classpath Entries":7}\n{"Event":"SparkListenerApplicationStart"}\n'),
                              ("local-cores-huge", b'{"Event":"SparkListenerEnvironmentUpdate","Spark Properties":'
                                                   b'{"spark.master":"local[99999999999999999999]"}}\n'
                                                   b'{"Event":"SparkListenerApplicationStart","App ID":"a","Timestamp":1}\n'
                                                   b'{"Event":"SparkListenerExecutorAdded","Executor ID":"driver",'
                                                   b'"Executor Info":{"Host":"h"}}\n'),
                              ("executor-cores-huge", b'{"Event":"SparkListenerApplicationStart","App ID":"a","Timestamp":1}\n'
                                                      b'{"Event":"SparkListenerExecutorAdded","Executor ID":"1",'
                                                      b'"Executor Info":{"Host":"h","Total Cores":2147483648}}\n')):
            p = self.path(".log")
            p.write_bytes(content)
            yield imported(f"eventlog-{name}", p)
        long_line = self.path(".log")
        long_line.write_text(lines[0] + "\n" + "x" * (3 << 20) + "\n" + "\n".join(lines[1:]))
        yield imported("eventlog-long-line", long_line, env={"CRYSTALPERF_MAX_EVENT_LINE_BYTES": "1m"})
        bomb = self.path(".gz")
        bomb.write_bytes(_gzip_bomb(b"", b"\n", 600 << 20))
        yield imported("eventlog-gzip-bomb", bomb)
        line_bomb = self.path(".gz")
        line_bomb.write_bytes(_gzip_bomb(b'{"Event": "', b"a", 600 << 20))
        yield imported("eventlog-one-line-bomb", line_bomb)
        fifo = self._fifo()
        yield imported("eventlog-fifo", fifo)
        yield imported("eventlog-dev-zero", Path("/dev/zero"))
        folder = self.path(".d")
        folder.mkdir()
        os.mkfifo(folder / "events_1_app")
        yield imported("eventlog-rolling-fifo", folder)
        for codec in ("lz4", "snappy", "zstd", "lzf"):
            p = self.root / f"app-{self.count}.{codec}"
            self.count += 1
            p.write_bytes(os.urandom(3000))
            yield imported(f"eventlog-garbage-{codec}", p)
        lz4 = self.path(".lz4")  # a block header claiming a huge block
        lz4.write_bytes(b"LZ4Block" + bytes([0x2F]) + (2**31 - 1).to_bytes(4, "little") + (2**25).to_bytes(4, "little")
                        + b"\0\0\0\0")
        yield imported("eventlog-lz4-huge-block", lz4)
        catalog = self.path(".d")
        catalog.mkdir()
        os.mkfifo(catalog / "app-1")
        (catalog / "app-2").write_bytes(b"\x1b]52;c;x\x07\n")
        (catalog / "app-3").write_text(lines[0] + "\n" + json.dumps({"Event": "SparkListenerApplicationStart",
                                                                     "App ID": "\x1b[2Japp\nx", "App Name": "[/bold]"}))
        yield Case("eventlog-catalog-list", ["import", "spark-eventlog", str(catalog), "--list"])
        yield Case("eventlog-catalog-all", ["import", "spark-eventlog", str(catalog), "--all", "--out",
                                            str(self.root / "out" / "all")])
        yield Case("eventlog-catalog-app-missing", ["import", "spark-eventlog", str(catalog), "--app", "\x1b[2Jnope"])
        yield Case("import-unknown-format", ["import", "\x1b[2Jformat", str(EVENT_LOG)])
        flink = self.path(".json")
        flink.write_text(json.dumps({"format": "crystalperf-flink-metrics", "start": 1e400, "end": "nan"}))
        yield Case("flink-part-garbage", ["import", "flink-metrics", str(flink), "--out", str(self.root / "out" / "f.json.gz")])
        yield Case("flink-part-fifo", ["import", "flink-metrics", str(self._fifo())])

    def mutations(self, count: int) -> Iterator[Case]:
        gen = _mutations(self.doc, self.rng)
        for i in range(count):
            payload, kind = next(gen)
            p = self.path(".json")
            p.write_bytes(payload if kind == "bytes" else payload.encode("utf-8", "surrogatepass"))
            yield self.analyze(f"mutation-{i}", p)


def _paths(node: Any, path: tuple = ()) -> list[tuple]:
    found = []
    if isinstance(node, dict):
        for k, v in node.items():
            found.append((*path, k))
            found += _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):
            found.append((*path, i))
            found += _paths(v, (*path, i))
    return found


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


def _set(node: Any, path: tuple, value: Any) -> None:
    _get(node, path[:-1])[path[-1]] = value


def _drop(node: Any, path: tuple) -> None:
    parent = _get(node, path[:-1])
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


def _gzip_bomb(prefix: bytes, fill: bytes, size: int) -> bytes:
    """``prefix`` and ``fill`` repeated to ``size`` bytes, gzip-compressed (a few hundred KiB): one member
    compressed once and repeated (a gzip file may hold many members; readers join them)."""
    block = 16 << 20
    member = gzip.compress(fill * (block // len(fill)), 9)
    return gzip.compress(prefix, 9) + member * max(1, size // block)


def _hostile_cases(root: Path) -> list[Case]:
    rng = random.Random(HOSTILE_SEED)
    inputs = Inputs(root, rng)
    trace = inputs.write_doc(inputs.doc, gz=True)
    cases = [*inputs.files(), *inputs.values(), *inputs.structure(), *inputs.names(), *inputs.frames(),
             *inputs.what_ifs(trace), *inputs.outs(trace), *inputs.event_logs(), *inputs.mutations(15)]
    names = Counter(c.name for c in cases)
    for case in cases:  # output file names must not collide
        if names[case.name] > 1:
            case.name = f"{case.name}-{id(case)}"
    for i, case in enumerate(cases):
        case.name = f"{i:04d}-" + re.sub(r"[^A-Za-z0-9_.=-]", "_", case.name)[:60]
    return cases


@pytest.mark.slow
def test_hostile_inputs_through_the_real_cli(tmp_path):
    cases = _hostile_cases(tmp_path)
    assert len(cases) >= 300, len(cases)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYSTALPERF_")}
    # An empty home: no build-tool caches to walk; the cache of classified functions in the test's directory.
    env.update(HOME=str(home), CRYSTALPERF_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1",
               COLUMNS="100")
    work = tmp_path / "runs"
    work.mkdir()
    lock = threading.Lock()
    done: list[Outcome] = []
    zygotes: queue.SimpleQueue[Zygote] = queue.SimpleQueue()
    started_zygotes: list[Zygote] = []

    def run(indexed: tuple[int, Case]) -> None:
        index, case = indexed
        if case.env or index % REAL_PROCESS_EVERY == 0:
            outcome = _run(case, work, env)
        else:
            try:
                zygote = zygotes.get_nowait()
            except queue.Empty:
                zygote = Zygote(env)
                with lock:
                    started_zygotes.append(zygote)
            outcome = zygote.run(case, work)
            zygotes.put(zygote)
        with lock:
            done.append(outcome)

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            list(pool.map(run, enumerate(cases)))
    finally:
        for zygote in started_zygotes:
            zygote.close()
    elapsed = time.monotonic() - started
    summary = Counter("hang" if o.status is None else f"exit {o.status}" for o in done)
    failures = [(o.case.name, o.problem(), o.stderr.strip()[-300:]) for o in done if o.problem()]
    peak = max(done, key=lambda o: o.rss_bytes)
    slowest = max(done, key=lambda o: o.seconds)
    print(f"\n{len(done)} hostile inputs in {elapsed:.0f} s: {dict(sorted(summary.items()))}; "
          f"{len(failures)} failed; peak RSS {peak.rss_bytes / 2**20:.0f} MiB ({peak.case.name}); "
          f"slowest {slowest.seconds:.1f} s ({slowest.case.name})")
    for name, problem, err in sorted(failures):
        print(f"  FAILED {name}: {problem}: {err!r}")
    assert not failures, f"{len(failures)} of {len(done)} hostile inputs failed: " + "; ".join(
        f"{name}: {problem}" for name, problem, _ in sorted(failures)[:20])
