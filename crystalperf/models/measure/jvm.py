"""JVM methods labelled by measurement: workloads run under JDK Flight Recorder, time attributed to stacks.

``python -m crystalperf.models.measure.jvm --out DIR [--quick]`` compiles our drivers
(``jvm_workloads/*.java``) against the JDK, the Debian Java libraries in ``/usr/share/java`` and the Scala
library, runs each under JFR (one JVM at a time, ``nice -n 10``, bounded by ``timeout``), and writes
``DIR/jvm.jsonl`` in the measured-function format (docs in ``SOURCES.md``); ``--drivers NAME ...`` runs
only those drivers (``WORKLOADS`` keys, all their phases). ``--drop-caches`` (root) drops
the page cache before each driver so that first reads come from the disk; off by default because it
slows every other process on the machine.

How a recording becomes labels:

* each event's time is ``cpu`` (``jdk.ExecutionSample``: one sampling period per sample; a
  ``jdk.NativeMethodSample`` in native code that is not I/O or waiting, e.g. ``Inflater``, crypto),
  ``disk`` (``jdk.FileRead``/``FileWrite``/``FileForce`` durations; native samples in file-system calls
  no event covers: stat, open, mkdir, fsync), ``network`` (``jdk.SocketRead``/``SocketWrite`` durations;
  native samples in socket, selector and name-lookup calls: accept, epoll, UDP) or ``waiting``
  (``jdk.ThreadPark``/``JavaMonitorWait``/``JavaMonitorEnter``/``ThreadSleep`` durations; native samples
  in ``java.nio`` Pipe reads and writes);
* native samples inside a method JFR already times as I/O, or parked/sleeping, are dropped: the event
  holds that time, counting the sample too would count it twice;
* JFR samples at most one native thread per period, so a native sample stands for the gap since the
  same thread's previous native sample (capped), not for one period;
* the time goes to every distinct method on the event's stack (inclusive; a recursive method once), but
  not below a class loader's frame: the I/O and CPU of loading a class or reading a jar's resources on
  first use belong to the loader, not to the method that happened to touch the class first (a job's
  steady state does not pay it again; the Python side leaves out I/O made while importing for the same
  reason);
* a method is labelled with its dominant resource when that share is >= 0.6 over >= 10 ms and >= 5
  events; otherwise it is written with ``"label": null``. Our own driver classes (``cpwork.``) and
  hidden frames (lambda forms) get no row.

The label is the method's **own work** (what a report says next to its name), measured by the rule of
:func:`own_work_frames`: an event's time goes up its stack until a thread hand-off (a scheduling or
synchronisation frame, ``core.attribution.waiting.is_plumbing``: a method does not do the work a pool thread was
handed), and a disk or network event's time goes no further than the library that called the I/O (the JDK's
stream, channel or socket classes, then the first library above them: Hadoop's ``RawLocalFileSystem`` reads; the
Parquet reader above it asked for bytes and decodes them). CPU and waits pass library boundaries: a method that
hands its parsing to Jackson or its wait to a lock still spends that time itself. Each row also keeps the
inclusive figures (``inclusive``: every method on the stack, the attribution before own work), so
:func:`crystalperf.models.measured.label_changes` can say where the two disagree.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from crystalperf.core.attribution.sources import LocateContext
from crystalperf.core.attribution.sources.jvm import JvmLocator, jdk_src_zip
from crystalperf.core.attribution.waiting import is_plumbing
from crystalperf.core.trace import Frame
from crystalperf.models.corpus import FORBIDDEN
from crystalperf.models.measured import label_changes

log = logging.getLogger(__name__)

RESOURCES = ("cpu", "disk", "network", "waiting")
MIN_SHARE = 0.6
MIN_SECONDS = 0.010
MIN_EVENTS = 5
SAMPLE_PERIOD_MS = 1  # asked for; the JVM delivers less often (see effective_period)
NATIVE_PERIOD_MS = 1
NATIVE_GAP_CAP = 10  # periods: a thread unsampled for longer was probably not in native code all along
MAX_PERIOD_FACTOR = 20
# Stacks whose methods the attribution remembers, per recording: a remembered deep stack holds a few KB.
MAX_REMEMBERED_STACKS = 50_000
DRIVER_PACKAGE = "cpwork."
WORKLOAD_DIR = Path(__file__).with_name("jvm_workloads")
JDK_LICENCE = "GPL-2.0-only WITH Classpath-exception-2.0"
SCALA_LICENCE = "Apache-2.0"

EVENT_RESOURCE = {
    "jdk.ExecutionSample": "cpu",
    "jdk.FileRead": "disk",
    "jdk.FileWrite": "disk",
    "jdk.FileForce": "disk",
    "jdk.SocketRead": "network",
    "jdk.SocketWrite": "network",
    "jdk.ThreadPark": "waiting",
    "jdk.JavaMonitorWait": "waiting",
    "jdk.JavaMonitorEnter": "waiting",
    "jdk.ThreadSleep": "waiting",
}
NATIVE_SAMPLE = "jdk.NativeMethodSample"

# Methods JFR instruments with FileRead/FileWrite/SocketRead/SocketWrite/FileForce: a native sample below
# one of them is time the I/O event already holds.
_TIMED_IO = re.compile(
    r"^(java\.io\.(FileInputStream\.read|FileOutputStream\.write|RandomAccessFile\.(read|write))"
    r"|sun\.nio\.ch\.FileChannelImpl\.(read|write|force)"
    r"|sun\.nio\.ch\.SocketChannelImpl\.(read|write)"
    r"|java\.net\.Socket\$Socket(InputStream\.read|OutputStream\.write))"
)
_WAIT_NATIVE = re.compile(
    r"^(jdk\.internal\.misc\.Unsafe\.park|java\.lang\.Object\.wait|java\.lang\.Thread\.(sleep|yield|onSpinWait))"
)
# java.nio.channels.Pipe ends read and write through FileDispatcherImpl, like files: a hand-off between threads
# (JeroMQ's signaller), not disk I/O; waiting, as pipes are on the Python side.
# A class loader at work (loading, defining, finding a class or a resource, iterating service providers): the
# frames below it, its callers, get none of the event's time.
_CLASS_LOADING = re.compile(
    r"^(java\.lang\.ClassLoader|java\.security\.SecureClassLoader|java\.net\.URLClassLoader"
    r"|jdk\.internal\.loader\.[\w$]+)\.(loadClass\w*|findClass\w*|defineClass\w*|getResource\w*|findResource\w*)$"
    r"|^java\.util\.ServiceLoader[\w$]*\.(hasNext\w*|next\w*|parse\w*)$"
)
_PIPE_NATIVE = re.compile(r"^sun\.nio\.ch\.(SourceChannelImpl|SinkChannelImpl)\.")
_DISK_NATIVE = re.compile(
    r"^(sun\.nio\.fs\.UnixNativeDispatcher|java\.io\.(UnixFileSystem|FileDescriptor|FileInputStream"
    r"|FileOutputStream|RandomAccessFile|FileCleanable)|sun\.nio\.ch\.(FileDispatcherImpl|FileChannelImpl"
    r"|UnixFileDispatcherImpl|FileKey)|java\.nio\.MappedMemoryUtils|sun\.nio\.fs\.UnixCopyFile)\."
)
_NETWORK_NATIVE = re.compile(
    r"^(sun\.nio\.ch\.(SocketDispatcher|DatagramDispatcher|Net|EPoll|NioSocketImpl|DatagramChannelImpl"
    r"|ServerSocketChannelImpl|SocketChannelImpl|UnixDomainSockets)|java\.net\.(Inet4AddressImpl|Inet6AddressImpl"
    r"|InetAddress|NetworkInterface)|io\.netty\.channel\.(epoll|unix)\.)"
)

JFC = """<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0" label="crystalperf-measure">
{events}
</configuration>
"""


def jfc_settings(sample_period_ms: int = SAMPLE_PERIOD_MS, native_period_ms: int = NATIVE_PERIOD_MS) -> str:
    """The recording settings: every I/O and wait event with threshold 0 and a stack, both samplers."""
    parts = [
        f'<event name="jdk.ExecutionSample"><setting name="enabled">true</setting>'
        f'<setting name="period">{sample_period_ms} ms</setting></event>',
        f'<event name="jdk.NativeMethodSample"><setting name="enabled">true</setting>'
        f'<setting name="period">{native_period_ms} ms</setting></event>',
    ]
    for name in EVENT_RESOURCE:
        if name == "jdk.ExecutionSample":
            continue
        parts.append(
            f'<event name="{name}"><setting name="enabled">true</setting><setting name="stackTrace">true</setting>'
            f'<setting name="threshold">0 ms</setting></event>'
        )
    return JFC.format(events="\n".join(parts))


# ---------------------------------------------------------------------------------------------------
# Events


@dataclass(frozen=True)
class JfrFrame:
    class_name: str  # binary name, dotted
    method: str
    line: int | None = None
    module: str | None = None  # JDK module name (java.base), None for classpath classes
    hidden: bool = False

    @property
    def qualified_name(self) -> str:
        return f"{self.class_name}.{self.method}"


@dataclass(frozen=True)
class JfrEvent:
    kind: str
    start_ns: int
    duration_s: float
    thread: int
    frames: tuple[JfrFrame, ...]  # top first


def _iso_duration(text: str) -> float:
    """``PT0.000011644S`` / ``PT1M2.5S`` -> seconds."""
    m = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?", text or "")
    if not m:
        return 0.0
    hours, minutes, seconds = m.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0)


def _iso_ns(text: str) -> int:
    """``2026-11-25T06:11:29.148440200Z`` -> nanoseconds since the epoch (for ordering and gaps)."""
    from datetime import datetime, timezone

    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z?", text or "")
    if not m:
        return 0
    whole = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    fraction = (m.group(2) or "0")[:9].ljust(9, "0")
    return int(whole.timestamp()) * 1_000_000_000 + int(fraction)


def _json_event(raw: dict) -> JfrEvent | None:
    values = raw.get("values") or {}
    stack = values.get("stackTrace") or {}
    frames = []
    for f in stack.get("frames") or []:
        method = f.get("method") or {}
        cls = method.get("type") or {}
        package = cls.get("package") or {}
        module = (package.get("module") or {}).get("name")
        line = f.get("lineNumber")
        frames.append(
            JfrFrame(
                str(cls.get("name", "")).replace("/", "."),
                str(method.get("name", "")),
                line if isinstance(line, int) and line >= 0 else None,
                module,
                bool(method.get("hidden") or cls.get("hidden")),
            )
        )
    thread = values.get("sampledThread") or values.get("eventThread") or {}
    return JfrEvent(
        str(raw.get("type", "")),
        _iso_ns(str(values.get("startTime", ""))),
        _iso_duration(str(values.get("duration", ""))),
        int(thread.get("javaThreadId") or -1),
        tuple(frames),
    )


def read_jfr_json(stream: IO[str], chunk_chars: int = 1 << 20) -> Iterator[JfrEvent]:
    """Events of ``jfr print --json --stack-depth N``, streamed: one event object decoded at a time, so a
    recording of gigabytes needs the memory of its largest event, not of the document."""
    decoder = json.JSONDecoder()
    buffer = ""
    pos = 0
    eof = False

    def refill() -> bool:
        nonlocal buffer, pos, eof
        more = "" if eof else stream.read(chunk_chars)
        eof = eof or not more
        buffer = buffer[pos:] + more  # what was decoded is dropped: the buffer stays about a chunk long
        pos = 0
        return bool(more)

    while True:  # up to the events array
        at = buffer.find('"events"')
        bracket = buffer.find("[", at) if at >= 0 else -1
        if bracket >= 0:
            pos = bracket + 1
            break
        if not refill():
            return
    while True:
        while True:
            while pos < len(buffer) and buffer[pos] in " \t\r\n,":
                pos += 1
            if pos < len(buffer) or not refill():
                break
        if pos >= len(buffer) or buffer[pos] == "]":
            return
        try:
            raw, end = decoder.raw_decode(buffer, pos)
        except json.JSONDecodeError:
            if not refill():  # the event continues past the buffer, or the document is cut short
                raise ValueError("jfr print --json output ends inside an event") from None
            continue
        pos = end
        if isinstance(raw, dict):
            event = _json_event(raw)
            if event is not None:
                yield event


def read_jfr_lines(stream: Iterable[str]) -> Iterator[JfrEvent]:
    """Events of our converter (``JfrLines.java``): frames defined once, events naming them by id."""
    frames: dict[int, JfrFrame] = {}
    for line in stream:
        if not line.strip():
            continue
        row = json.loads(line)
        if "f" in row:
            number = row.get("l")
            frames[int(row["f"])] = JfrFrame(
                row["c"], row["m"], number if isinstance(number, int) and number >= 0 else None, row.get("mod"),
                bool(row.get("h")),
            )
        else:
            yield JfrEvent(row["e"], int(row["t"]), int(row["d"]) / 1e9, int(row["th"]),
                           tuple(frames[i] for i in row["s"]))


# ---------------------------------------------------------------------------------------------------
# Attribution


def native_resource(frames: Sequence[JfrFrame]) -> str | None:
    """What a thread sampled in native code spends its time on; None when an event already holds it."""
    names = [f.qualified_name for f in frames]
    if not names:
        return None
    if any(_TIMED_IO.match(n) for n in names) or _WAIT_NATIVE.match(names[0]):
        return None
    if any(_PIPE_NATIVE.match(n) for n in names):
        return "waiting"
    top = names[0]
    if _DISK_NATIVE.match(top):
        return "disk"
    if _NETWORK_NATIVE.match(top):
        return "network"
    return "cpu"


JDK_LIBRARY = "jdk"
# Every frame of millions of events is asked: the names repeat, the regular expressions are slow.
_plumbing = functools.lru_cache(maxsize=1 << 18)(is_plumbing)
_JDK_CLASS = re.compile(r"^(?:java|javax|jdk|sun|com\.sun)\.")


def package_library(frame: JfrFrame) -> str:
    """A frame's library without a class index: the JDK as one library, else the class's first three package
    names (``org.apache.hadoop``)."""
    if frame.module or _JDK_CLASS.match(frame.class_name):
        return JDK_LIBRARY
    return ".".join(frame.class_name.split(".")[:-1][:3]) or frame.class_name


def own_work_frames(frames: Sequence[JfrFrame], resource: str,
                    library_of: Callable[[JfrFrame], str] = package_library) -> list[int]:
    """Indexes (top first) of the frames whose own work an event's time is.

    Scheduling and synchronisation frames on top of the stack (the wait primitive, a pool's idle loop) are passed
    over; from the first other frame, the time goes up the stack until a thread hand-off (the next such frame) or
    a class loader's callers. A disk or network event goes no further than the library that called the I/O: the
    frames of the library on top (the JDK's streams and channels), then those of the first library above them."""
    start = 0
    while start < len(frames) and _plumbing(frames[start].qualified_name):
        start += 1
    io = resource in ("disk", "network")
    libraries_seen = 0
    library = None
    chosen: list[int] = []
    for depth in range(start, len(frames)):
        frame = frames[depth]
        if depth > start and (_CLASS_LOADING.match(frames[depth - 1].qualified_name)
                              or _plumbing(frame.qualified_name)):
            break
        if io:
            this = library_of(frame)
            if this != library:
                libraries_seen += 1
                library = this
                if libraries_seen > 2:
                    break
        chosen.append(depth)
    return chosen


@dataclass
class MethodTime:
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(RESOURCES, 0.0))
    events: int = 0
    workloads: set[str] = field(default_factory=set)
    frame: JfrFrame | None = None  # a representative frame (first seen) to locate the code by
    lines: dict[int, int] = field(default_factory=dict)  # line -> events, to pick the commonest
    own: dict[str, float] = field(default_factory=lambda: dict.fromkeys(RESOURCES, 0.0))
    own_events: int = 0


class Attribution:
    """Measured time per method, over any number of recordings: inclusive (every method on an event's stack)
    and, where ``library_of`` is given, own work (:func:`own_work_frames`, libraries told apart by it)."""

    def __init__(self, library_of: Callable[[JfrFrame], str] | None = None) -> None:
        self.methods: dict[str, MethodTime] = defaultdict(MethodTime)
        self.totals: dict[str, float] = dict.fromkeys(RESOURCES, 0.0)
        self.events = 0
        self.library_of = library_of
        self._plans: dict[tuple[tuple[JfrFrame, ...], bool], tuple[tuple[tuple[str, JfrFrame], ...], tuple[str, ...]]] = {}

    @property
    def own_work(self) -> bool:
        return self.library_of is not None

    def add_event(self, frames: Sequence[JfrFrame], resource: str, seconds: float, workload: str) -> None:
        if seconds <= 0:
            return
        self.events += 1
        self.totals[resource] += seconds
        inclusive, own = self._plan(frames, resource in ("disk", "network"))
        for name, frame in inclusive:
            entry = self.methods[name]
            entry.seconds[resource] += seconds
            entry.events += 1
            entry.workloads.add(workload)
            if entry.frame is None:
                entry.frame = frame
            if frame.line is not None and len(entry.lines) < 64:
                entry.lines[frame.line] = entry.lines.get(frame.line, 0) + 1
        for name in own:
            entry = self.methods[name]
            entry.own[resource] += seconds
            entry.own_events += 1

    def _plan(self, frames: Sequence[JfrFrame], io: bool) -> tuple[tuple[tuple[str, JfrFrame], ...], tuple[str, ...]]:
        """The methods an event's time goes to, inclusive (each once, none below a class loader's frame) and own
        work; remembered per stack, since a recording's events repeat their stacks."""
        key = (tuple(frames), io)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        inclusive: list[tuple[str, JfrFrame]] = []
        seen: set[str] = set()
        for depth, frame in enumerate(frames):
            if depth and _CLASS_LOADING.match(frames[depth - 1].qualified_name):
                break  # the loader's callers: first use, not what they do
            name = frame.qualified_name
            if name not in seen:  # recursion: the event's time counts once per method
                seen.add(name)
                inclusive.append((name, frame))
        own: tuple[str, ...] = ()
        if self.library_of is not None:
            chosen = own_work_frames(frames, "disk" if io else "cpu", self.library_of)
            own = tuple(dict.fromkeys(frames[depth].qualified_name for depth in chosen))
        plan = (tuple(inclusive), own)
        if len(self._plans) < MAX_REMEMBERED_STACKS:
            self._plans[key] = plan
        return plan

    def add_recording(
        self,
        events: Iterable[JfrEvent],
        workload: str,
        sample_period_s: float = SAMPLE_PERIOD_MS / 1000,
        native_period_s: float = NATIVE_PERIOD_MS / 1000,
        estimate_period: bool = True,
    ) -> int:
        """Attribute one recording's events; returns how many were used. The sampling periods are the
        configured ones, or (``estimate_period``) what the recording shows them to be."""
        self._plans.clear()  # another program's stacks
        natives: list[JfrEvent] = []
        samples: list[JfrEvent] = []
        used = 0
        for event in events:
            if event.kind == NATIVE_SAMPLE:
                natives.append(event)
                continue
            resource = EVENT_RESOURCE.get(event.kind)
            if resource is None or not event.frames:
                continue
            if event.kind == "jdk.ExecutionSample":
                samples.append(event)
                continue
            self.add_event(event.frames, resource, event.duration_s, workload)
            used += 1
        # The JVM may sample less often than asked (JDK 17 Java sampling runs at 10 ms at the fastest), so
        # a sample weighs the period the recording really has, not the configured one.
        if estimate_period:
            sample_period_s = effective_period(samples, sample_period_s)
            native_period_s = effective_period(natives, native_period_s)
        for event in samples:
            self.add_event(event.frames, "cpu", sample_period_s, workload)
            used += 1
        last_seen: dict[int, int] = {}
        for event in sorted(natives, key=lambda e: e.start_ns):
            previous = last_seen.get(event.thread)
            last_seen[event.thread] = event.start_ns
            resource = native_resource(event.frames)
            if resource is None:
                continue
            gap = (event.start_ns - previous) / 1e9 if previous is not None else native_period_s
            seconds = min(max(gap, native_period_s), NATIVE_GAP_CAP * native_period_s)
            self.add_event(event.frames, resource, seconds, workload)
            used += 1
        return used


def effective_period(samples: Sequence[JfrEvent], configured_s: float) -> float:
    """The median gap between consecutive samples of the same thread, between the configured period and
    ``MAX_PERIOD_FACTOR`` times it: the JVM samples less often than asked (JDK 17's Java sampler runs at
    10 ms at the fastest; a starved sampler thread on a busy machine, slower still), and a sample stands
    for the time between samples. The cap keeps a thread that left the sampled state from counting."""
    by_thread: dict[int, list[int]] = defaultdict(list)
    for event in samples:
        by_thread[event.thread].append(event.start_ns)
    gaps: list[int] = []
    for times in by_thread.values():
        times.sort()
        gaps.extend(b - a for a, b in zip(times, times[1:], strict=False) if b > a)
    if len(gaps) < 5:
        return configured_s
    gaps.sort()
    return min(max(configured_s, gaps[len(gaps) // 2] / 1e9), MAX_PERIOD_FACTOR * configured_s)


def label_of(seconds: dict[str, float], events: int) -> tuple[str | None, dict[str, float], float]:
    """(label or None, shares, total seconds): the dominant resource when clear and well evidenced."""
    total = sum(seconds.values())
    shares = {r: (seconds.get(r, 0.0) / total if total > 0 else 0.0) for r in RESOURCES}
    best = max(RESOURCES, key=lambda r: shares[r])
    if total >= MIN_SECONDS and events >= MIN_EVENTS and shares[best] >= MIN_SHARE:
        return best, shares, total
    return None, shares, total


def excluded(frame: JfrFrame) -> bool:
    """Frames that are not library code we may train on: our drivers, hidden and generated classes."""
    name = frame.class_name
    return (
        frame.hidden
        or name.startswith(DRIVER_PACKAGE)
        or "$$Lambda" in name
        or "LambdaForm$" in name
        or name.startswith(("jdk.internal.reflect.Generated", "jdk.proxy"))
        or bool(FORBIDDEN.search(frame.qualified_name))
    )


# ---------------------------------------------------------------------------------------------------
# Libraries, licences, code


@dataclass(frozen=True)
class LibraryJar:
    debian_package: str
    jar: str


# The Debian packages the drivers use (``apt-get install`` them); jars that are missing are left out and
# the drivers needing them fail to compile, which costs those drivers only.
DEBIAN_JARS = (
    LibraryJar("libcommons-io-java", "commons-io.jar"),
    LibraryJar("libcommons-compress-java", "commons-compress.jar"),
    LibraryJar("libcommons-codec-java", "commons-codec.jar"),
    LibraryJar("libcommons-lang3-java", "commons-lang3.jar"),
    LibraryJar("libxz-java", "xz.jar"),
    LibraryJar("libsnappy-java", "snappy-java.jar"),
    LibraryJar("libzstd-jni-java", "zstd-jni.jar"),
    LibraryJar("libguava-java", "guava.jar"),
    LibraryJar("libjackson2-databind-java", "jackson-databind.jar"),
    LibraryJar("libjackson2-core-java", "jackson-core.jar"),
    LibraryJar("libjackson2-annotations-java", "jackson-annotations.jar"),
    LibraryJar("libjetty9-java", "jetty9-server.jar"),
    LibraryJar("libjetty9-java", "jetty9-util.jar"),
    LibraryJar("libjetty9-java", "jetty9-http.jar"),
    LibraryJar("libjetty9-java", "jetty9-io.jar"),
    LibraryJar("libservlet-api-java", "servlet-api.jar"),
    LibraryJar("libhttpclient-java", "httpclient.jar"),
    LibraryJar("libhttpcore-java", "httpcore.jar"),
    LibraryJar("libcommons-logging-java", "commons-logging.jar"),
    LibraryJar("libokhttp-java", "okhttp.jar"),
    LibraryJar("libokio-java", "okio.jar"),
    LibraryJar("libnetty-java", "netty-transport.jar"),
    LibraryJar("libnetty-java", "netty-buffer.jar"),
    LibraryJar("libnetty-java", "netty-common.jar"),
    LibraryJar("libnetty-java", "netty-resolver.jar"),
    LibraryJar("libnetty-java", "netty-codec.jar"),
    LibraryJar("libh2-java", "h2.jar"),
    LibraryJar("libderby-java", "derby.jar"),
    LibraryJar("libhsqldb-java", "hsqldb.jar"),
    LibraryJar("libjsoup-java", "jsoup.jar"),
    LibraryJar("liblucene8-java", "lucene-core-8*.jar"),
    LibraryJar("liblucene8-java", "lucene-analyzers-common-8*.jar"),
    LibraryJar("liblucene8-java", "lucene-queryparser-8*.jar"),
    LibraryJar("libleveldb-java", "leveldb.jar"),
    LibraryJar("libleveldb-api-java", "leveldb-api.jar"),
    LibraryJar("libsqljet-java", "sqljet.jar"),
    LibraryJar("libantlr3-runtime-java", "antlr3-runtime.jar"),
    LibraryJar("liblz4-java", "lz4-java.jar"),
    LibraryJar("libcommons-dbcp2-java", "commons-dbcp2.jar"),
    LibraryJar("libcommons-pool2-java", "commons-pool2.jar"),
    LibraryJar("libmina2-java", "mina2-core.jar"),
    LibraryJar("libslf4j-java", "slf4j-api.jar"),
    LibraryJar("libjeromq-java", "jeromq.jar"),
    LibraryJar("libcommons-net-java", "commons-net.jar"),
    LibraryJar("libjakarta-mail-java", "jakarta-mail.jar"),
    LibraryJar("libjakarta-activation-java", "jakarta-activation.jar"),
    LibraryJar("libhttpasyncclient-java", "httpasyncclient.jar"),
    LibraryJar("libhttpcore-java", "httpcore-nio.jar"),
    LibraryJar("libthrift-java", "thrift.jar"),
    LibraryJar("libzookeeper-java", "zookeeper.jar"),
    LibraryJar("libzookeeper-java", "zookeeper-jute.jar"),
    LibraryJar("libdisruptor-java", "disruptor.jar"),
    LibraryJar("libxerial-sqlite-jdbc-java", "sqlite-jdbc.jar"),
    LibraryJar("libhikaricp-java", "HikariCP.jar"),
    LibraryJar("libavro-java", "avro.jar"),
    LibraryJar("libavro-java", "avro-guava-dependencies.jar"),
    LibraryJar("libjackson-json-java", "jackson-core-asl.jar"),
    LibraryJar("libjackson-json-java", "jackson-mapper-asl.jar"),
    LibraryJar("libparanamer-java", "paranamer.jar"),
    LibraryJar("libkryo-java", "kryo.jar"),
    LibraryJar("libminlog-java", "minlog.jar"),
    LibraryJar("libobjenesis-java", "objenesis.jar"),
    LibraryJar("libreflectasm-java", "reflectasm.jar"),
    LibraryJar("libasm-java", "asm.jar"),
    LibraryJar("libehcache-java", "ehcache.jar"),
    LibraryJar("libcommons-collections3-java", "commons-collections3.jar"),
    LibraryJar("libhessian-java", "hessian.jar"),
    LibraryJar("libspymemcached-java", "spymemcached.jar"),
    LibraryJar("libjgroups-java", "jgroups.jar"),
    LibraryJar("libcommons-vfs-java", "commons-vfs2.jar"),
    LibraryJar("libprotobuf-java", "protobuf.jar"),
)
DEBIAN_JAR_DIR = Path("/usr/share/java")

# Driver class -> the phases it runs (``all`` = every phase); quick mode runs the first phase of a few.
WORKLOADS: dict[str, tuple[str, ...]] = {
    "JdkFiles": ("all",),
    "JdkArchive": ("all",),
    "JdkCpu": ("all",),
    "JdkNet": ("all",),
    "JdkConcurrent": ("all",),
    "JdkMore": ("all",),
    "JdbcEmbedded": ("h2", "h2-tcp", "derby", "hsqldb", "hsqldb-server"),
    "Libs": ("all",),
    "LibNet": ("all",),
    "Lucene": ("all",),
    "ScalaLib": ("all",),
    "LibStore": ("leveldb", "sqljet", "lz4", "dbcp2-h2"),
    "LibNet2": ("mina", "jeromq", "commons-net-mail", "commons-net", "jakarta-mail", "httpasyncclient"),
    "LibRpc": ("thrift", "thrift-hsha", "thrift-file", "zookeeper", "disruptor"),
    "LibData": ("sqlite-hikari", "avro", "avro-stream", "kryo", "ehcache"),
    "LibWire": ("hessian", "memcached", "jgroups", "vfs", "protobuf"),
}
# JVM options a driver needs: Hessian 4's serializer factory reflects into java.lang (StackTraceElement) when
# it is created, which JDK 17 refuses unless the package is opened.
DRIVER_JVM_OPTIONS: dict[str, tuple[str, ...]] = {
    "LibWire": ("--add-opens", "java.base/java.lang=ALL-UNNAMED"),
}
QUICK_WORKLOADS = {"JdkFiles": ("streams",), "JdkCpu": ("regex",), "JdkNet": ("socket",),
                   "JdkConcurrent": ("queues",)}


def scala_library_jar() -> Path | None:
    """The Scala standard library jar inside an installed pyspark wheel (only the Scala jar is used)."""
    roots = [Path(sys.prefix), *Path(__file__).resolve().parents[3].glob(".nox/*")]
    for root in roots:
        for jar in sorted(root.glob("lib/python3*/site-packages/pyspark/jars/scala-library-*.jar")):
            return jar
    return None


def debian_licence(package: str) -> str:
    """The licence of the ``Files: *`` stanza of the package's Debian copyright file."""
    copyright_file = Path("/usr/share/doc") / package / "copyright"
    try:
        text = copyright_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"unknown (no {copyright_file})"
    m = re.search(r"^Files:\s*\*\s*$.*?^License:\s*(\S[^\n]*)", text, re.M | re.S)
    if m:
        return m.group(1).strip()
    m = re.search(r"^License:\s*(\S[^\n]*)", text, re.M)
    return m.group(1).strip() if m else f"see {copyright_file}"


class ClassIndex:
    """Which classpath jar holds a class, and which Debian package / licence that jar belongs to."""

    def __init__(self, jars: Sequence[tuple[str, Path, str]]) -> None:
        import zipfile

        self.owner: dict[str, tuple[str, Path, str]] = {}
        self._packages: dict[str, str] = {}
        for library, jar, licence in jars:
            try:
                with zipfile.ZipFile(jar) as z:
                    for entry in z.namelist():
                        if entry.endswith(".class"):
                            self.owner.setdefault(entry[:-6].replace("/", "."), (library, jar, licence))
            except (OSError, zipfile.BadZipFile) as exc:
                log.warning("%s: unreadable jar (%s)", jar, exc)

    def library_name(self, frame: JfrFrame) -> str:
        """The library the own-work rule tells a frame's class by: its Debian package, else :func:`package_library`."""
        owner = self.owner.get(frame.class_name)
        if owner is not None:
            return owner[0]
        known = self._packages.get(frame.class_name)
        if known is None:
            known = self._packages[frame.class_name] = package_library(frame)
        return known

    def library(self, frame: JfrFrame) -> tuple[str, str, str | None]:
        """(library, licence, jar or JDK module) of a frame's class."""
        owner = self.owner.get(frame.class_name)
        if owner is not None:
            return owner[0], owner[2], str(owner[1])
        package = frame.class_name.rsplit(".", 1)[0] if "." in frame.class_name else ""
        group = ".".join(package.split(".")[:3])
        module = frame.module or "jdk"
        return f"{module}/{group}", JDK_LICENCE, frame.module


def jdk_src_zip_available() -> bool:
    """Whether JDK methods can get their source rendering (Debian: ``openjdk-17-source``)."""
    return jdk_src_zip() is not None


def extract_jdk_classes(modules: Iterable[str], into: Path) -> None:
    """The JDK's class files of these modules (from ``lib/modules``) for the bytecode rendering."""
    java_home = Path(os.path.realpath(shutil.which("java") or "java")).parent.parent
    image = java_home / "lib" / "modules"
    jimage = java_home / "bin" / "jimage"
    if not image.is_file() or not jimage.is_file():
        log.warning("no jimage/lib/modules under %s: JDK methods get no bytecode rows", java_home)
        return
    for module in sorted(set(modules)):
        if (into / module).is_dir() or not re.fullmatch(r"[\w.]+", module):
            continue
        subprocess.run([str(jimage), "extract", "--dir", str(into), "--include", f"regex:/{re.escape(module)}/.*",
                        str(image)], check=False, capture_output=True, timeout=300)


def method_rows(
    attribution: Attribution, index: ClassIndex, jdk_classes: Path | None, classpath: Sequence[str]
) -> Iterator[dict]:
    """The measured-function rows: source rendering where a source exists (plus its bytecode twin), the
    bytecode rendering otherwise; methods whose code cannot be found are left out."""
    source_locator = JvmLocator(use_caches=False)
    bytecode_locator = JvmLocator(use_caches=False, use_jdk=False)
    context = LocateContext(classpath=list(classpath))
    for name in sorted(attribution.methods):
        entry = attribution.methods[name]
        frame = entry.frame
        if frame is None or excluded(frame):
            continue
        label, shares, seconds = label_of(entry.seconds, entry.events)
        inclusive: dict[str, object] | None = None
        events = entry.events
        if attribution.own_work:
            inclusive = {"label": label, "shares": {r: round(x, 6) for r, x in shares.items()},
                         "seconds": round(seconds, 6), "events": entry.events}
            label, shares, seconds = label_of(entry.own, entry.own_events)
            events = entry.own_events
        library, licence, where = index.library(frame)
        if frame.module and jdk_classes is not None:
            where = str(jdk_classes / frame.module)
        language = "scala" if frame.class_name.startswith("scala.") else "java"
        line = max(entry.lines, key=lambda k: entry.lines[k]) if entry.lines else frame.line
        jvm_frame = Frame(name=name, line=line, language=language, module=where)
        base: dict[str, object] = {
            "language": language,
            "qualified_name": name,
            "library": library,
            "licence": licence,
            "label": label,
            "shares": {r: round(s, 6) for r, s in shares.items()},
            "seconds": round(seconds, 6),
            "events": events,
            "workloads": sorted(entry.workloads),
            "method": "jfr",
        }
        if inclusive is not None:
            base["inclusive"] = inclusive
        found = source_locator.locate(jvm_frame, context)
        if (found is None or found.origin == "bytecode") and line is not None:
            # JFR's I/O instrumentation replaces the bodies of FileOutputStream.write & co.; their recorded
            # lines are those of the instrumentor's source, not of the method's.
            retry = source_locator.locate(jvm_frame.model_copy(update={"line": None}), context)
            found = retry if retry is not None else found
        if found is not None and found.origin != "bytecode":
            yield {"id": f"{language}:{name}", **base, "code": found.code, "doc": found.doc, "origin": "source"}
            found = bytecode_locator.locate(jvm_frame, context)
            if found is not None:
                yield {"id": f"{language}:{name}#bytecode", **base, "code": found.code, "doc": "",
                       "origin": "bytecode"}
        elif found is not None:
            yield {"id": f"{language}:{name}", **base, "code": found.code, "doc": found.doc, "origin": "bytecode"}


def write_jsonl_atomic(rows: Iterable[dict], path: Path) -> int:
    """Write rows to a temporary file beside ``path`` and rename it over: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row, sort_keys=True) + "\n")
                count += 1
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


# ---------------------------------------------------------------------------------------------------
# Running


@dataclass
class Toolchain:
    classes: Path
    classpath: list[str]
    jars: list[tuple[str, Path, str]]  # (library, jar, licence)
    compiled: list[str]


def build_toolchain(work: Path, drivers: Iterable[str] | None = None) -> Toolchain:
    """Compile the converter and every driver (or only ``drivers``) that compiles against the jars present."""
    jars: list[tuple[str, Path, str]] = []
    for item in DEBIAN_JARS:
        for jar in sorted(DEBIAN_JAR_DIR.glob(item.jar))[:1]:  # some packages ship versioned names only
            if jar.is_file():
                jars.append((item.debian_package, jar.resolve(), debian_licence(item.debian_package)))
    scala = scala_library_jar()
    if scala is not None:
        jars.append(("scala-library", scala, SCALA_LICENCE))
    classpath = [str(j) for _, j, _ in jars]
    classes = work / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    base = [str(WORKLOAD_DIR / "Work.java"), str(WORKLOAD_DIR / "JfrLines.java")]
    subprocess.run(["javac", "-nowarn", "-d", str(classes), *base], check=True, capture_output=True, timeout=300)
    compiled = []
    for name in WORKLOADS if drivers is None else drivers:
        cp = os.pathsep.join([str(classes), *classpath])
        done = subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", cp, str(WORKLOAD_DIR / f"{name}.java")],
                              capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            compiled.append(name)
        else:
            log.warning("driver %s does not compile here (missing library?): %s", name, done.stderr[-500:])
    return Toolchain(classes, classpath, jars, compiled)


def make_keystore(work: Path) -> Path:
    store = work / "tls.p12"
    if not store.exists():
        subprocess.run(["keytool", "-genkeypair", "-keystore", str(store), "-storetype", "PKCS12", "-storepass",
                        "changeit", "-keypass", "changeit", "-alias", "cp", "-dname", "CN=localhost", "-keyalg", "RSA",
                        "-keysize", "2048", "-validity", "2"], check=True, capture_output=True, timeout=120)
    return store


def drop_page_cache() -> bool:
    """Makes the next reads come from the disk (root only); False where it cannot."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def record(
    main_class: str, classpath: Sequence[str], args: Sequence[str], jfr: Path, settings: Path, timeout_s: float,
    extra_jvm: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run one JVM under JFR (niced, bounded in time); the recording is written at exit."""
    command = [
        "nice", "-n", "10", "timeout", "--kill-after=10", str(int(timeout_s)), "java",
        "-XX:FlightRecorderOptions:stackdepth=256",
        f"-XX:StartFlightRecording=filename={jfr},settings={settings}",
        "-Xlog:jfr+startup=warning", *extra_jvm, "-cp", os.pathsep.join(classpath), main_class, *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 60)


def recording_events(jfr: Path, converter_classes: Path) -> Iterator[JfrEvent]:
    """Stream a recording's events through our converter."""
    with subprocess.Popen(["java", "-cp", str(converter_classes), "cpwork.JfrLines", str(jfr)], stdout=subprocess.PIPE,
                          text=True, encoding="utf-8") as proc:
        assert proc.stdout is not None
        yield from read_jfr_lines(proc.stdout)
        if proc.wait() != 0:
            raise RuntimeError(f"JfrLines failed on {jfr}")


def check_drivers(drivers: Sequence[str] | None) -> None:
    """Raise ValueError naming the drivers that are not ``WORKLOADS`` keys."""
    unknown = [name for name in drivers or () if name not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown driver {', '.join(unknown)} (known: {', '.join(WORKLOADS)})")


def run_all(
    out: Path, quick: bool = False, scale: int = 1, timeout_s: float = 300, work: Path | None = None,
    drop_caches: bool = False, drivers: Sequence[str] | None = None,
) -> dict:
    """Run every driver (or only the ``drivers`` named, each with all its phases), attribute, write
    ``out/jvm.jsonl``; returns a summary (counts per library/class)."""
    check_drivers(drivers)
    started = time.monotonic()
    own_work = work is None
    work = Path(tempfile.mkdtemp(prefix="crystalperf-jfr-")) if work is None else work
    try:
        plan = {name: WORKLOADS[name] for name in drivers} if drivers else QUICK_WORKLOADS if quick else WORKLOADS
        tools = build_toolchain(work, list(plan) if drivers else None)
        settings = work / "measure.jfc"
        settings.write_text(jfc_settings())
        store = make_keystore(work)
        index = ClassIndex(tools.jars)
        attribution = Attribution(library_of=index.library_name)
        runs: dict[str, dict] = {}
        for name, phases in plan.items():
            if name not in tools.compiled:
                runs[name] = {"skipped": "does not compile"}
                continue
            for phase in phases:
                tag = name if phase == "all" else f"{name}:{phase}"
                data = work / "data" / name
                shutil.rmtree(data, ignore_errors=True)
                if drop_caches:
                    drop_page_cache()
                jfr = work / f"{name}-{phase}.jfr"
                t0 = time.monotonic()
                done = record(f"cpwork.{name}", [str(tools.classes), *tools.classpath], [str(data), phase, str(scale)],
                              jfr, settings, timeout_s, [f"-Dcpwork.keystore={store}", "-Djava.awt.headless=true",
                                                         *DRIVER_JVM_OPTIONS.get(name, ())])
                phases_out = [line for line in done.stdout.splitlines() if line.startswith("phase ")]
                used = attribution.add_recording(recording_events(jfr, tools.classes), tag) if jfr.exists() else 0
                runs[tag] = {"rc": done.returncode, "seconds": round(time.monotonic() - t0, 1), "events": used,
                             "phases": phases_out}
                log.info("%s: rc %s, %d events, %s", tag, done.returncode, used, phases_out)
                jfr.unlink(missing_ok=True)
                shutil.rmtree(data, ignore_errors=True)
        jdk_classes = work / "jdk-classes"
        modules = {m.frame.module for m in attribution.methods.values() if m.frame is not None and m.frame.module}
        extract_jdk_classes(modules, jdk_classes)
        rows = list(method_rows(attribution, index, jdk_classes, tools.classpath))
        count = write_jsonl_atomic(rows, out / "jvm.jsonl")
        per_library: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for row in rows:
            if row["origin"] == "bytecode" and row["id"].endswith("#bytecode"):
                continue
            per_library[row["library"]][row["label"] or "unlabelled"] += 1
        classes: dict[str, int] = defaultdict(int)
        for counts in per_library.values():
            for key, n in counts.items():
                classes[key] += n
        summary = {
            "rows": count,
            "methods": sum(classes.values()),
            "classes": dict(classes),
            "libraries": {k: dict(v) for k, v in sorted(per_library.items())},
            "runs": runs,
            "measured_seconds": {k: round(v, 3) for k, v in attribution.totals.items()},
            "own_work_against_inclusive": label_changes(rows),
            "wall_s": round(time.monotonic() - started, 1),
        }
        (out / "jvm-summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
        return summary
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crystalperf.models.measure.jvm", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for jvm.jsonl and jvm-summary.json")
    parser.add_argument("--quick", action="store_true", help="a few short phases (a smoke test, ~1 minute)")
    parser.add_argument("--scale", type=int, default=1, help="size factor of the drivers' data and loops")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per JVM")
    parser.add_argument("--work", type=Path, help="keep compiled drivers and data here (default: a temp dir)")
    parser.add_argument("--drop-caches", action="store_true",
                        help="drop the page cache before each driver (root; slows everything else on the machine)")
    parser.add_argument("--drivers", nargs="+", metavar="NAME",
                        help=f"run only these drivers, all their phases (overrides --quick); one of: {', '.join(WORKLOADS)}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for tool in ("java", "javac", "keytool"):
        if shutil.which(tool) is None:
            sys.stderr.write(f"crystalperf: {tool} not found on PATH (a JDK 17 is needed)\n")
            return 2
    if args.scale < 1 or args.timeout <= 0:
        sys.stderr.write("crystalperf: --scale must be >= 1 and --timeout > 0\n")
        return 2
    try:
        check_drivers(args.drivers)
    except ValueError as exc:
        sys.stderr.write(f"crystalperf: {exc}\n")
        return 2
    summary = run_all(args.out, quick=args.quick, scale=args.scale, timeout_s=args.timeout, work=args.work,
                      drop_caches=args.drop_caches, drivers=args.drivers)
    sys.stdout.write(json.dumps({k: summary[k] for k in ("rows", "methods", "classes", "wall_s")}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
