"""The XSpace and HLO wire-format decoders against TensorFlow's own protobuf classes, on real profiles."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")

from tensorflow.compiler.xla.service import hlo_pb2  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from crystalperf.integrations.tensorflow.reader import (  # noqa: E402
    XEvent,
    XLine,
    XPlane,
    XStat,
    decode_xspace,
    find_xplane,
    read_timeline,
    timeline_from_planes,
)
from crystalperf.integrations.tensorflow.xla import (  # noqa: E402
    METADATA_PLANE,
    Instructions,
    own_kernel_node,
    program_name,
    xla_op_type,
)

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "tensorflow-fit.xplane.pb.gz"
GOLDEN_XLA = GOLDEN.with_name("tensorflow-fit-xla.xplane.pb.gz")


def _stat(stat: Any) -> XStat:
    kind = stat.WhichOneof("value")
    return XStat(stat.metadata_id, getattr(stat, kind) if kind else None)


def _planes_by_pb2(data: bytes) -> list[XPlane]:
    space = xplane_pb2.XSpace()
    space.ParseFromString(data)
    return [
        XPlane(
            name=plane.name,
            lines=[XLine(line.name, line.timestamp_ns,
                         [XEvent(e.metadata_id, e.offset_ps, e.duration_ps, tuple(_stat(s) for s in e.stats))
                          for e in line.events])
                   for line in plane.lines],
            event_names={k: v.name for k, v in plane.event_metadata.items()},
            stat_names={k: v.name for k, v in plane.stat_metadata.items()},
            stats=[_stat(s) for s in plane.stats],
            instructions=_instructions_by_pb2(plane) if plane.name == METADATA_PLANE else {},
        )
        for plane in space.planes
    ]


def _instructions_by_pb2(plane: Any) -> Instructions:
    """What XLA's ``hlo_pb2`` reads in the metadata plane's HLO protos, as crystalperf's reader names it."""
    modules: Instructions = {}
    for metadata in plane.event_metadata.values():
        for stat in metadata.stats:
            if stat.WhichOneof("value") != "bytes_value":
                continue
            module = hlo_pb2.HloProto.FromString(stat.bytes_value).hlo_module
            program = program_name(module.name)
            found = modules.setdefault(module.name, {})
            for computation in module.computations:
                if computation.is_fusion_computation:
                    continue
                for instruction in computation.instructions:
                    op_name, op_type = instruction.metadata.op_name, instruction.metadata.op_type
                    found[instruction.name] = ((op_name, op_type) if op_name and op_type else
                                               (op_name or own_kernel_node(program, instruction.name),
                                                xla_op_type(instruction.opcode)))
    return modules


def _fresh_profile(logdir: Path) -> Path:
    """A profile of this TensorFlow: kernels on the compute pool and a tf.data pipeline."""
    data = tf.data.Dataset.range(64).map(lambda i: tf.cast(i, tf.float32) * 2.0).batch(8).prefetch(1)
    weights = tf.random.stateless_uniform((256, 256), seed=(1, 2))
    tf.profiler.experimental.start(str(logdir))
    for batch in data:
        tf.linalg.matmul(weights, weights) + tf.reduce_sum(batch)
    tf.profiler.experimental.stop()
    found = find_xplane(logdir)
    assert found is not None
    return found


@pytest.mark.parametrize("source", ["golden", "golden-xla", "fresh"])
def test_the_decoder_reads_what_xplane_pb2_reads(source: str, tmp_path: Path) -> None:
    path = {"golden": GOLDEN, "golden-xla": GOLDEN_XLA}.get(source) or _fresh_profile(tmp_path)
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    by_pb2 = _planes_by_pb2(data)
    decoded = decode_xspace(data)
    assert [p.name for p in decoded] == [p.name for p in by_pb2]
    assert sum(len(line.events) for p in decoded for line in p.lines) > 100
    assert decoded == by_pb2  # every field the timeline reads, stats of every event included
    timeline = read_timeline(path)
    assert timeline == timeline_from_planes(by_pb2)
    assert timeline.ops and timeline.start is not None and timeline.stop is not None
