"""TensorFlow op frames -> the op's documentation from TensorFlow's own registry (``tf.raw_ops``).

A hook records an op execution as the frame ``tensorflow.op.<OpType>`` (language ``unknown``, module
``tensorflow``). The locator is registered through the ``crystalperf.source_locators`` entry point;
TensorFlow is imported only when such a frame is met and TensorFlow is installed, so analysing any
other trace never loads it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import re
from typing import Any

from crystalperf.core.classify import FunctionSource
from crystalperf.core.sources import LocateContext
from crystalperf.core.trace import Frame

OP_FRAME_PREFIX = "tensorflow.op."

# Grappler and the oneDNN (MKL) rewrites rename ops; their documentation is the public op's.
_INTERNAL_PREFIXES = ("_MklNative", "_Mkl", "_Fused", "_")


def op_frame_name(op_type: str) -> str:
    """The frame name a hook gives an op of this type."""
    return OP_FRAME_PREFIX + op_type


def public_op_candidates(op_type: str) -> list[str]:
    """``_FusedConv2D`` -> [_FusedConv2D, Conv2D]; ``_MklNativeConv2DBackpropFilterWithBias`` ->
    [..., Conv2DBackpropFilterWithBias, Conv2DBackpropFilter]; ``FusedBatchNormV3`` -> [..., FusedBatchNorm]."""
    names = [op_type]
    stripped = op_type
    for prefix in _INTERNAL_PREFIXES:
        if stripped.startswith(prefix) and len(stripped) > len(prefix):
            stripped = stripped[len(prefix) :]
            names.append(stripped)
    # oneDNN fuses an op with its bias/activation (FusedConv2D, FusedMatMul, ...WithBias).
    if stripped.startswith("Fused") and len(stripped) > 5 and stripped[5].isupper():
        stripped = stripped[5:]
        names.append(stripped)
    if stripped.endswith("WithBias") and len(stripped) > 8:
        stripped = stripped[: -len("WithBias")]
        names.append(stripped)
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
    """Op type -> the op's docstring and Python signature from ``tf.raw_ops``."""

    name = "tensorflow"

    def locate(self, frame: Frame, context: LocateContext) -> FunctionSource | None:
        if not frame.name.startswith(OP_FRAME_PREFIX):
            return None
        raw_ops = _raw_ops()
        if raw_ops is None:
            return None
        op_type = frame.name[len(OP_FRAME_PREFIX) :]
        for candidate in public_op_candidates(op_type):
            op = getattr(raw_ops, candidate, None)
            if op is None or not op.__doc__:
                continue
            try:
                signature = str(inspect.signature(op))
            except (TypeError, ValueError):
                signature = "(*args)"
            return FunctionSource(
                qualified_name=frame.name,
                language="python",
                code=f"def {candidate}{signature}:\n    return tf.raw_ops.{candidate}{signature}\n",
                doc=inspect.cleandoc(op.__doc__),
                origin="op-doc",
                location=f"tf.raw_ops.{candidate}",
            )
        context.report(f"tensorflow: no documentation for op {op_type}")
        return None
