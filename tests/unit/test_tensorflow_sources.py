"""TensorFlow op frames -> op documentation, with a stand-in for ``tf.raw_ops`` (no TensorFlow)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from crystalperf.core.sources import LocateContext
from crystalperf.core.trace import Frame
from crystalperf.integrations.tensorflow import sources
from crystalperf.integrations.tensorflow.sources import (
    TensorFlowOpLocator,
    op_frame_name,
    public_op_candidates,
)


def test_internal_tensorflow_ops_map_to_their_public_op() -> None:
    assert public_op_candidates("_FusedConv2D")[-1] == "Conv2D"
    assert "MatMul" in public_op_candidates("_MklMatMul")
    assert "FusedBatchNorm" in public_op_candidates("FusedBatchNormV3")
    assert public_op_candidates("Conv2D") == ["Conv2D"]
    # oneDNN's fused kernels as TF 2.21's CPU build names them.
    assert "Conv2D" in public_op_candidates("_MklNativeFusedConv2D")
    assert "Conv2DBackpropFilter" in public_op_candidates("_MklNativeConv2DBackpropFilterWithBias")
    assert "MatMul" in public_op_candidates("_MklNativeFusedMatMul")


def _conv2d(input, filter, strides, padding, name=None):  # type: ignore[no-untyped-def]
    """Computes a 2-D convolution given 4-D `input` and `filter` tensors."""


def test_an_internal_op_gets_its_public_ops_doc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "_raw_ops", lambda: SimpleNamespace(Conv2D=_conv2d))
    found = TensorFlowOpLocator().locate(Frame(name=op_frame_name("_MklNativeFusedConv2D")), LocateContext())
    assert found is not None and found.location == "tf.raw_ops.Conv2D" and found.origin == "op-doc"
    assert found.code.startswith("def Conv2D(input, filter, strides, padding, name=None):")
    assert "2-D convolution" in found.doc


def test_other_frames_and_missing_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    context = LocateContext()
    assert TensorFlowOpLocator().locate(Frame(name="train.py:step"), context) is None
    monkeypatch.setattr(sources, "_raw_ops", lambda: None)
    assert TensorFlowOpLocator().locate(Frame(name=op_frame_name("Conv2D")), context) is None
    assert context.problems == []  # no TensorFlow is no problem of the op's
