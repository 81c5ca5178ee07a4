"""Op documentation comes from the installed TensorFlow's own registry, internal ops included."""

from __future__ import annotations

import pytest

from crystalperf.core.sources import LocateContext
from crystalperf.core.trace import Frame
from crystalperf.integrations.tensorflow.sources import TensorFlowOpLocator, op_frame_name

pytest.importorskip("tensorflow")


@pytest.mark.parametrize(("op_type", "public", "word"), [
    ("Conv2D", "Conv2D", "convolution"),
    ("_FusedConv2D", "Conv2D", "convolution"),
    ("ReadFile", "ReadFile", "file"),
    ("FusedBatchNormV3", "FusedBatchNormV3", "batch normalization"),
])
def test_op_docs_from_raw_ops(op_type: str, public: str, word: str) -> None:
    found = TensorFlowOpLocator().locate(Frame(name=op_frame_name(op_type), module="tensorflow"), LocateContext())
    assert found is not None and found.origin == "op-doc" and found.location == f"tf.raw_ops.{public}"
    assert word in found.doc.lower() and found.code.startswith(f"def {public}(")


def test_unknown_ops_are_reported_not_raised() -> None:
    context = LocateContext()
    assert TensorFlowOpLocator().locate(Frame(name=op_frame_name("NoSuchOpAnywhere")), context) is None
    assert context.problems == ["tensorflow: no documentation for op NoSuchOpAnywhere"]
