"""Reading TensorFlow's profiler output (``*.xplane.pb``) into the few event kinds the trace needs.

The XSpace protobuf comes with TensorFlow (``tensorflow.tsl.profiler.protobuf.xplane_pb2``): no
TensorBoard or xprof needed. Event times are offsets from the profile's start
(``profile_start_time`` of the ``Task Environment`` plane) and line up with ``time.time_ns()``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A kernel execution is traced as "<node name>:<op type>"; TraceMe annotations use other shapes
# ("EagerLocalExecute: OptionalGetValue", "Iterator::Root::Prefetch", "ExecutorState::Process").
_OP_EVENT = re.compile(r"^(?P<node>[^\s:]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")
# The training thread blocks in these while the input pipeline has no element ready.
_INPUT_WAIT_EVENTS = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")
_STAGE_PREFIX = "Iterator::"


@dataclass(frozen=True)
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

    @property
    def input_threads(self) -> Iterable[OpEvent]:
        return (op for op in self.ops if op.thread.startswith("tf_data"))


def thread_family(line_name: str) -> str:
    """``tf_Compute/6863516020239734601`` -> ``tf_Compute`` (the part that names the pool)."""
    return line_name.split("/", 1)[0] if not line_name.startswith("/") else line_name


def find_xplane(logdir: Path) -> Path | None:
    """The newest ``*.xplane.pb`` the profiler wrote under ``logdir``."""
    found = sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _stat_value(stat: object) -> Any:
    kind = stat.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(stat, kind) if kind else None


def read_timeline(path: Path) -> Timeline:
    """Kernel executions, input-pipeline waits, tf.data stage busy time and the allocator's peak."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(path).read_bytes())
    timeline = Timeline()
    origin_ns = 0
    for plane in space.planes:
        if plane.name == "Task Environment":
            names = {k: v.name for k, v in plane.stat_metadata.items()}
            stats = {names.get(s.metadata_id): _stat_value(s) for s in plane.stats}
            origin_ns = int(stats.get("profile_start_time") or 0)
            if stats.get("profile_stop_time"):
                timeline.stop = int(stats["profile_stop_time"]) / 1e9
    timeline.start = origin_ns / 1e9 if origin_ns else None
    for plane in space.planes:
        host = plane.name.startswith("/host:")
        device = plane.name.startswith("/device:")
        if not (host or device):
            continue
        event_names = {k: v.name for k, v in plane.event_metadata.items()}
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            family = plane.name if device else thread_family(line.name)
            base_ns = origin_ns + line.timestamp_ns
            for event in line.events:
                name = event_names.get(event.metadata_id, "")
                start = (base_ns + event.offset_ps / 1000) / 1e9
                duration = event.duration_ps / 1e12
                match = _OP_EVENT.match(name)
                if match:
                    timeline.ops.append(OpEvent(match["node"], match["type"], start, duration, family, device))
                elif name in _INPUT_WAIT_EVENTS:
                    timeline.input_waits.append((start, duration))
                elif name.startswith(_STAGE_PREFIX):
                    timeline.stage_busy[name.rsplit("::", 1)[-1]] += duration
                elif name == "MemoryAllocation":
                    for stat in event.stats:
                        if stat_names.get(stat.metadata_id) == "peak_bytes_in_use":
                            peak = _stat_value(stat)
                            if isinstance(peak, int):
                                timeline.peak_bytes_in_use = max(timeline.peak_bytes_in_use, peak)
    timeline.ops.sort(key=lambda o: o.start)
    timeline.input_waits.sort()
    return timeline
