"""The TensorFlow integration's contract and the rules that decide where a training's report goes.

Nothing here imports TensorFlow or Keras: the version check reads the installed distribution's metadata,
and the output-directory rules look only at the callback objects of the running ``fit``.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from crystalperf.integrations.base import Integration

log = logging.getLogger("crystalperf.tensorflow")

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
# A TF_CONFIG task type becomes a directory name: only these characters, never a leading dot ("..").
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
MAX_TASK_INDEX = 1_000_000
UNSAFE_TASK = "task"
_fits_in_process = itertools.count(1)


def run_id(now: float | None = None, pid: int | None = None, sequence: int | None = None, run: str = "fit") -> str:
    """``fit-20250101-120000-4242``: the model's method (``fit``, ``predict``, ``evaluate``), the local start time
    and the process, unique on one host; the second and later run of one process get ``-2``, ``-3``... so that two
    runs in the same second never share a directory."""
    stamp = time.strftime(f"{run}-%Y%m%d-%H%M%S", time.localtime(now))
    run = f"{stamp}-{os.getpid() if pid is None else pid}"
    number = next(_fits_in_process) if sequence is None else sequence
    return run if number <= 1 else f"{run}-{number}"


def tf_config(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """``TF_CONFIG`` as a dict; {} when unset or not a JSON object."""
    text = (os.environ if environ is None else environ).get("TF_CONFIG") or "{}"
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def worker_suffix(config: dict[str, Any]) -> str | None:
    """``worker-1`` under MultiWorkerMirroredStrategy (TF_CONFIG names this process's task).

    The name becomes a directory: a task type that is not a plain name (``../x``, ``/etc``, ``.hidden``,
    over 64 characters, not a string) is replaced by ``task``, and an index that is not a small
    non-negative integer by 0, each with a warning -- TF_CONFIG comes from the environment, and no value of
    it may move the report outside its output directory."""
    task = config.get("task") or {}
    if not isinstance(task, dict) or "type" not in task:
        return None
    kind, index = task["type"], task.get("index", 0)
    if not (isinstance(kind, str) and _SAFE_NAME.fullmatch(kind)):
        log.warning("crystalperf: TF_CONFIG task type %.80r is not a plain name; its report goes to %r instead",
                    kind, UNSAFE_TASK)
        kind = UNSAFE_TASK
    if isinstance(index, str) and index.isascii() and index.isdigit() and len(index) <= 7:
        index = int(index)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_TASK_INDEX:
        log.warning("crystalperf: TF_CONFIG task index %.80r is not an integer in [0, %d); 0 is used",
                    index, MAX_TASK_INDEX)
        index = 0
    return f"{kind}-{index}"


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
