"""TensorFlow/Keras integration: ``model.fit(callbacks=[CrystalPerfCallback()])``.

The callback profiles a window of training steps with TensorFlow's own profiler plus a Python stack
sampler, and when training ends writes ``crystalperf-trace.json.gz`` and the report. TensorFlow is
imported only when the callback is used (after checking the installed version is one it supports), so
the rest of this package (reading saved profiles, assembling traces) works without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from crystalperf.integrations.tensorflow.config import INTEGRATION

if TYPE_CHECKING:
    from crystalperf.integrations.tensorflow.assemble import build_trace
    from crystalperf.integrations.tensorflow.callback import CrystalPerfCallback
    from crystalperf.integrations.tensorflow.reader import (
        OpEvent,
        Recording,
        RunInfo,
        Step,
        Timeline,
        find_xplane,
        load_recording,
        read_timeline,
    )
    from crystalperf.integrations.tensorflow.sources import TensorFlowOpLocator

__all__ = ["INTEGRATION", "CrystalPerfCallback", "OpEvent", "Recording", "RunInfo", "Step", "TensorFlowOpLocator",
           "Timeline", "build_trace", "find_xplane", "load_recording", "read_timeline"]

_LAZY = {
    "CrystalPerfCallback": "callback",
    "build_trace": "assemble",
    "OpEvent": "reader",
    "Recording": "reader",
    "RunInfo": "reader",
    "Step": "reader",
    "Timeline": "reader",
    "find_xplane": "reader",
    "load_recording": "reader",
    "read_timeline": "reader",
    "TensorFlowOpLocator": "sources",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(name)
    if module == "callback":
        INTEGRATION.check()  # the typed not-installed / unsupported-version error before importing TensorFlow
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
