"""``model.fit(callbacks=[CrystalPerfCallback()])``: profile a window of training steps, write the trace
and the report when training ends.

During the window TensorFlow's own profiler records every kernel and tf.data event (``*.xplane.pb``)
and a thread of ours samples the Python stacks of the input pipeline's threads (py_function and
generator code is invisible to the profiler on TF 2.20+). When training ends the trace is assembled
and written here; the report comes from ``python -m crystalperf.integrations.tensorflow.finish``, which
the callback starts and waits for. Nothing here may fail ``fit``: every step of the callback is guarded,
and a failure costs only the report.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import resource
import shutil
import socket
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from crystalperf.core import trace as tr
from crystalperf.core.hooks import finish_job, guard, testing
from crystalperf.core.iocounters import IoCounterSampler
from crystalperf.core.sampling import PythonStackSampler
from crystalperf.integrations.base import run_finish
from crystalperf.integrations.tensorflow import config
from crystalperf.integrations.tensorflow.assemble import build_trace_for
from crystalperf.integrations.tensorflow.config import INTEGRATION
from crystalperf.integrations.tensorflow.reader import (
    Recording,
    RunInfo,
    Step,
    Timeline,
    find_xplane,
    read_timeline,
)

log = logging.getLogger("crystalperf.tensorflow")

DEFAULT_WINDOW = 20  # steps: enough for a stable mean step time, cheap to trace
DEFAULT_SKIP = 2  # the first steps trace and compile the train function
ANALYSIS_LOG = "crystalperf-analysis.log"
# Python frames of these files run user input code on tf.data's threads (py_function, generators,
# Keras PyDataset): their samples describe the input pipeline.
_INPUT_CODE_MARKERS = ("script_ops.py", "data_adapters", "py_dataset", "generator")


def _layer_names(model: Any) -> frozenset[str]:
    names: set[str] = set()
    stack = [model]
    while stack and len(names) < 10_000:
        layer = stack.pop()
        names.add(str(getattr(layer, "name", "")))
        stack.extend(getattr(layer, "layers", None) or [])
    names.discard("")
    return frozenset(names)


def _threads() -> int:
    configured = tf.config.threading.get_intra_op_parallelism_threads()
    return configured or len(os.sched_getaffinity(0))


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def _read_bytes() -> int | None:
    """Bytes this process has read from storage (page-cache hits excluded), or None if unknown."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _bottleneck_sentence(out: Path) -> str:
    with guard("reading the report's verdict", log):
        report = json.loads((out / "crystalperf-report.json").read_text())
        return str(report["bottleneck"]["sentence"])
    return ""


class CrystalPerfCallback(keras.callbacks.Callback):
    """Profiles a window of training steps and, when ``fit`` returns, leaves a crystalperf report.

    Args:
        output_dir: where ``crystalperf-trace.json.gz`` and the report go. Default: next to what the
            training writes (``<log dir of a TensorBoard/ModelCheckpoint/BackupAndRestore callback in the
            same fit>/crystalperf/<run-id>``), else ``./crystalperf/<run-id>``; the path is logged.
        steps: how many steps to profile after skipping the first ones (default 20, after 2 warm-up
            steps; short trainings are profiled whole), or ``(first, stop)`` global batch numbers.
        sample_interval_ms: period of the Python stack sampler.
        analyze: run the analysis at the end of training (else only the trace is written).
    """

    def __init__(self, output_dir: str | os.PathLike[str] | None = None, steps: int | tuple[int, int] | None = None,
                 sample_interval_ms: float = 20.0, analyze: bool = True) -> None:
        super().__init__()
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.steps = steps
        self.sample_interval_s = max(0.001, sample_interval_ms / 1000)
        self.analyze = analyze
        self.trace_path: Path | None = None
        self.report_dir: Path | None = None
        self._reset()

    def _reset(self) -> None:
        self._batch = 0
        self._epoch = 0
        self._window: tuple[int, int] = (0, 0)
        self._steps: list[Step] = []
        self._current: Step | None = None
        self._profiling = False
        self._profiler_error: str | None = None
        self._logdir: Path | None = None
        self._sampler: PythonStackSampler | None = None
        self._io: IoCounterSampler | None = None
        self._main_ident = threading.get_ident()
        self._cpu_start = 0.0
        self._read_start: int | None = None
        self._fit_start: float | None = None
        self._finished = True
        self._warnings: list[str] = []
        self._timeline: Timeline | None = None
        self._cpu = 0.0
        self._read: int | None = None

    # -- Keras hooks -----------------------------------------------------------------------------
    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if not self._finished:  # an earlier fit() raised before on_train_end: keep what it recorded
            self._finish(status="failed")
        self._reset()
        self._finished = False
        self._fit_start = time.time()
        with guard("crystalperf: starting the I/O counters", log):
            # Over the whole fit, not only the window: the bytes moved and the cgroup limits in force are
            # what what-ifs scale from, and a window's edges cut a transfer in the middle.
            self._io = IoCounterSampler(source=f"python:{os.getpid()}").start()
        with guard("crystalperf: preparing the profile window", log):
            self._window = self._choose_window()
            # The fit's other callbacks are locals of Keras frames above this one.
            siblings = config.fit_callbacks(self, sys._getframe()) if self.output_dir is None else []
            self.report_dir = config.output_dir(self.output_dir, config.sibling_output_dir(siblings),
                                                config.run_id(), config.tf_config())
            log.info("crystalperf: profiling steps %d-%d; report will be written to %s",
                     self._window[0], self._window[1] - 1, self.report_dir)
            _register_exit(self)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.time()
        with guard("crystalperf: starting a step", log):
            if self._batch == self._window[0] and not self._profiling and self._batch < self._window[1]:
                self._start_window()
            if self._profiling:
                if self._current is not None and self._steps and self._steps[-1] is self._current:
                    self._current.end = now  # a step lasts until the next begins (callbacks included)
                self._current = Step(self._batch, self._epoch, now, now)
                self._steps.append(self._current)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.time()
        with guard("crystalperf: ending a step", log):
            if self._profiling and self._current is not None:
                self._current.end = now
            self._batch += 1
            if self._profiling and self._batch >= self._window[1]:
                self._stop_window()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._finish(status="succeeded")

    # -- the window --------------------------------------------------------------------------------
    def _choose_window(self) -> tuple[int, int]:
        if isinstance(self.steps, tuple):
            first, stop = self.steps
            return max(0, int(first)), max(int(first) + 1, int(stop))
        count = int(self.steps) if self.steps else DEFAULT_WINDOW
        params = self.params or {}
        total = None
        if params.get("steps") and params.get("epochs"):
            total = int(params["steps"]) * int(params["epochs"])
        skip = DEFAULT_SKIP
        if total is not None and total < DEFAULT_SKIP + 4:
            skip = 0 if total < 3 else 1  # short trainings: profile (almost) everything
        return skip, skip + max(1, count)

    def _start_window(self) -> None:
        self._cpu_start = _cpu_seconds()
        self._read_start = _read_bytes()
        self._sampler = PythonStackSampler(self._key_for, interval_s=self.sample_interval_s).start()
        self._profiling = True
        try:
            self._logdir = Path(tempfile.mkdtemp(prefix="crystalperf-tf-"))
            tf.profiler.experimental.start(str(self._logdir))
        except Exception as exc:  # e.g. a TensorBoard callback's profiler is already running
            if testing() and not isinstance(exc, (tf.errors.AlreadyExistsError, tf.errors.UnavailableError)):
                raise
            self._profiler_error = f"{type(exc).__name__}: {exc}".strip()
            self._warnings.append(f"TensorFlow profiler unavailable ({self._profiler_error}); "
                                  "only step times and Python samples were recorded")
            log.warning("crystalperf: the TensorFlow profiler could not start (%s); the report will have step "
                        "times and Python samples only", self._profiler_error)

    def _key_for(self, ident: int, name: str) -> tr.SampleKey | None:
        step = self._current
        if step is None:
            return None
        if ident == self._main_ident:
            # With the op timeline, kernels describe the step; without it, the training thread does.
            return tr.SampleKey(operation=f"s{step.index}", thread="main") if self._profiler_error else None
        frame = sys._current_frames().get(ident)
        while frame is not None:
            if any(marker in frame.f_code.co_filename for marker in _INPUT_CODE_MARKERS):
                return tr.SampleKey(operation=f"s{step.index}/input", thread=name or "tf.data")
            frame = frame.f_back
        return None

    def _stop_window(self) -> None:
        cpu = _cpu_seconds() - self._cpu_start
        read_end = _read_bytes()
        self._read = read_end - self._read_start if read_end is not None and self._read_start is not None else None
        self._profiling = False
        timeline: Timeline | None = None
        if self._profiler_error is None and self._logdir is not None:
            with guard("crystalperf: stopping the TensorFlow profiler", log):
                tf.profiler.experimental.stop()
                found = find_xplane(self._logdir)
                if found is None:
                    self._warnings.append("the TensorFlow profiler wrote no xplane.pb")
                else:
                    timeline = read_timeline(found)
        self._timeline = timeline
        self._cpu = cpu

    # -- the end of training -----------------------------------------------------------------------
    def _finish(self, status: str) -> None:
        """Write the trace, then (unless ``analyze=False``) wait for the finish command's report."""
        if self._finished:
            return
        self._finished = True
        with guard("crystalperf: writing the training report", log):
            rec = self._recording()
            if rec is None:
                return
            out = self.report_dir or config.DEFAULT_BASE / config.run_id()
            trace = build_trace_for(rec, self._run_info(out, status))
            self.trace_path = finish_job(trace, out, analyze=False)
            if self.trace_path is None:
                return
            if self.analyze:
                self._analyse(self.trace_path, out)
            log.warning("crystalperf: training profile written to %s", out)
        self._stop_io()  # also when the recording failed: the sampler's thread must not outlive the fit

    def _recording(self) -> Recording | None:
        """What the window recorded (the profiler stopped, its files removed); None without a step."""
        if self._profiling:
            self._stop_window()
        io = self._stop_io()
        python_samples = self._sampler.stop() if self._sampler is not None else None
        if self._logdir is not None:
            shutil.rmtree(self._logdir, ignore_errors=True)
        steps = [s for s in self._steps if s.end > s.start]
        if not steps:
            log.warning("crystalperf: no training step was profiled (training ended before step %d); "
                        "no report", self._window[0])
            return None
        return Recording(
            steps=steps, timeline=self._timeline, python_samples=python_samples,
            threads=_threads(), cpu_count=len(os.sched_getaffinity(0)),
            cpu_seconds=self._cpu, memory_bytes=_memory_bytes(), read_bytes=self._read, io=io,
            device="gpu" if tf.config.list_logical_devices("GPU") else "cpu",
            multi_worker=config.multi_worker(config.tf_config()), layer_names=_layer_names(self.model),
            fit_start=self._fit_start, fit_end=time.time(), properties=self._properties(), warnings=self._warnings,
        )

    def _stop_io(self) -> list[tr.IoSample]:
        """The I/O counter rows; the sampler is stopped whatever happens next (no report still stops it)."""
        sampler, self._io = self._io, None
        if sampler is None:
            return []
        with guard("crystalperf: stopping the I/O counters", log):
            return sampler.stop()
        return []

    def _run_info(self, out: Path, status: str) -> RunInfo:
        return RunInfo(run_id=out.name, name=getattr(self.model, "name", "") or "keras model",
                       framework_version=tf.__version__, status=status, output_dir=str(out),
                       host=socket.gethostname())

    def _analyse(self, trace_path: Path, out: Path) -> None:
        """The analysis runs in its own process, as for every framework: the classifiers it loads stay
        out of the training process. fit() returns once the report is there."""
        log_path = out / ANALYSIS_LOG
        status = run_finish(INTEGRATION.finish_command(str(trace_path), "--out", str(out)), log_path,
                            timeout_s=None)
        if status != 0:
            message = f"the analysis failed (exit status {status}); the trace is kept, see {log_path}"
            if testing():
                raise RuntimeError(message)
            log.warning("crystalperf: %s", message)
            return
        log.warning("crystalperf: %s Report: %s", _bottleneck_sentence(out), out / "crystalperf-report.html")

    def _properties(self) -> dict[str, str]:
        props = {
            "tensorflow.version": tf.__version__,
            "keras.version": keras.__version__,
            "intra_op_parallelism_threads": str(tf.config.threading.get_intra_op_parallelism_threads()),
            "inter_op_parallelism_threads": str(tf.config.threading.get_inter_op_parallelism_threads()),
        }
        with guard("crystalperf: reading the distribution strategy", log):
            # fit() runs outside the strategy's scope; the model remembers the strategy it was built in.
            strategy = getattr(self.model, "distribute_strategy", None) or tf.distribute.get_strategy()
            props["distribute.strategy"] = type(strategy).__name__
            props["distribute.replicas"] = str(strategy.num_replicas_in_sync)
        return props


_pending: weakref.WeakSet[CrystalPerfCallback] = weakref.WeakSet()


def _register_exit(callback: CrystalPerfCallback) -> None:
    """A fit() that raises never calls on_train_end: write what was recorded at interpreter exit."""
    if not _pending:
        atexit.register(_flush_pending)
    _pending.add(callback)


def _flush_pending() -> None:
    for callback in list(_pending):
        callback._finish(status="failed")
