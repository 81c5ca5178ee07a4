"""TensorFlow op frames -> compute kernels (declared vector) or op documentation, with a stand-in for
``tf.raw_ops`` (no TensorFlow)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from crystalperf.core.attribution.sources import LocateContext
from crystalperf.core.trace import Frame
from crystalperf.integrations.tensorflow import sources
from crystalperf.integrations.tensorflow.sources import (
    COMPUTE_VECTOR,
    TensorFlowOpLocator,
    is_compute_op,
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


def _recv(tensor_type, tensor_name, send_device, send_device_incarnation, recv_device, name=None):  # type: ignore[no-untyped-def]
    """Receives the named tensor from send_device on recv_device."""


@pytest.mark.parametrize("op_type", ["_MklNativeConv2DBackpropFilterWithBias", "_MklNativeMaxPoolGrad",
                                     "ReadVariableOp", "_MklNativeFusedConv2D", "DecodePng", "AssignAddVariableOp"])
def test_compute_kernels_declare_their_vector_instead_of_being_classified(op_type: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # The docs of these ops say "filter", "variable", "pool": a classifier reading them gave disk 0.49 to
    # Conv2DBackpropFilter and network 0.48 to ReadVariableOp. They ran on compute threads: they computed.
    monkeypatch.setattr(sources, "_raw_ops", lambda: None)  # the same with or without TensorFlow
    assert is_compute_op(op_type)
    found = TensorFlowOpLocator().locate(Frame(name=op_frame_name(op_type)), LocateContext())
    assert found is not None and found.origin == "op-kernel" and found.extra == {"vector": COMPUTE_VECTOR}
    assert found.qualified_name == op_frame_name(op_type) and found.location is not None
    assert COMPUTE_VECTOR == "1,0,0"


def _conv2d(input, filter, strides, padding, name=None):  # type: ignore[no-untyped-def]
    """Computes a 2-D convolution given 4-D `input` and `filter` tensors."""


def test_a_compute_kernel_keeps_its_ops_doc_for_the_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "_raw_ops", lambda: SimpleNamespace(Conv2D=_conv2d))
    found = TensorFlowOpLocator().locate(Frame(name=op_frame_name("_MklNativeFusedConv2D")), LocateContext())
    assert found is not None and found.origin == "op-kernel" and found.extra == {"vector": COMPUTE_VECTOR}
    assert found.location == "tf.raw_ops.Conv2D" and "2-D convolution" in found.doc


@pytest.mark.parametrize("op_type", ["ReadFile", "WriteFile", "SaveV2", "RestoreV2", "TFRecordDatasetV2",
                                     "CollectiveReduceV2", "_Recv", "EagerPyFunc", "IteratorGetNext"])
def test_io_transfer_python_and_waiting_kernels_go_to_the_classifiers(op_type: str) -> None:
    assert not is_compute_op(op_type)


def test_an_internal_op_gets_its_public_ops_doc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "_raw_ops", lambda: SimpleNamespace(Recv=_recv))
    found = TensorFlowOpLocator().locate(Frame(name=op_frame_name("_Recv")), LocateContext())
    assert found is not None and found.location == "tf.raw_ops.Recv" and found.origin == "op-doc"
    assert found.code.startswith("def Recv(tensor_type, tensor_name, send_device,")
    assert "Receives the named tensor" in found.doc and not found.extra


def test_other_frames_and_missing_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    context = LocateContext()
    assert TensorFlowOpLocator().locate(Frame(name="train.py:step"), context) is None
    monkeypatch.setattr(sources, "_raw_ops", lambda: None)
    assert TensorFlowOpLocator().locate(Frame(name=op_frame_name("ReadFile")), context) is None
    assert context.problems == []  # no TensorFlow is no problem of the op's


def test_compute_kernels_keep_their_declared_vector_whatever_the_classifier_says() -> None:
    from pathlib import Path

    from crystalperf.core.analysis import analyze
    from crystalperf.core.attribution.classify import FixedClassifier
    from crystalperf.core.resources import ResourceVector
    from crystalperf.core.trace import load_trace

    trace = load_trace(Path(__file__).resolve().parents[1] / "data" / "tensorflow-fit-trace.json.gz")
    everything_is_disk = FixedClassifier({}, default=ResourceVector(0.0, 1.0, 0.0))
    report = analyze(trace, classifier=everything_is_disk, locators=[TensorFlowOpLocator()], scenarios=[]).report
    kernels = [f for o in report["operations"] for f in o["top_functions"] if f["origin"] == "op-kernel"]
    assert any("Conv2DBackpropFilter" in f["name"] for f in kernels)
    assert all(f["vector"]["cpu"] == 1 for f in kernels), [(f["name"], f["vector"]) for f in kernels]
