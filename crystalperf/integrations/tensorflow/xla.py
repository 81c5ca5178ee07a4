"""XLA-compiled kernels in TensorFlow's profile -> the TensorFlow ops they were lowered from.

A function compiled with XLA (``model.compile(jit_compile=True)``; Keras's ``"auto"`` on a GPU) runs as one
program, whose kernels the profiler names after XLA's instructions (``MatMul.12``, ``multiply_add_fusion.4``,
``copy.2``), each event carrying ``hlo_module`` and ``hlo_op`` stats. The ``/host:metadata`` plane holds each
module's HLO, in which an instruction keeps the TensorFlow node it was lowered from (``op_name``, with Keras's
layer scopes: ``gradient_tape/sequential/dense/MatMul``) and that node's op type. So a compiled kernel becomes the
same (node, op type) pair a kernel of TensorFlow's executor has, and the trace groups it by layer like any other.
An instruction lowered from no node (the copies, transposes and reduce-windows XLA makes itself) becomes the node
``XLA <program>/<instruction>`` (``XLA one_step_on_data/copy.2``: the group of the program's own kernels), and
``Xla`` and its opcode (``XlaCopy``, ``XlaFusion``) its type. HLO field numbers are those of XLA's ``hlo.proto``.

On a device plane a kernel is named by its device (a CUDA kernel's name); the GPU tracer writes the TensorFlow op
that launched it beside, as the ``tf_op`` stat, so a device kernel becomes that op's (node, op type) too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from crystalperf.integrations.tensorflow.wire import LENGTH, VARINT, fields, text

METADATA_PLANE = "/host:metadata"
HLO_OP_STAT, HLO_MODULE_STAT = "hlo_op", "hlo_module"
# On a device plane, the TensorFlow op that launched a kernel: the outermost annotation's name ("<node>:<OpType>"),
# as the GPU tracer's collector writes it beside the kernel's own name (a CUDA kernel's: volta_sgemm_128x64_nn).
TF_OP_STAT = "tf_op"

# module name -> instruction name -> (TensorFlow node, op type)
Instructions = dict[str, dict[str, tuple[str, str]]]
# A stat as the reader decodes it: (stat metadata id, value); a reference to a stat metadata's name is an int.
Stat = tuple[int, "float | int | str | bytes | None"]

_COPY_SUFFIX = re.compile(r"\.\d+$")
# a_inference_one_step_on_data_1105__.8 -> one_step_on_data: the traced function's name
_PROGRAM_NAME = re.compile(r"^(?:a_)?_*inference_(?P<name>.+?)_\d+__(?:\.\d+)?$")


def hlo_instructions(buf: bytes, pos: int, end: int) -> Instructions:
    """The instructions of every HLO module the metadata plane ``buf[pos:end]`` holds. The instructions inside a
    fusion are left out: they run inside the fusion's kernel, which is the one the profile names."""
    modules: Instructions = {}
    entries: list[tuple[int, int]] = []
    for number, wire, at, stop in fields(buf, pos, end):
        if number == 4 and wire == LENGTH:  # event metadata: the module's HLO is a bytes stat of its metadata
            entries.append((at, stop))
    for at, stop in entries:
        for number, _, value_at, value_stop in fields(buf, at, stop):
            if number != 2:
                continue
            for inner, _, stat_at, stat_stop in fields(buf, value_at, value_stop):
                if inner == 5:  # XEventMetadata.stats
                    for field_number, wire, bytes_at, bytes_stop in fields(buf, stat_at, stat_stop):
                        if field_number == 6 and wire == LENGTH:  # bytes_value: an HloProto
                            _add_hlo_proto(modules, buf, bytes_at, bytes_stop)
    return modules


def _add_hlo_proto(modules: Instructions, buf: bytes, pos: int, end: int) -> None:
    try:
        for number, wire, at, stop in fields(buf, pos, end):
            if number == 1 and wire == LENGTH:  # HloProto.hlo_module
                name, instructions = _module(buf, at, stop)
                if name and instructions:
                    modules.setdefault(name, {}).update(instructions)
    except (ValueError, IndexError):  # another bytes stat, or a proto of a version we do not know
        return


def _module(buf: bytes, pos: int, end: int) -> tuple[str, dict[str, tuple[str, str]]]:
    name = ""
    computations: list[tuple[int, int]] = []
    for number, wire, at, stop in fields(buf, pos, end):
        if number == 1 and wire == LENGTH:
            name = text(buf, at, stop)
        elif number == 3 and wire == LENGTH:
            computations.append((at, stop))
    program = program_name(name)
    instructions: dict[str, tuple[str, str]] = {}
    for at, stop in computations:
        computation, fused = _computation(buf, at, stop, program)
        if not fused:
            instructions.update(computation)
    return name, instructions


def _computation(buf: bytes, pos: int, end: int, program: str) -> tuple[dict[str, tuple[str, str]], bool]:
    instructions: dict[str, tuple[str, str]] = {}
    fused = False
    for number, wire, at, stop in fields(buf, pos, end):
        if number == 2 and wire == LENGTH:
            name, node, op_type = _instruction(buf, at, stop, program)
            if name:
                instructions[name] = (node, op_type)
        elif number == 7 and wire == VARINT:  # is_fusion_computation
            fused = bool(at)
    return instructions, fused


def _instruction(buf: bytes, pos: int, end: int, program: str) -> tuple[str, str, str]:
    """(instruction name, TensorFlow node, op type) of an HloInstructionProto."""
    name = opcode = op_type = op_name = ""
    for number, wire, at, stop in fields(buf, pos, end):
        if wire != LENGTH:
            continue
        if number == 1:
            name = text(buf, at, stop)
        elif number == 2:
            opcode = text(buf, at, stop)
        elif number == 7:  # OpMetadata
            for inner, inner_wire, start, inner_stop in fields(buf, at, stop):
                if inner == 1 and inner_wire == LENGTH:
                    op_type = text(buf, start, inner_stop)
                elif inner == 2 and inner_wire == LENGTH:
                    op_name = text(buf, start, inner_stop)
    if op_name and op_type:
        return name, op_name, op_type
    return name, op_name or own_kernel_node(program, name), xla_op_type(opcode or name)


def program_name(module: str) -> str:
    """The function an HLO module was compiled from: ``a_inference_one_step_on_data_1105__.8`` ->
    ``one_step_on_data``; another name as it is."""
    match = _PROGRAM_NAME.match(module)
    return match["name"] if match else module


def own_kernel_node(program: str, instruction: str) -> str:
    """The node of a kernel XLA made itself, lowered from no TensorFlow node: grouped as the program's own."""
    return f"XLA {program or 'program'}/{instruction}"


def xla_op_type(opcode: str) -> str:
    """``all-reduce`` -> ``XlaAllReduce``; a fusion's name (``multiply_add_fusion.4``) -> ``XlaFusion``; an
    instruction's name stands for its opcode (``copy.2`` -> ``XlaCopy``)."""
    opcode = _COPY_SUFFIX.sub("", opcode)
    if opcode.endswith("fusion"):
        return "XlaFusion"
    words = [w for w in re.split(r"[-_.\s]+", opcode) if w and not w.isdigit()]
    return "Xla" + "".join(w[:1].upper() + w[1:] for w in words) if words else "XlaOp"


class PlaneKernels:
    """Which events of one plane are kernels named by their stats, and the (node, op type) of each: an XLA
    program's kernel carries ``hlo_op`` and ``hlo_module``; on a device plane, a kernel TensorFlow's executor
    launched carries ``tf_op`` (``parse_tf_op`` reads its ``<node>:<OpType>``). On a host plane what an event
    metadata id is, is decided at its first event and kept, so the stats are read once per event name; a device
    kernel's name (the CUDA kernel's) is launched by many ops, so there every event's stats are read."""

    def __init__(self, instructions: Instructions, stat_names: dict[int, str], *, device: bool = False,
                 parse_tf_op: Callable[[str], tuple[str, str] | None] | None = None) -> None:
        self._instructions = instructions
        self._stat_names = stat_names
        self._device = device
        self._parse_tf_op = parse_tf_op
        ids = {name: key for key, name in stat_names.items()}
        self._op_id, self._module_id = ids.get(HLO_OP_STAT), ids.get(HLO_MODULE_STAT)
        self._tf_op_id = ids.get(TF_OP_STAT) if device and parse_tf_op is not None else None
        self._compiled: dict[int, bool] = {}
        self._resolved: dict[tuple[object, object], tuple[str, str]] = {}

    @property
    def possible(self) -> bool:
        """False when no event of the plane can be such a kernel (its stats name neither an HLO op nor a TF op)."""
        return (self._op_id is not None and self._module_id is not None) or self._tf_op_id is not None

    def kernel(self, metadata_id: int, stats: Callable[[], Iterable[Stat]]) -> tuple[str, str] | None:
        """(node, op type) of an event of this metadata id whose stats ``stats()`` gives; None for other events."""
        if not self.possible or self._compiled.get(metadata_id) is False:
            return None
        op = module = tf_op = None
        for key, value in stats():
            if key == self._op_id:
                op = value
            elif key == self._module_id:
                module = value
            elif key == self._tf_op_id:
                tf_op = value
        if not self._device:
            self._compiled[metadata_id] = op is not None and module is not None
        if op is None or module is None:
            return self._launched_by(tf_op) if tf_op is not None else None
        found = self._resolved.get((module, op))
        if found is None:
            # a kernel of nested HLO (a fusion inside a while loop's body) names them all, innermost last
            found = self._resolve(self._name(module), self._name(op).rsplit("::", 1)[-1])
            self._resolved[(module, op)] = found
        return found

    def _launched_by(self, tf_op: object) -> tuple[str, str] | None:
        assert self._parse_tf_op is not None
        return self._parse_tf_op(self._name(tf_op))

    def _name(self, value: object) -> str:
        if isinstance(value, int):  # a reference to a stat metadata, whose name is the value
            return self._stat_names.get(value, "")
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    def _resolve(self, module: str, instruction: str) -> tuple[str, str]:
        found = self._instructions.get(module, {}).get(instruction)
        if found is not None:
            return found
        return own_kernel_node(program_name(module), instruction), xla_op_type(instruction)

