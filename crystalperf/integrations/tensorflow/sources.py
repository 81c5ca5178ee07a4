"""TensorFlow op frames -> the op's documentation from TensorFlow's own registry (``tf.raw_ops``).

A hook records an op execution as the frame ``tensorflow.op.<OpType>`` (language ``unknown``, module
``tensorflow``). The locator is registered through the ``crystalperf.source_locators`` entry point;
TensorFlow is imported only when such a frame is met and TensorFlow is installed, so analysing any
other trace never loads it.

Only kernels whose time can go to a disk or a network, or whose work is unknown Python, are left to the
classifiers (``op-doc``). Every other kernel computes: it runs on TensorFlow's compute thread pool or on a
device, never blocking on I/O, so its time is compute by where it ran. Those are located as ``op-kernel``
functions that declare their vector (``extra["vector"]``), so that no classifier reads "filter" or
"variable" in their documentation as disk or network.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import re
from typing import Any

from crystalperf.core.attribution.classify import FunctionSource
from crystalperf.core.attribution.sources import LocateContext
from crystalperf.core.trace import Frame

OP_FRAME_PREFIX = "tensorflow.op."
# Kernels that read or write files, move tensors between devices or hosts, or read records inside a dataset.
FILE_KERNEL = re.compile(r"ReadFile|WriteFile|Save|Restore|Reader|MatchingFiles|Checkpoint")
TRANSFER_KERNEL = re.compile(r"Collective|AllReduce|AllGather|Nccl|Send$|Recv$|RecvTensor|MemcpyH2D|MemcpyD2H")
READER_DATASET = re.compile(r"TFRecord|FixedLengthRecord|TextLine|Csv|SSTable|ArrayRecord")
# Kernels that run the user's Python (py_function, numpy_function): their time is whatever that code does.
PYTHON_KERNEL = re.compile(r"PyFunc")
# Kernels that block until another part of the job delivers (the input pipeline, a queue, a barrier).
WAITING_KERNEL = re.compile(r"IteratorGetNext|GetNextFromShard|Dequeue|Barrier|Wait")
# What a compute kernel declares as its vector (cpu, disk, network), in FunctionSource.extra["vector"].
COMPUTE_VECTOR = "1,0,0"
KERNEL_ORIGIN = "op-kernel"

# Grappler and the oneDNN (MKL) rewrites rename ops; their documentation is the public op's.
_INTERNAL_PREFIXES = ("_MklNative", "_Mkl", "_Fused", "_")


def op_frame_name(op_type: str) -> str:
    """The frame name a hook gives an op of this type."""
    return OP_FRAME_PREFIX + op_type


def is_compute_op(op_type: str) -> bool:
    """True for a kernel whose time is compute by what it is: neither I/O, a transfer, Python nor a wait."""
    return not any(p.search(op_type) for p in (FILE_KERNEL, TRANSFER_KERNEL, READER_DATASET, PYTHON_KERNEL,
                                                WAITING_KERNEL))


def kernel_function(op_type: str, documented: FunctionSource | None = None) -> FunctionSource:
    """The located function of a compute kernel, its vector declared: its op's documentation when TensorFlow
    is there to give it (for the reader of the report), else its name."""
    if documented is not None:
        return dataclasses.replace(documented, origin=KERNEL_ORIGIN, extra={"vector": COMPUTE_VECTOR})
    public = _stripped_names(op_type)[-1]
    return FunctionSource(
        qualified_name=op_frame_name(op_type), language="python", code=public, origin=KERNEL_ORIGIN,
        location=f"tf.raw_ops.{public}", extra={"vector": COMPUTE_VECTOR},
    )


def _stripped_names(op_type: str) -> list[str]:
    """``_MklNativeFusedConv2D`` -> [_MklNativeFusedConv2D, FusedConv2D, Conv2D]: the op's name with each
    internal rewrite's prefix or suffix taken off in turn, the public op's name last."""
    names = [op_type]
    stripped = op_type
    for prefix in _INTERNAL_PREFIXES:
        if stripped.startswith(prefix) and len(stripped) > len(prefix):
            stripped = stripped[len(prefix) :]
            names.append(stripped)
    # oneDNN fuses an op with its bias/activation (_FusedConv2D, _MklNativeFusedMatMul, ...WithBias); public
    # ops named Fused* (FusedBatchNormV3) are ops of their own.
    if len(names) > 1 and stripped.startswith("Fused") and len(stripped) > 5 and stripped[5].isupper():
        stripped = stripped[5:]
        names.append(stripped)
    if stripped.endswith("WithBias") and len(stripped) > 8:
        stripped = stripped[: -len("WithBias")]
        names.append(stripped)
    return names


def public_op_candidates(op_type: str) -> list[str]:
    """``_FusedConv2D`` -> [_FusedConv2D, Conv2D]; ``_MklNativeConv2DBackpropFilterWithBias`` ->
    [..., Conv2DBackpropFilterWithBias, Conv2DBackpropFilter]; ``FusedBatchNormV3`` -> [..., FusedBatchNorm]."""
    names = _stripped_names(op_type)
    names += [re.sub(r"V\d+$", "", n) for n in names]  # FusedBatchNormV3 -> FusedBatchNorm
    return list(dict.fromkeys(names))


@functools.cache
def _raw_ops() -> Any:
    if importlib.util.find_spec("tensorflow") is None:
        return None
    try:
        return importlib.import_module("tensorflow").raw_ops
    except Exception:  # a broken TensorFlow install must not stop the analysis
        return None


class TensorFlowOpLocator:
    """Op type -> a compute kernel (declared vector), or the op's docstring and Python signature from
    ``tf.raw_ops`` for the kernels the classifiers have to judge."""

    name = "tensorflow"

    def locate(self, frame: Frame, context: LocateContext) -> FunctionSource | None:
        if not frame.name.startswith(OP_FRAME_PREFIX):
            return None
        op_type = frame.name[len(OP_FRAME_PREFIX) :]
        documented = self._documented(frame.name, op_type)
        if is_compute_op(op_type):
            return kernel_function(op_type, documented)
        if documented is None and _raw_ops() is not None:
            context.report(f"tensorflow: no documentation for op {op_type}")
        return documented

    @staticmethod
    def _documented(name: str, op_type: str) -> FunctionSource | None:
        raw_ops = _raw_ops()
        if raw_ops is None:
            return None
        for candidate in public_op_candidates(op_type):
            op = getattr(raw_ops, candidate, None)
            if op is None or not op.__doc__:
                continue
            try:
                signature = str(inspect.signature(op))
            except (TypeError, ValueError):
                signature = "(*args)"
            return FunctionSource(
                qualified_name=name,
                language="python",
                code=f"def {candidate}{signature}:\n    return tf.raw_ops.{candidate}{signature}\n",
                doc=inspect.cleandoc(op.__doc__),
                origin="op-doc",
                location=f"tf.raw_ops.{candidate}",
            )
        return None
