"""TensorFlow/Keras integration: ``model.fit(callbacks=[CrystalPerfCallback()])``.

The callback profiles a window of training steps with TensorFlow's own profiler plus a Python stack
sampler, and when training ends writes ``crystalperf-trace.json.gz`` and the report. TensorFlow is
imported only when the callback is used, so the rest of crystalperf works without it.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from crystalperf.core.errors import FrameworkNotInstalledError

__all__ = ["CrystalPerfCallback"]


def __getattr__(name: str) -> Any:
    if name == "CrystalPerfCallback":
        if importlib.util.find_spec("tensorflow") is None:
            raise FrameworkNotInstalledError("tensorflow", "tensorflow")
        from crystalperf.integrations.tensorflow.callback import CrystalPerfCallback

        return CrystalPerfCallback
    raise AttributeError(name)
