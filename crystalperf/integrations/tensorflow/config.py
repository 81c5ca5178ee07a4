"""The TensorFlow integration's contract and the rules that decide where a training's report goes.

Nothing here imports TensorFlow or Keras: the version check reads the installed distribution's metadata,
and the output-directory rules look only at the callback objects of the running ``fit``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from crystalperf.integrations.base import Integration

INTEGRATION = Integration(
    name="tensorflow",
    module="tensorflow",
    distributions=("tensorflow-cpu", "tensorflow", "tensorflow-intel", "tf-nightly"),
    minimum=(2, 19),
    below=(2, 22),
)

# Keras keeps a fit's callbacks in a CallbackList held by a local of fit() a few frames above the hook.
_CALLER_FRAMES = 12
DEFAULT_BASE = Path("crystalperf")


def run_id(now: float | None = None, pid: int | None = None) -> str:
    """``fit-20250101-120000-4242``: the local start time and the process, unique on one host."""
    stamp = time.strftime("fit-%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{os.getpid() if pid is None else pid}"


def tf_config(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """``TF_CONFIG`` as a dict; {} when unset or not a JSON object."""
    text = (os.environ if environ is None else environ).get("TF_CONFIG") or "{}"
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def worker_suffix(config: dict[str, Any]) -> str | None:
    """``worker-1`` under MultiWorkerMirroredStrategy (TF_CONFIG names this process's task)."""
    task = config.get("task") or {}
    if isinstance(task, dict) and "type" in task:
        return f"{task['type']}-{task.get('index', 0)}"
    return None


def multi_worker(config: dict[str, Any]) -> bool:
    """Whether TF_CONFIG's cluster has more than one task (collectives then cross the network)."""
    cluster = config.get("cluster") or {}
    return isinstance(cluster, dict) and sum(len(v) for v in cluster.values() if isinstance(v, list)) > 1


def fit_callbacks(callback: object, frame: FrameType | None = None) -> list[Any]:
    """The callbacks of the ``fit`` that ``callback`` belongs to, found in the callers' frames; [] if none."""
    frame = frame if frame is not None else sys._getframe(1)
    for _ in range(_CALLER_FRAMES):
        if frame is None:
            break
        for value in frame.f_locals.values():
            members = getattr(value, "callbacks", None)
            if isinstance(members, list) and any(m is callback for m in members):
                return members
        frame = frame.f_back
    return []


def sibling_output_dir(callbacks: Sequence[object]) -> Path | None:
    """The directory a TensorBoard / ModelCheckpoint / BackupAndRestore callback among these writes."""
    for other in callbacks:
        for attr in ("log_dir", "backup_dir"):
            found = getattr(other, attr, None)
            if isinstance(found, (str, os.PathLike)) and str(found):
                return Path(found)
        path = getattr(other, "filepath", None)
        if isinstance(path, (str, os.PathLike)) and str(path):
            return Path(path).parent
    return None


def output_dir(explicit: str | os.PathLike[str] | None, sibling: Path | None, run: str,
               config: dict[str, Any]) -> Path:
    """Where the report goes: the explicit directory, else ``<sibling>/crystalperf/<run>``, else
    ``./crystalperf/<run>``; under a TF_CONFIG task, in its ``<type>-<index>`` subdirectory."""
    if explicit is not None:
        chosen = Path(explicit)
    else:
        chosen = (sibling / DEFAULT_BASE if sibling is not None else DEFAULT_BASE) / run
    suffix = worker_suffix(config)
    return chosen / suffix if suffix else chosen
