"""The line of a PySpark program that started each Spark job.

Spark names a job after the first frame outside Spark on the driver's stack when the job was submitted. A
DataFrame action called from Python (``df.count()``, ``df.write.parquet(...)``) reaches the JVM through py4j's
reflection, so that frame is the JDK's reflection accessor and the job is ``count at
NativeMethodAccessorImpl.java:0`` (PySpark sets a Python call site itself for a few actions only: ``collect``,
``toLocalIterator``, ``tail`` and the RDD API).

``configure()`` wraps py4j's ``GatewayClient.send_command``, through which every call from Python to the JVM goes,
in the driver's Python process. A call that lasts at least ``MIN_CALL_S`` (a job takes longer than that) appends
one line to ``pydriver-<pid>.jsonl`` in the spool directory: when it started and ended (the epoch clock the JVM's
events use on the same host), its thread and the first frame of the program outside PySpark and py4j.
Nothing the call sends or returns changes; a failure to record is logged once and recording stops. At most
``MAX_CALLS`` lines are written. The threads inside a call now are in ``_in_spark_call``, which the driver's own
sampler (:mod:`crystalperf.integrations.spark.driversampler`) leaves to the JVM's samplers. At job end :func:`read_driver_calls` reads them, and
:func:`crystalperf.integrations.spark.assemble.name_python_call_sites` puts the program's line in the place of the
reflection accessor in the names of the jobs submitted during a call, their stages and their SQL queries.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from crystalperf.core import limits
from crystalperf.core.record.hooks import guard

log = logging.getLogger("crystalperf")

CALLS_FILE = "pydriver-{pid}.jsonl"
# A call shorter than this started no job worth naming (a job's scheduling alone takes longer); shorter calls
# are not written, so a program's thousands of small py4j calls cost the wrapper a clock read each.
MIN_CALL_S = 0.005
MAX_CALLS = 100_000
# One line is about 150 bytes; a file past this (not ours, or damaged) is not read.
MAX_READ_BYTES = 64 << 20
# A file name longer than this (not a program's) is cut: it goes into job names.
MAX_FILE_CHARS = 1000

_state: dict[str, Any] = {"spool": None, "written": 0, "failed": False, "skip": ()}
_lock = threading.Lock()
_inside = threading.local()
# The threads inside a call into Spark now (thread ident -> True): the driver's sampler leaves them to the JVM's.
_in_spark_call: dict[int, bool] = {}
# The Spark Connect client's methods that send a request to the server and wait for it: its actions and commands
# (``_execute_and_fetch``, ``_execute``), a plan's analysis (a schema, an explain), the session's settings, its release.
CONNECT_REQUESTS = ("_execute_and_fetch", "_execute", "_analyze", "config", "release_session")


@dataclass(frozen=True)
class DriverCall:
    """One call from the PySpark driver's Python into the JVM: when (epoch seconds), on which Python thread, and
    the program's line that made it."""

    start: float
    end: float
    thread: int
    file: str
    line: int

    @property
    def site(self) -> str:
        return f"{self.file}:{self.line}"


def _package_dirs() -> tuple[str, ...]:
    """The directories whose frames are not the program's: PySpark's (its wheel or ``pyspark.zip``) and py4j's.
    (The wrapper's own frame is never on the stack it looks at; crystalperf's demo is a program like any other.)"""
    dirs = []
    for name in ("pyspark", "py4j"):
        location = getattr(sys.modules.get(name), "__file__", None)
        if location:
            dirs.append(os.path.dirname(os.path.abspath(location)))
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs)


def program_frame(frame: FrameType | None, skip: tuple[str, ...]) -> FrameType | None:
    """The first frame, from ``frame`` outward, whose file is not under one of the ``skip`` directories."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(skip) and not filename.startswith("<"):
            return frame
        frame = frame.f_back
    return None


def install(spool: str | os.PathLike[str], connect: bool = False) -> None:
    """Record the driver's calls into the JVM in ``spool`` (a later call moves them to its spool: a new
    session of the same process), and the files the program ships to the workers with ``addPyFile``. ``connect``:
    the program is a Spark Connect client, whose actions reach the server as requests, not py4j calls: those are
    recorded (``SparkConnectClient``'s methods that send one, :data:`CONNECT_REQUESTS`), and its thread is inside a
    call into Spark while one waits for the server (a session's settings sent on creation, its release on stop)."""
    from py4j.java_gateway import GatewayClient

    with _lock:
        _state.update(spool=Path(spool), written=0, failed=False, skip=())
    _record_added_files()
    _wrap(GatewayClient, "send_command")
    with guard("sampling the PySpark driver's own Python work"):
        from crystalperf.integrations.spark import driversampler

        driversampler.start(Path(spool), _in_spark_call)
    if connect:
        from pyspark.sql.connect.client.core import SparkConnectClient

        for method in CONNECT_REQUESTS:
            if hasattr(SparkConnectClient, method):  # the set differs between PySpark versions
                _wrap(SparkConnectClient, method)


def _wrap(owner: type, method: str) -> None:
    """Record the calls of ``owner.method`` that last ``MIN_CALL_S`` or more (once: a wrapped method stays)."""
    original = getattr(owner, method)
    if getattr(original, "_crystalperf", False):
        return

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_inside, "call", False):  # a retry inside py4j, a request inside a request: the outer one counts
            return original(self, *args, **kwargs)
        _inside.call = True
        ident = threading.get_ident()
        _in_spark_call[ident] = True
        started = time.time()
        try:
            return original(self, *args, **kwargs)
        finally:
            _inside.call = False
            _in_spark_call.pop(ident, None)
            ended = time.time()
            if ended - started >= MIN_CALL_S and not _state["failed"]:
                _record(started, ended, sys._getframe(1))

    recorded._crystalperf = True  # type: ignore[attr-defined]
    setattr(owner, method, recorded)


def _record_added_files() -> None:
    """``SparkContext.addPyFile(path)``: the workers import the file from a copy in a directory Spark deletes
    when the application stops, before the job-end analysis looks for the code of the functions sampled in it;
    the original's path lets the analysis find it (``assemble.add_shipped_file_roots``)."""
    from pyspark import SparkContext

    if getattr(SparkContext.addPyFile, "_crystalperf", False):
        return
    original = SparkContext.addPyFile

    def add_py_file(self: Any, path: str) -> None:
        original(self, path)
        try:
            added = str(path) if "://" in str(path) else os.path.abspath(path)
        except (TypeError, ValueError):  # Spark took it; what we keep of it is not the user's concern
            return
        _write({"added": added})

    add_py_file._crystalperf = True  # type: ignore[attr-defined]
    SparkContext.addPyFile = add_py_file  # type: ignore[method-assign]


def _write(entry: dict[str, Any]) -> None:
    try:
        with _lock:
            if _state["written"] >= MAX_CALLS or _state["spool"] is None or _state["failed"]:
                return
            with open(_state["spool"] / CALLS_FILE.format(pid=os.getpid()), "a", encoding="utf-8") as out:
                out.write(json.dumps(entry) + "\n")
            _state["written"] += 1
    except FileNotFoundError:
        # The application ended and its spool went with the trace (the calls of SparkContext.stop() and after
        # belong to no job): nothing is lost, so nothing is said.
        _state["failed"] = True
    except Exception as exc:  # the user's call has returned or raised already: it must not see ours
        _state["failed"] = True
        log.warning("crystalperf: could not record the Python lines of the driver's Spark calls (jobs keep "
                    "Spark's names): %s", exc)


def _record(started: float, ended: float, caller: FrameType) -> None:
    try:
        skip = _state["skip"] or _package_dirs()
        _state["skip"] = skip
        frame = program_frame(caller, skip)
    except Exception as exc:  # never the user's call's problem
        _state["failed"] = True
        log.warning("crystalperf: could not find the PySpark program's line of a call (jobs keep Spark's names): %s",
                    exc)
        return
    if frame is not None:
        _write({"start": round(started, 6), "end": round(ended, 6), "thread": threading.get_ident(),
                "file": frame.f_code.co_filename, "line": frame.f_lineno})


def read_driver_calls(spool: Path) -> tuple[list[DriverCall], list[str]]:
    """The calls every driver process recorded in ``spool`` and the files its program added with ``addPyFile``
    (their original paths); an unreadable file or line is logged and skipped."""
    calls: list[DriverCall] = []
    added: list[str] = []
    for path in sorted(spool.glob(CALLS_FILE.format(pid="*"))):
        with guard(f"reading the driver's Python call sites {path}"):
            if not limits.is_regular_file(path) or path.stat().st_size > MAX_READ_BYTES:
                raise ValueError(f"{path} is not a regular file of at most {MAX_READ_BYTES} bytes")
            text = path.read_text(encoding="utf-8", errors="replace")
            for number, raw in enumerate(text.splitlines(), 1):
                try:
                    entry = json.loads(raw)
                    if isinstance(entry, dict) and isinstance(entry.get("added"), str):
                        added.append(entry["added"])
                        continue
                    call = DriverCall(float(entry["start"]), float(entry["end"]), int(entry["thread"]),
                                      str(entry["file"])[:MAX_FILE_CHARS], int(entry["line"]))
                except (ValueError, KeyError, TypeError) as exc:
                    log.info("crystalperf: %s:%d: not a call line (%s)", path, number, exc)
                    continue
                calls.append(call)
    return calls, added
