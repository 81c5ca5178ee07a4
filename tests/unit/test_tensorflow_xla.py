"""XLA-compiled kernels read from a recorded profile (``tests/data/tensorflow-fit-xla.xplane.pb.gz``, recorded by
``tests/data/record/tensorflow_fit.py --xla``), without TensorFlow, and the HLO resolution by hand.

The run: a dense model golden_mlp (hidden: 64 units, relu; logits: 4) compiled with ``jit_compile=True``, Adam,
batches of 32, steps 2-5 profiled. Each step ran one XLA program of 36 kernels (one_step_on_data, 74 instructions
outside fusions), and TensorFlow's executor ran the input's GatherV2 and the step's OptionalFromValue. The numbers
below were counted from the recorded file.
"""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

from crystalperf.integrations.tensorflow.assemble import op_group
from crystalperf.integrations.tensorflow.reader import (
    decode_xspace,
    timeline_from_planes,
    timeline_from_xspace,
)
from crystalperf.integrations.tensorflow.xla import PlaneKernels, own_kernel_node, program_name, xla_op_type
from tests.unit.xplane_encoding import line, plane, stat

XLA_PROFILE = Path(__file__).resolve().parents[1] / "data" / "tensorflow-fit-xla.xplane.pb.gz"
MODULE = "a_inference_one_step_on_data_795__.7"
LAYERS = frozenset({"hidden", "logits"})


def _profile() -> bytes:
    return gzip.decompress(XLA_PROFILE.read_bytes())


def test_the_metadata_plane_gives_each_instruction_the_node_it_was_lowered_from() -> None:
    planes = decode_xspace(_profile())
    assert [p.name for p in planes] == ["/host:metadata", "/host:CPU", "Task Environment"]
    instructions = planes[0].instructions
    assert list(instructions) == [MODULE] and len(instructions[MODULE]) == 74
    nodes = set(instructions[MODULE].values())
    assert ("golden_mlp_1/hidden_1/MatMul", "MatMul") in nodes
    assert ("gradient_tape/golden_mlp_1/hidden_1/ReluGrad", "ReluGrad") in nodes
    assert ("XLA one_step_on_data/copy.2", "XlaCopy") in nodes  # a copy XLA made: lowered from no node


def test_compiled_kernels_are_the_tensorflow_ops_and_layers_they_were_lowered_from() -> None:
    timeline = timeline_from_xspace(_profile())
    # 4 steps x 36 compiled kernels, 6 GatherV2, 4 OptionalFromValue; and Keras's eager OptionalHasValue and
    # OptionalGetValue on the training thread around each compiled step
    assert len(timeline.ops) == 162
    assert Counter(op.thread for op in timeline.ops) == {"tf_numa_-1_Eigen": 105, "tf_Compute": 43,
                                                          "tf_data_private_threadpool": 6, "python": 8}
    groups = Counter(op_group(op.node, LAYERS)[0] for op in timeline.ops)
    assert groups == {"adam": 56, "other": 22, "compile_loss": 20, "XLA one_step_on_data": 16,
                      "logits backward": 12, "hidden backward": 12, "hidden": 8, "logits": 4,
                      "compile_loss backward": 4, "eager ops": 8}
    # op types are TensorFlow's (their docs are tf.raw_ops'), never an XLA instruction's name
    assert {op.op_type for op in timeline.ops if op_group(op.node, LAYERS)[0] == "hidden"} == {"MatMul", "Relu"}
    assert not any("." in op.op_type or "fusion" in op.op_type for op in timeline.ops)


def test_the_streamed_and_the_decoded_profile_agree_on_compiled_kernels() -> None:
    data = _profile()
    assert timeline_from_xspace(data) == timeline_from_planes(decode_xspace(data))


def test_a_memory_budget_keeps_the_first_compiled_kernels() -> None:
    timeline = timeline_from_xspace(_profile(), max_ops=10)
    assert len(timeline.ops) == 10 and timeline.dropped_ops == 152
    assert timeline.complete_until is not None and all(op.start < timeline.complete_until for op in timeline.ops)


def test_names_by_hand() -> None:
    assert program_name(MODULE) == "one_step_on_data"
    assert program_name("__inference_train_step_12__.3") == "train_step"
    assert program_name("cluster_7") == "cluster_7"
    assert xla_op_type("all-reduce") == "XlaAllReduce"
    assert xla_op_type("multiply_add_fusion") == "XlaFusion"
    assert xla_op_type("reduce-window") == "XlaReduceWindow"
    assert xla_op_type("") == "XlaOp"
    assert own_kernel_node("", "copy.2") == "XLA program/copy.2"


def test_an_event_is_a_compiled_kernel_when_it_names_an_hlo_op_and_module() -> None:
    stat_names = {1: "hlo_op", 2: "hlo_module", 3: "step_id", 10: "MatMul.4", 11: "m", 12: "copy.9"}
    kernels = PlaneKernels({"m": {"MatMul.4": ("model/dense/MatMul", "MatMul")}}, stat_names)
    assert kernels.possible
    assert kernels.kernel(7, lambda: [(1, 10), (2, 11)]) == ("model/dense/MatMul", "MatMul")  # by reference
    assert kernels.kernel(7, lambda: [(1, "MatMul.4"), (2, "m")]) == ("model/dense/MatMul", "MatMul")  # by value
    # an instruction the metadata plane does not hold: the program's own kernel, typed by its opcode
    assert kernels.kernel(8, lambda: [(1, 12), (2, 11)]) == ("XLA m/copy.9", "XlaCopy")
    asked: list[int] = []

    def step_stats() -> list[tuple[int, object]]:
        asked.append(1)
        return [(3, 42)]

    assert kernels.kernel(9, step_stats) is None and kernels.kernel(9, step_stats) is None
    assert len(asked) == 1  # what an event name is, is decided once
    assert not PlaneKernels({}, {3: "step_id"}).possible


# -- a device plane, encoded by hand as the GPU tracer's collector writes one -------------------------------------

def _device_profile() -> bytes:
    """One GPU stream, kernels of 5 ms 10 ms apart: the same CUDA kernel launched by two TensorFlow ops (``tf_op`` a reference to a stat
    metadata named "<node>:<OpType>"), an XLA kernel (``hlo_op``, ``hlo_module`` as strings), a copy and a kernel
    launched outside any op."""
    stats = {1: "tf_op", 2: "hlo_op", 3: "hlo_module", 10: "model/dense/MatMul:MatMul",
             11: "gradient_tape/model/dense/MatMul_1:MatMul", 12: "EagerExecute"}
    names = {1: "volta_sgemm_128x64_nn", 2: "loop_add_fusion", 3: "MemcpyH2D"}
    events = [(1, 0, [stat(1, 10)]), (1, 10, [stat(1, 11)]), (2, 20, [stat(2, "loop.1::add_fusion.3"),
              stat(3, "m"), stat(1, 12)]), (3, 30, []), (1, 40, [stat(1, 12)])]
    stream = line("Stream #14(Compute)", [(metadata, at * 10**9, 5 * 10**9, event_stats)
                                          for metadata, at, event_stats in events])
    return plane("/device:GPU:0", [stream], names, stats)


def test_device_kernels_are_the_ops_that_launched_them() -> None:
    data = _device_profile()
    timeline = timeline_from_xspace(data)
    assert [(op.node, op.op_type, op.device, op.thread) for op in timeline.ops] == [
        ("model/dense/MatMul", "MatMul", True, "/device:GPU:0"),
        ("gradient_tape/model/dense/MatMul_1", "MatMul", True, "/device:GPU:0"),
        ("XLA m/add_fusion.3", "XlaFusion", True, "/device:GPU:0"),  # the innermost HLO op names the kernel
    ]
    assert [round(op.start, 3) for op in timeline.ops] == [0.0, 0.01, 0.02]
    assert timeline == timeline_from_planes(decode_xspace(data))
