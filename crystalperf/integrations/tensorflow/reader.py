"""TensorFlow's profiler output (``*.xplane.pb``) and the callback's recording -> the parts a trace is built from.

The XSpace protobuf is decoded here from its wire format, for just the fields the timeline needs (field
numbers of TSL's ``xplane.proto``), so that a saved profile can be read without TensorFlow or protobuf.
Event times are offsets from the profile's start (``profile_start_time`` of the ``Task Environment``
plane) and line up with ``time.time_ns()``.
"""

from __future__ import annotations

import functools
import gzip
import json
import mmap
import re
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crystalperf.core import atomic
from crystalperf.core import trace as tr
from crystalperf.integrations.tensorflow.wire import DOUBLE as _DOUBLE
from crystalperf.integrations.tensorflow.wire import FIXED64 as _FIXED64
from crystalperf.integrations.tensorflow.wire import LENGTH as _LENGTH
from crystalperf.integrations.tensorflow.wire import fields as _fields
from crystalperf.integrations.tensorflow.wire import metadata_name as _metadata_name
from crystalperf.integrations.tensorflow.wire import signed as _signed
from crystalperf.integrations.tensorflow.wire import stat_names as _stat_names
from crystalperf.integrations.tensorflow.wire import text as _text
from crystalperf.integrations.tensorflow.xla import (
    METADATA_PLANE,
    Instructions,
    PlaneKernels,
    Stat,
    hlo_instructions,
)

# A kernel execution is traced as "<node name>:<op type>"; TraceMe annotations use other shapes
# ("Iterator::Root::Prefetch", "ExecutorState::Process").
_OP_EVENT = re.compile(r"^(?P<node>[^\s:]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")
# An op run eagerly (``run_eagerly=True``, eager code around the compiled step) is traced on the thread that
# called it as "EagerLocalExecute: <op type>", its kernel and TensorFlow's C++ dispatch of it inside: it has no
# graph node, so no layer. A call of a compiled function is traced the same way ("EagerLocalExecute:
# __inference_<name>_<n>"): its kernels are traced as themselves, so such a call is not a kernel.
_EAGER_EVENT = re.compile(r"^EagerLocalExecute: (?P<type>(?!__)[A-Za-z_][A-Za-z0-9_]*)$")
# The node an eager op's kernel is given (not a graph node name: it has a space).
EAGER_NODE = "eager op"
# An eager GetNext's time is the step's input wait (_INPUT_WAIT_EVENTS), not a kernel's.
_EAGER_WAITS = re.compile(r"^IteratorGetNext")
# The training thread blocks in these while the input pipeline has no element ready.
_INPUT_WAIT_EVENTS = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")
_STAGE_PREFIX = "Iterator::"
RECORDING_FORMAT = "crystalperf-tensorflow-recording/1"
# What one kept kernel execution costs in memory (an OpEvent with slots, its two floats; its strings are shared
# by every execution of the same node): how a byte budget becomes a number of kernel executions.
OP_EVENT_BYTES = 128
# The fewest bytes one serialized XEvent takes (its key and length, metadata id, offset, duration): a profile
# of N bytes cannot hold more than N / this many events.
_MIN_EVENT_BYTES = 6


# -- the parts ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OpEvent:
    """One kernel execution."""

    node: str  # graph node name, e.g. StatefulPartitionedCall/sequential/conv2d/Relu
    op_type: str  # e.g. _MklNativeFusedConv2D
    start: float  # seconds since the epoch
    duration: float
    thread: str  # the line's thread family: tf_Compute, tf_data_private_threadpool, python, /device:GPU:0...
    device: bool = False  # ran on an accelerator plane


@dataclass
class Timeline:
    """What the trace uses from one profiling session."""

    ops: list[OpEvent] = field(default_factory=list)
    input_waits: list[tuple[float, float]] = field(default_factory=list)  # (start, duration)
    stage_busy: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # tf.data stage -> s
    peak_bytes_in_use: int = 0
    start: float | None = None
    stop: float | None = None
    # Kernel executions left out to stay within a memory budget: only those that began at or after
    # ``complete_until``, so everything before that instant is whole.
    dropped_ops: int = 0
    complete_until: float | None = None

    @property
    def input_threads(self) -> Iterable[OpEvent]:
        return (op for op in self.ops if op.thread.startswith("tf_data"))


@dataclass(slots=True)
class Step:
    """One training step (a Keras batch) as the callback saw it."""

    index: int  # global batch number since fit() began
    epoch: int
    start: float
    end: float


@dataclass(slots=True)
class Unprofiled:
    """The requested steps after the profile ended early (the memory budget): counted and timed, nothing more."""

    first: int  # global batch number of the first of them
    last: int
    count: int
    start: float  # when the first began (the last profiled step's end)
    seconds: float  # their wall time: each from the step before it ended (an epoch's first from its begin)


@dataclass
class Recording:
    """Everything the callback gathered in its window."""

    steps: list[Step]
    timeline: Timeline | None
    python_samples: tr.StackSamples | None
    threads: int  # TF's compute threads (intra-op parallelism)
    cpu_count: int
    cpu_seconds: float  # process CPU time during the window
    memory_bytes: int | None
    read_bytes: int | None = None  # bytes the process read from storage in the window (/proc/self/io)
    io: list[tr.IoSample] = field(default_factory=list)  # the process tree's I/O counters over the fit
    # The CPU seconds the process's worker processes (a PyDataset's multiprocessing pool) used in the window, and
    # how many there were; None: not measured.
    worker_cpu_s: float | None = None
    worker_processes: int = 0
    device: str = "cpu"
    layer_names: frozenset[str] = frozenset()  # the model's layers: graph scopes carry _1, _2 suffixes
    multi_worker: bool = False  # several hosts (MultiWorkerMirroredStrategy): collectives cross the network
    fit_start: float | None = None
    fit_end: float | None = None
    properties: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    unprofiled: Unprofiled | None = None
    # Steps after the window, timed only (begin to the next step's begin, an epoch's first step left out): what a
    # step takes without the profiler and the sampler, beside the profiled steps' time.
    later_step_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class RunInfo:
    """What names the run in the trace (``build_trace``'s keyword arguments)."""

    run_id: str
    name: str
    framework_version: str | None
    status: str = "succeeded"
    output_dir: str | None = None
    host: str | None = None


@dataclass(frozen=True)
class XStat:
    metadata_id: int
    value: float | int | str | bytes | None  # the oneof's set member, as xplane_pb2's WhichOneof gives it


@dataclass(frozen=True)
class XEvent:
    metadata_id: int
    offset_ps: int
    duration_ps: int
    stats: tuple[XStat, ...] = ()


@dataclass
class XLine:
    name: str = ""
    timestamp_ns: int = 0
    events: list[XEvent] = field(default_factory=list)


@dataclass
class XPlane:
    name: str = ""
    lines: list[XLine] = field(default_factory=list)
    event_names: dict[int, str] = field(default_factory=dict)  # event metadata id -> name
    stat_names: dict[int, str] = field(default_factory=dict)  # stat metadata id -> name
    stats: list[XStat] = field(default_factory=list)
    instructions: Instructions = field(default_factory=dict)  # the metadata plane's HLO: see xla.py


def _stat(buf: bytes, pos: int, end: int) -> XStat:
    metadata_id = 0
    value: float | int | str | bytes | None = None
    for number, wire, at, stop in _fields(buf, pos, end):
        if number == 1:
            metadata_id = _signed(at)
        elif number == 2 and wire == _FIXED64:
            value = _DOUBLE.unpack_from(buf, at)[0]
        elif number in (3, 7):  # uint64_value, ref_value
            value = at
        elif number == 4:
            value = _signed(at)
        elif number == 5:
            value = _text(buf, at, stop)
        elif number == 6:
            value = bytes(buf[at:stop])
    return XStat(metadata_id, value)


def _event(buf: bytes, pos: int, end: int) -> XEvent:
    metadata_id = offset_ps = duration_ps = 0
    stats: list[XStat] = []
    for number, _, at, stop in _fields(buf, pos, end):
        if number == 1:
            metadata_id = _signed(at)
        elif number == 2:
            offset_ps = _signed(at)
        elif number == 3:
            duration_ps = _signed(at)
        elif number == 4:
            stats.append(_stat(buf, at, stop))
    return XEvent(metadata_id, offset_ps, duration_ps, tuple(stats))


def _line(buf: bytes, pos: int, end: int) -> XLine:
    line = XLine()
    for number, _, at, stop in _fields(buf, pos, end):
        if number == 2:
            line.name = _text(buf, at, stop)
        elif number == 3:
            line.timestamp_ns = _signed(at)
        elif number == 4:
            line.events.append(_event(buf, at, stop))
    return line


def _plane(buf: bytes, pos: int, end: int) -> XPlane:
    plane = XPlane()
    for number, _, at, stop in _fields(buf, pos, end):
        if number == 2:
            plane.name = _text(buf, at, stop)
        elif number == 3:
            plane.lines.append(_line(buf, at, stop))
        elif number in (4, 5):
            key, name = _metadata_name(buf, at, stop)
            (plane.event_names if number == 4 else plane.stat_names)[key] = name
        elif number == 6:
            plane.stats.append(_stat(buf, at, stop))
    if plane.name == METADATA_PLANE:
        plane.instructions = hlo_instructions(buf, pos, end)
    return plane


def decode_xspace(data: bytes) -> list[XPlane]:
    """The planes of a serialized XSpace (its errors, warnings and hostnames are not needed)."""
    return [_plane(data, at, stop) for number, wire, at, stop in _fields(data, 0, len(data))
            if number == 1 and wire == _LENGTH]


# -- planes -> timeline ------------------------------------------------------------------------------
def thread_family(line_name: str) -> str:
    """``tf_Compute/6863516020239734601`` -> ``tf_Compute`` (the part that names the pool)."""
    return line_name.split("/", 1)[0] if not line_name.startswith("/") else line_name


def find_xplane(logdir: Path) -> Path | None:
    """The newest ``*.xplane.pb`` the profiler wrote under ``logdir``."""
    found = sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _profile_window(planes: Iterable[XPlane]) -> tuple[int, float | None]:
    """(profile start in ns since the epoch, 0 if unknown; profile stop in s) from the Task Environment."""
    origin_ns, stop = 0, None
    for plane in planes:
        if plane.name == "Task Environment":
            stats = {plane.stat_names.get(s.metadata_id): s.value for s in plane.stats}
            origin_ns = int(stats.get("profile_start_time") or 0)
            stop_ns = stats.get("profile_stop_time")
            if stop_ns:
                stop = int(stop_ns) / 1e9
    return origin_ns, stop


def _peak_bytes(event: XEvent, stat_names: dict[int, str]) -> int:
    peak = 0
    for stat in event.stats:
        if stat_names.get(stat.metadata_id) == "peak_bytes_in_use" and isinstance(stat.value, int):
            peak = max(peak, stat.value)
    return peak


def _plane_parts(buf: bytes, pos: int, end: int) -> tuple[str, dict[int, str], list[tuple[int, int]]]:
    """A plane's name, its event names and where its lines are, without decoding the lines' events: the
    events are read one at a time by :func:`_plane_events`, so a profile never exists twice in memory."""
    name, event_names, lines = "", {}, []
    for number, _, at, stop in _fields(buf, pos, end):
        if number == 2:
            name = _text(buf, at, stop)
        elif number == 3:
            lines.append((at, stop))
        elif number == 4:
            key, event_name = _metadata_name(buf, at, stop)
            event_names[key] = event_name
    return name, event_names, lines


def _line_header(buf: bytes, pos: int, end: int) -> tuple[str, int, list[tuple[int, int]]]:
    """(line name, timestamp in ns, where its events are)."""
    name, timestamp_ns, events = "", 0, []
    for number, _, at, stop in _fields(buf, pos, end):
        if number == 2:
            name = _text(buf, at, stop)
        elif number == 3:
            timestamp_ns = _signed(at)
        elif number == 4:
            events.append((at, stop))
    return name, timestamp_ns, events


def _event_times(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(metadata id, offset in ps, duration in ps) of an event, its stats skipped."""
    metadata_id = offset_ps = duration_ps = 0
    for number, _, at, _stop in _fields(buf, pos, end):
        if number == 1:
            metadata_id = _signed(at)
        elif number == 2:
            offset_ps = _signed(at)
        elif number == 3:
            duration_ps = _signed(at)
    return metadata_id, offset_ps, duration_ps


def _kernel_name(name: str, cache: dict[str, tuple[str, str] | None]) -> tuple[str, str] | None:
    """(node, op type) of a kernel event's name, None for other events; one pair of strings per name. An eager
    op's node is :data:`EAGER_NODE`."""
    if name not in cache:
        match = _OP_EVENT.match(name)
        eager = None if match else _EAGER_EVENT.match(name)
        if match:
            cache[name] = (match["node"], match["type"])
        elif eager and not _EAGER_WAITS.match(eager["type"]):
            cache[name] = (EAGER_NODE, eager["type"])
        else:
            cache[name] = None
    return cache[name]


def _planes(buf: bytes) -> Iterator[tuple[int, int]]:
    return ((at, stop) for number, wire, at, stop in _fields(buf, 0, len(buf)) if number == 1 and wire == _LENGTH)


def _profile_window_of(buf: bytes) -> tuple[int, float | None]:
    for at, stop in _planes(buf):
        name, _, _ = _plane_parts(buf, at, stop)
        if name == "Task Environment":
            return _profile_window([_plane(buf, at, stop)])
    return 0, None


def _instructions_of(buf: bytes) -> Instructions:
    """The HLO instructions of the profile's XLA programs (none without XLA)."""
    for at, stop in _planes(buf):
        if any(number == 2 and _text(buf, value, end) == METADATA_PLANE for number, _, value, end in _fields(buf, at, stop)):
            return hlo_instructions(buf, at, stop)
    return {}


def _stat_pairs(buf: bytes, pos: int, end: int) -> list[Stat]:
    return [(stat.metadata_id, stat.value) for stat in _event(buf, pos, end).stats]


def _kernel_of(name: str, metadata_id: int, family: str, cache: dict[str, tuple[str, str] | None],
               compiled: PlaneKernels, read_stats: Callable[..., list[Stat]], *where: Any) -> tuple[str, str] | None:
    """(node, op type) of a kernel execution of TensorFlow's executor, of an XLA program or run eagerly on the line
    of thread ``family``; None for other events. An eager op on tf.data's threads is none: it runs inside a
    ``py_function`` kernel, whose time already holds it. ``read_stats(*where)`` gives the event's stats, read only
    for an event that may be a compiled kernel."""
    kernel = _kernel_name(name, cache)
    if kernel is not None and kernel[0] == EAGER_NODE and family.startswith("tf_data"):
        return None
    if kernel is None and compiled.possible and not _is_annotation(name):
        kernel = compiled.kernel(metadata_id, functools.partial(read_stats, *where))
    return kernel


def _is_annotation(name: str) -> bool:
    return name in _INPUT_WAIT_EVENTS or name.startswith(_STAGE_PREFIX) or name == "MemoryAllocation"


def _timed_planes(buf: bytes) -> Iterator[tuple[str, bool, dict[int, str], list[tuple[int, int]], int, int]]:
    """(plane name, is a device, event names, its lines, plane start, plane end) of the host and device planes."""
    for at, stop in _planes(buf):
        name, event_names, lines = _plane_parts(buf, at, stop)
        host, device = name.startswith("/host:"), name.startswith("/device:")
        if host or device:
            yield name, device, event_names, lines, at, stop


def _kernel_cutoff(buf: bytes, origin_ns: int, max_ops: int, instructions: Instructions) -> float | None:
    """The start time before which at most ``max_ops`` kernel executions began, when the profile holds more
    (8 bytes per kernel execution to find it); None when all fit."""
    starts = array("d")
    cache: dict[str, tuple[str, str] | None] = {}
    parse_tf_op = functools.partial(_kernel_name, cache=cache)
    for _, device, event_names, lines, at, stop in _timed_planes(buf):
        compiled = PlaneKernels(instructions, _stat_names(buf, at, stop), device=device, parse_tf_op=parse_tf_op)
        for line_at, line_stop in lines:
            line_name, timestamp_ns, events = _line_header(buf, line_at, line_stop)
            family = thread_family(line_name)
            for event_at, event_stop in events:
                metadata_id, offset_ps, _ = _event_times(buf, event_at, event_stop)
                name = event_names.get(metadata_id, "")
                kernel = _kernel_of(name, metadata_id, family, cache, compiled, _stat_pairs, buf, event_at, event_stop)
                if kernel is not None:
                    starts.append((origin_ns + timestamp_ns + offset_ps / 1000) / 1e9)
    if len(starts) <= max_ops:
        return None
    return sorted(starts)[max_ops]


def timeline_from_xspace(buf: bytes, max_ops: int | None = None) -> Timeline:
    """Kernel executions, input-pipeline waits, tf.data stage busy time and the allocator's peak, read from a
    serialized XSpace one event at a time. With ``max_ops``, only the kernel executions that began before the
    instant by which ``max_ops`` had begun are kept (``dropped_ops``, ``complete_until`` say so)."""
    timeline = Timeline()
    origin_ns, timeline.stop = _profile_window_of(buf)
    timeline.start = origin_ns / 1e9 if origin_ns else None
    instructions = _instructions_of(buf)
    cutoff = None
    if max_ops is not None and len(buf) // _MIN_EVENT_BYTES > max_ops:
        cutoff = _kernel_cutoff(buf, origin_ns, max_ops, instructions)
    cache: dict[str, tuple[str, str] | None] = {}
    parse_tf_op = functools.partial(_kernel_name, cache=cache)
    families: dict[str, str] = {}
    for plane_name, device, event_names, lines, at, stop in _timed_planes(buf):
        stat_names = _stat_names(buf, at, stop)
        compiled = PlaneKernels(instructions, stat_names, device=device, parse_tf_op=parse_tf_op)
        for line_at, line_stop in lines:
            line_name, timestamp_ns, events = _line_header(buf, line_at, line_stop)
            family = plane_name if device else families.setdefault(line_name, thread_family(line_name))
            base_ns = origin_ns + timestamp_ns
            for event_at, event_stop in events:
                metadata_id, offset_ps, duration_ps = _event_times(buf, event_at, event_stop)
                name = event_names.get(metadata_id, "")
                start = (base_ns + offset_ps / 1000) / 1e9
                duration = duration_ps / 1e12
                kernel = _kernel_of(name, metadata_id, family, cache, compiled, _stat_pairs, buf, event_at, event_stop)
                if kernel is not None:
                    if cutoff is not None and start >= cutoff:
                        timeline.dropped_ops += 1
                        continue
                    timeline.ops.append(OpEvent(kernel[0], kernel[1], start, duration, family, device))
                elif name in _INPUT_WAIT_EVENTS:
                    timeline.input_waits.append((start, duration))
                elif name.startswith(_STAGE_PREFIX):
                    timeline.stage_busy[name.rsplit("::", 1)[-1]] += duration
                elif name == "MemoryAllocation":
                    event = _event(buf, event_at, event_stop)
                    timeline.peak_bytes_in_use = max(timeline.peak_bytes_in_use, _peak_bytes(event, stat_names))
    if timeline.dropped_ops:
        timeline.complete_until = cutoff
        timeline.input_waits = [w for w in timeline.input_waits if cutoff is None or w[0] < cutoff]
    timeline.ops.sort(key=lambda o: o.start)
    timeline.input_waits.sort()
    return timeline


def _add_plane(timeline: Timeline, plane: XPlane, origin_ns: int, device: bool, instructions: Instructions) -> None:
    cache: dict[str, tuple[str, str] | None] = {}
    compiled = PlaneKernels(instructions, plane.stat_names, device=device,
                            parse_tf_op=functools.partial(_kernel_name, cache=cache))
    for line in plane.lines:
        family = plane.name if device else thread_family(line.name)
        base_ns = origin_ns + line.timestamp_ns
        for event in line.events:
            name = plane.event_names.get(event.metadata_id, "")
            start = (base_ns + event.offset_ps / 1000) / 1e9
            duration = event.duration_ps / 1e12
            kernel = _kernel_of(name, event.metadata_id, family, cache, compiled, _event_stat_pairs, event)
            if kernel is not None:
                timeline.ops.append(OpEvent(kernel[0], kernel[1], start, duration, family, device))
            elif name in _INPUT_WAIT_EVENTS:
                timeline.input_waits.append((start, duration))
            elif name.startswith(_STAGE_PREFIX):
                timeline.stage_busy[name.rsplit("::", 1)[-1]] += duration
            elif name == "MemoryAllocation":
                timeline.peak_bytes_in_use = max(timeline.peak_bytes_in_use, _peak_bytes(event, plane.stat_names))


def _event_stat_pairs(event: XEvent) -> list[Stat]:
    return [(stat.metadata_id, stat.value) for stat in event.stats]


def timeline_from_planes(planes: list[XPlane]) -> Timeline:
    """Kernel executions, input-pipeline waits, tf.data stage busy time and the allocator's peak."""
    timeline = Timeline()
    origin_ns, timeline.stop = _profile_window(planes)
    timeline.start = origin_ns / 1e9 if origin_ns else None
    instructions = next((plane.instructions for plane in planes if plane.name == METADATA_PLANE), {})
    for plane in planes:
        host = plane.name.startswith("/host:")
        device = plane.name.startswith("/device:")
        if host or device:
            _add_plane(timeline, plane, origin_ns, device, instructions)
    timeline.ops.sort(key=lambda o: o.start)
    timeline.input_waits.sort()
    return timeline


def read_timeline(path: Path, max_ops: int | None = None) -> Timeline:
    """The timeline of a ``*.xplane.pb`` file (gzip-compressed when its name ends with ``.gz``). An
    uncompressed file is mapped, not read: its pages are the page cache's, not the process's own memory."""
    path = Path(path)
    if str(path).endswith(".gz"):
        return timeline_from_xspace(gzip.decompress(path.read_bytes()), max_ops)
    with path.open("rb") as f:
        if path.stat().st_size == 0:
            return timeline_from_xspace(b"", max_ops)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return timeline_from_xspace(mapped, max_ops)  # type: ignore[arg-type]


# -- a recording saved to files ----------------------------------------------------------------------
def save_recording(rec: Recording, info: RunInfo, path: Path, xplane: str | None) -> None:
    """Write what the callback gathered besides the profile as JSON; ``xplane`` names the profile file
    next to it (None when there was none). :func:`load_recording` reads both back."""
    doc: dict[str, Any] = {
        "format": RECORDING_FORMAT,
        "xplane": xplane,
        "run": asdict(info),
        "steps": [asdict(s) for s in rec.steps],
        "python_samples": rec.python_samples.model_dump(mode="json") if rec.python_samples is not None else None,
        **{name: getattr(rec, name) for name in _SCALAR_FIELDS},
        "layer_names": sorted(rec.layer_names),
        "io": [row.model_dump(mode="json", exclude_none=True) for row in rec.io],
        "unprofiled": asdict(rec.unprofiled) if rec.unprofiled is not None else None,
        "later_step_s": rec.later_step_s,
    }
    atomic.write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


_SCALAR_FIELDS = ("threads", "cpu_count", "cpu_seconds", "memory_bytes", "read_bytes", "device", "multi_worker",
                  "fit_start", "fit_end", "properties", "warnings")


def load_recording(path: Path) -> tuple[Recording, RunInfo]:
    """A recording written by :func:`save_recording`, with its profile's timeline."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    if doc.get("format") != RECORDING_FORMAT:
        raise ValueError(f"{path}: not a {RECORDING_FORMAT} document")
    samples = doc.get("python_samples")
    rec = Recording(
        steps=[Step(**s) for s in doc["steps"]],
        timeline=read_timeline(path.parent / doc["xplane"]) if doc.get("xplane") else None,
        python_samples=tr.StackSamples.model_validate(samples) if samples is not None else None,
        layer_names=frozenset(doc["layer_names"]),
        io=[tr.IoSample.model_validate(row) for row in doc.get("io", ())],  # recordings before 1.3 have none
        unprofiled=Unprofiled(**doc["unprofiled"]) if doc.get("unprofiled") else None,
        later_step_s=[float(x) for x in doc.get("later_step_s", ())],  # recordings before 1.13 have none
        **{name: doc[name] for name in _SCALAR_FIELDS},
    )
    return rec, RunInfo(**doc["run"])
