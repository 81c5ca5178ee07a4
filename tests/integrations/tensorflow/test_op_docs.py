"""Op documentation comes from the installed TensorFlow's own registry, internal ops included; compute
kernels are located by name whatever TensorFlow holds."""

from __future__ import annotations

import pytest

from crystalperf.core.attribution.sources import LocateContext
from crystalperf.core.trace import Frame
from crystalperf.integrations.tensorflow.sources import TensorFlowOpLocator, op_frame_name

pytest.importorskip("tensorflow")


@pytest.mark.parametrize(("op_type", "public", "word"), [
    ("ReadFile", "ReadFile", "file"),
    ("TFRecordDatasetV2", "TFRecordDatasetV2", "tfrecord"),
    ("_Recv", "Recv", "receives"),
    ("EagerPyFunc", "EagerPyFunc", "python"),
])
def test_op_docs_from_raw_ops(op_type: str, public: str, word: str) -> None:
    found = TensorFlowOpLocator().locate(Frame(name=op_frame_name(op_type), module="tensorflow"), LocateContext())
    assert found is not None and found.origin == "op-doc" and found.location == f"tf.raw_ops.{public}"
    assert word in found.doc.lower() and found.code.startswith(f"def {public}(")


def test_unknown_ops_are_reported_not_raised() -> None:
    context = LocateContext()
    # A reader has to be judged by its documentation; there is none for this one.
    assert TensorFlowOpLocator().locate(Frame(name=op_frame_name("NoSuchRecordReader")), context) is None
    assert context.problems == ["tensorflow: no documentation for op NoSuchRecordReader"]


@pytest.mark.parametrize(("op_type", "public"), [("Conv2D", "Conv2D"), ("_FusedConv2D", "Conv2D"),
                                                  ("FusedBatchNormV3", "FusedBatchNormV3"),
                                                  ("_MklNativeConv2DBackpropFilterWithBias", "Conv2DBackpropFilter")])
def test_compute_kernels_name_a_public_op(op_type: str, public: str) -> None:
    import tensorflow as tf

    found = TensorFlowOpLocator().locate(Frame(name=op_frame_name(op_type), module="tensorflow"), LocateContext())
    assert found is not None and found.origin == "op-kernel" and found.location == f"tf.raw_ops.{public}"
    assert hasattr(tf.raw_ops, public)
