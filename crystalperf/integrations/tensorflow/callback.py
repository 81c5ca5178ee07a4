"""``model.fit(callbacks=[CrystalPerfCallback()])``: profile a window of training steps, write the trace
and the report when training ends. The same callback given to ``model.predict`` or ``model.evaluate`` (outside
``fit``) profiles a window of their steps the same way; the validation ``fit`` runs after each epoch is not a run
of its own.

During the window TensorFlow's own profiler records every kernel and tf.data event (``*.xplane.pb``)
and a thread of ours samples the Python stacks of the input pipeline's threads (py_function and
generator code is invisible to the profiler on TF 2.20+). When training ends the trace is assembled
and written here; the report comes from ``python -m crystalperf.integrations.tensorflow.finish``, which
the callback starts in its own session and, by default, does not wait for: the end of ``fit`` costs the trace's
writing only. Nothing here may fail ``fit``: every step of the callback is guarded, and a failure costs only the
report.

What the callback costs is measured by itself (:mod:`crystalperf.core.record.budget`): its work on the training thread,
reading the profile when the window ends, the sampler's and the I/O counters' threads; the trace's ``hook`` says
it. The sampler and the counters run under a CPU budget (``cpu_budget``, a share of the cores the process may
use). TensorFlow's profiler traces the kernels inside TensorFlow's own threads: that part of the cost is not
separable here (``bench/overhead.py`` measures the profiled steps with and without the callback).

A fit that does not end normally still leaves its trace, marked partial: on SIGTERM (a handler installed for
the duration of fit writes it, then hands the signal on, so the process still dies of it), when fit raises
(at interpreter exit, or when the next fit begins). What the callback holds is bounded in bytes
(``memory_budget_bytes``): outside the window nothing accumulates, and the window ends early when its
records would outgrow the budget.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from types import FrameType
from typing import Any

import keras
import tensorflow as tf

from crystalperf.core import trace as tr
from crystalperf.core.finish import finish_job
from crystalperf.core.parallel import resident_bytes
from crystalperf.core.record import budget as hook_budget
from crystalperf.core.record.hooks import guard, testing
from crystalperf.core.record.iocounters import IoCounterSampler, descendant_cpu
from crystalperf.core.record.sampling import PythonStackSampler, in_hook_code, stack_frames
from crystalperf.integrations.base import run_finish
from crystalperf.integrations.tensorflow import config
from crystalperf.integrations.tensorflow.assemble import build_trace_for
from crystalperf.integrations.tensorflow.config import INTEGRATION
from crystalperf.integrations.tensorflow.reader import (
    OP_EVENT_BYTES,
    Recording,
    RunInfo,
    Step,
    Timeline,
    Unprofiled,
    find_xplane,
    read_timeline,
)
from crystalperf.integrations.tensorflow.tiling import BATCH_CALLBACKS, CALLBACKS_THREAD

log = logging.getLogger("crystalperf.tensorflow")

DEFAULT_WINDOW = 20  # steps: enough for a stable mean step time, cheap to trace
DEFAULT_SKIP = 2  # the first steps trace and compile the train function
# Without TensorFlow's op timeline (Keras on another backend, the profiler taken) the steps' work is known from
# Python samples only: the default window then runs on past its steps until it lasted this long, for samples.
SAMPLES_ONLY_WINDOW_S = 3.0
ANALYSIS_LOG = "crystalperf-analysis.log"
DEFAULT_MEMORY_BUDGET = 128 * 2**20  # bytes
MIN_MEMORY_BUDGET = 4 * 2**20
DEFAULT_REPORT_WAIT_S = 0.0
# How the memory budget is shared (see docs/tensorflow.md): the profiler's own buffer (measured as the process's
# growth during the window), the decoded kernel events, the Python sample rows, the step records. The other half
# is headroom for the profiler's stop, which turns its buffer into an XSpace and serialises it (about twice the
# buffer again, for a moment).
_PROFILER_SHARE, _EVENTS_SHARE, _SAMPLES_SHARE, _STEPS_SHARE = 0.25, 0.125, 0.0625, 0.0625
STEP_BYTES = 160  # one Step record (slots, three floats) and its list slot
SAMPLE_ROW_BYTES = 240  # one aggregated sample row: its dict entry, key tuple and count
# The process's growth is checked only after a few profiled steps: tf.data's buffers fill in the first ones.
GROWTH_CHECK_AFTER_STEPS = 4
# Python frames of these files run user input code on tf.data's threads (py_function, generators,
# Keras PyDataset): their samples describe the input pipeline.
_INPUT_CODE_MARKERS = ("script_ops.py", "data_adapters", "py_dataset", "generator")
# How deep a thread's stack is searched for those markers.
_INPUT_SEARCH_DEPTH = 256
# Until the sampler first finds an input thread running Python, its wait doubles up to this many intervals: an
# input pipeline of TensorFlow's own ops (no Python) is then looked at a few times a second, not fifty.
IDLE_SAMPLER_WAITS = 8
# The most steps timed after the window (their median beside the profiled steps' says what profiling cost a step).
LATER_STEPS_TIMED = 64


def _in_batch_callback(stack: Any) -> bool:
    """The training thread is in a batch callback other than crystalperf's own (whose work is the hook's cost)."""
    return (any(code.co_name in BATCH_CALLBACKS for code, _ in stack_frames(stack))
            and not in_hook_code(stack))


def _layer_names(model: Any) -> frozenset[str]:
    names: set[str] = set()
    stack = [model]
    while stack and len(names) < 10_000:
        layer = stack.pop()
        names.add(str(getattr(layer, "name", "")))
        stack.extend(getattr(layer, "layers", None) or [])
    names.discard("")
    return frozenset(names)


def _threads(backend: str = "tensorflow") -> int:
    """The threads a kernel is split over: TensorFlow's intra-op pool, or PyTorch's where Keras runs on it."""
    torch = sys.modules.get("torch") if backend == "torch" else None
    if torch is not None:
        return int(torch.get_num_threads())
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


def _device(backend: str) -> str:
    """Where the model's ops run: "gpu" where the backend Keras runs on has one, else "cpu"."""
    if backend == "torch" and (torch := sys.modules.get("torch")) is not None:
        return "gpu" if torch.cuda.is_available() else "cpu"
    if backend == "jax" and (jax := sys.modules.get("jax")) is not None:
        return "gpu" if jax.default_backend() in ("gpu", "cuda", "rocm") else "cpu"
    return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"


def _keras_backend() -> str:
    """The backend Keras 3 runs on (``KERAS_BACKEND``, ``~/.keras/keras.json``): "tensorflow", "jax", "torch"..."""
    try:
        return str(keras.backend.backend())
    except Exception:  # a Keras without the multi-backend API runs on TensorFlow
        return "tensorflow"


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _warm_up_profiler() -> None:
    """Start and stop TensorFlow's profiler once, saving nothing, before the first step: its first start in a
    process costs far more than the next ones, and would otherwise fall in the window's first step (TensorBoard's
    callback warms it up the same way). Another profiler running now (a TensorBoard callback profiling from the
    first batch) is left alone."""
    try:
        tf.profiler.experimental.start("")
    except Exception as exc:  # already running, or no profiler in this build: the window will say so
        log.debug("crystalperf: the profiler was not warmed up: %s", exc)
        return
    try:
        tf.profiler.experimental.stop(save=False)
    except Exception as exc:
        log.debug("crystalperf: the profiler's warm-up did not stop cleanly: %s", exc)


def _with_dropped(unprofiled: Unprofiled | None, dropped: list[Step], kept_end: float) -> Unprofiled:
    """The steps not profiled, with the profiled steps whose kernels the event budget left out before them."""
    seconds = dropped[-1].end - kept_end
    if unprofiled is None:
        return Unprofiled(first=dropped[0].index, last=dropped[-1].index, count=len(dropped), start=kept_end,
                          seconds=seconds)
    return Unprofiled(first=dropped[0].index, last=unprofiled.last, count=len(dropped) + unprofiled.count,
                      start=kept_end, seconds=seconds + unprofiled.seconds)


def _bottleneck_sentence(out: Path) -> str:
    with guard("reading the report's verdict", log):
        report = json.loads((out / "crystalperf-report.json").read_text())
        return str(report["bottleneck"]["sentence"])
    return ""


class CrystalPerfCallback(keras.callbacks.Callback):
    """Profiles a window of training steps and, when ``fit`` returns, leaves a crystalperf report; given to
    ``predict`` or ``evaluate``, the same for their steps.

    Args:
        output_dir: where ``crystalperf-trace.json.gz`` and the report go. Default: next to what the
            training writes (``<log dir of a TensorBoard/ModelCheckpoint/BackupAndRestore callback in the
            same fit>/crystalperf/<run-id>``), else ``./crystalperf/<run-id>``; the path is logged.
        steps: how many steps to profile after skipping the first ones (default 20, after 2 warm-up
            steps; short trainings are profiled whole), or ``(first, stop)`` global batch numbers.
        sample_interval_ms: period of the Python stack sampler.
        analyze: run the analysis at the end of training (else only the trace is written).
        memory_budget_bytes: what the callback may hold for the profiled window (step records, the profiler's
            event buffer, decoded kernel events, Python sample rows; default 128 MiB, at least 4 MiB). The
            window ends early, with a warning in the trace, when it would hold more.
        wait_for_report_s: how long the end of ``fit`` waits for the analysis: 0 (the default) never waits, the
            analysis writes the report in the background (``crystalperf-analysis.log`` says when it is done); a
            number of seconds waits at most that long; None waits until it is done.
        cpu_budget: the share of the cores the process may use that the callback's sampler and counters keep its
            CPU time under (default 0.01; 0: they keep their intervals); they never sample less than once a second.
    """

    def __init__(self, output_dir: str | os.PathLike[str] | None = None, steps: int | tuple[int, int] | None = None,
                 sample_interval_ms: float = 20.0, analyze: bool = True,
                 memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
                 wait_for_report_s: float | None = DEFAULT_REPORT_WAIT_S,
                 cpu_budget: float = hook_budget.DEFAULT_SHARE) -> None:
        super().__init__()
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.steps = steps
        self.sample_interval_s = max(0.001, sample_interval_ms / 1000)
        self.analyze = analyze
        self.memory_budget_bytes = max(MIN_MEMORY_BUDGET, int(memory_budget_bytes))
        self.wait_for_report_s = None if wait_for_report_s is None else max(0.0, float(wait_for_report_s))
        self.cpu_budget = max(0.0, float(cpu_budget))
        self.trace_path: Path | None = None
        self.report_dir: Path | None = None
        self._written: dict[Path, str] = {}  # the directories this callback's runs chose, and their method
        self._sigterm_handler: Any = None
        self._sigterm_previous: Any = None
        self._reset()

    def _budget(self, share: float) -> int:
        return int(self.memory_budget_bytes * share)

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
        self._resident_start: int | None = None
        # A new epoch inside the window starts a new input iterator, whose tf.data buffers fill in its first steps
        # (not the profiler's memory): (resident bytes when it began, the step count from which to rebase).
        self._epoch_rebase: tuple[int, int] | None = None
        self._window_cut: str | None = None  # why the window ended before its last step
        # The requested steps after a window the memory budget ended early, and when the last of them ended (None
        # at an epoch's start: its first step counts from its own begin, not from the evaluation before it).
        self._unprofiled: Unprofiled | None = None
        self._unprofiled_mark: float | None = None
        self._later_steps: list[float] = []
        self._later_begin: float | None = None  # the last timed step's begin after the window (None: a new epoch)
        self._cpu_budget: hook_budget.CpuBudget | None = None
        self._hook_at_start: dict[str, float] = {}
        self._process_cpu_at_start = 0.0
        # the worker processes' CPU seconds when the window began (pid -> seconds), and over the window
        self._workers_at_start: dict[int, float] = {}
        self._worker_cpu: tuple[float, int] | None = None
        self._run = "fit"  # which of the model's methods runs: fit, predict or evaluate

    # -- Keras hooks -----------------------------------------------------------------------------
    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._begin_run("fit")

    def on_predict_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self._finished or self._run != "fit":  # a fit's own predictions are not a run of their own
            self._begin_run("predict")

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self._finished or self._run != "fit":  # fit's validation is part of the fit
            self._begin_run("evaluate")

    def _begin_run(self, run: str) -> None:
        if not self._finished:  # an earlier run raised before its end: keep what it recorded
            self._finish(status="failed", partial=f"{self._run}() did not finish after {self._batch} steps; "
                                                  f"written when the next {run}() began")
        self._reset()
        self._run = run
        self._finished = False
        self._fit_start = time.time()
        self._hook_at_start = hook_budget.PROCESS.parts()
        self._process_cpu_at_start = _cpu_seconds()
        with guard("crystalperf: starting the I/O counters", log):
            self._cpu_budget = hook_budget.CpuBudget(self.cpu_budget)
            # Over the whole fit, not only the window: the bytes moved and the cgroup limits in force are
            # what what-ifs scale from, and a window's edges cut a transfer in the middle.
            self._io = IoCounterSampler(source=f"python:{os.getpid()}", budget=self._cpu_budget).start()
        with guard("crystalperf: preparing the profile window", log):
            self._window = self._choose_window()
            # The fit's other callbacks are locals of Keras frames above this one.
            siblings = config.fit_callbacks(self, sys._getframe()) if self.output_dir is None else []
            run_id = config.run_id(run=self._run)
            self.report_dir = config.output_dir(self.output_dir, config.sibling_output_dir(siblings), run_id,
                                                config.tf_config())
            if self._written.setdefault(self.report_dir, self._run) != self._run:
                # this callback's run of another method there (a fit, then predict) stays; a run of the same
                # method replaces its files, as two fits into one explicit directory always have
                self.report_dir = self.report_dir / run_id
            log.info("crystalperf: profiling steps %d-%d; report will be written to %s",
                     self._window[0], self._window[1] - 1, self.report_dir)
            _register_exit(self)
        with guard("crystalperf: installing the SIGTERM handler", log):
            self._install_sigterm()
        with hook_budget.PROCESS.timed("profile_start"):
            _warm_up_profiler()

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch
        self._unprofiled_mark = None
        self._later_begin = None  # an epoch's first step starts its iterator (and follows the validation)
        with guard("crystalperf: starting an epoch", log):
            if self._profiling and self._resident_start is not None:
                resident = resident_bytes()
                if resident is not None:
                    self._epoch_rebase = (resident, len(self._steps) + GROWTH_CHECK_AFTER_STEPS)

    def on_predict_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._run == "predict":
            self.on_train_batch_begin(batch, logs)

    def on_predict_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._run == "predict":
            self.on_train_batch_end(batch, logs)

    def on_predict_end(self, logs: dict[str, Any] | None = None) -> None:
        if self._run == "predict":
            self._finish(status="succeeded")

    def on_test_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._run == "evaluate":
            self.on_train_batch_begin(batch, logs)

    def on_test_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._run == "evaluate":
            self.on_train_batch_end(batch, logs)

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        if self._run == "evaluate":
            self._finish(status="succeeded")

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._batch == self._window[0] and not self._profiling and self._batch < self._window[1]:
            with guard("crystalperf: starting the profiler", log), hook_budget.PROCESS.timed("profile_start"):
                self._start_window()
        now = time.time()  # the step begins once the profiler runs
        with guard("crystalperf: starting a step", log), hook_budget.PROCESS.timed("callbacks"):
            if self._profiling:
                if self._current is not None and self._steps and self._steps[-1] is self._current:
                    self._current.end = now  # a step lasts until the next begins (callbacks included)
                self._current = Step(self._batch, self._epoch, now, now)
                self._steps.append(self._current)
            else:
                if self._unprofiled is not None and self._unprofiled_mark is None:
                    self._unprofiled_mark = now
                if self._steps and len(self._later_steps) < LATER_STEPS_TIMED:
                    if self._later_begin is not None:
                        self._later_steps.append(now - self._later_begin)
                    self._later_begin = now

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.time()
        with guard("crystalperf: ending a step", log), hook_budget.PROCESS.timed("callbacks"):
            if self._profiling and self._current is not None:
                self._current.end = now
            elif (tail := self._unprofiled) is not None and self._batch < self._window[1] \
                    and self._unprofiled_mark is not None:
                tail.seconds += now - self._unprofiled_mark
                tail.count += 1
                tail.last = self._batch
                self._unprofiled_mark = now
            self._batch += 1
            if self._profiling:
                if self._batch < self._window[1] or self._wants_samples(now):
                    self._check_growth()
                else:
                    self._stop_window()


    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self._run == "fit":
            self._finish(status="succeeded")

    # -- the window --------------------------------------------------------------------------------
    def _choose_window(self) -> tuple[int, int]:
        first, stop = self._requested_window()
        most = self._most_steps()
        if stop - first > most:
            log.warning("crystalperf: profiling %d steps instead of %d (memory_budget_bytes=%d)",
                        most, stop - first, self.memory_budget_bytes)
            self._warnings.append(f"the window was shortened to {most} steps by the memory budget "
                                  f"({self.memory_budget_bytes} bytes)")
            stop = first + most
        return first, stop

    def _wants_samples(self, now: float) -> bool:
        """The default window goes on past its steps where only Python samples describe them, until it lasted
        ``SAMPLES_ONLY_WINDOW_S`` or holds as many steps as the memory budget allows: 20 steps of a few
        milliseconds give a sampler nothing to say."""
        if self._profiler_error is None or self.steps is not None or not self._steps:
            return False
        return now - self._steps[0].start < SAMPLES_ONLY_WINDOW_S and len(self._steps) < self._most_steps()

    def _most_steps(self) -> int:
        return max(1, self._budget(_STEPS_SHARE) // STEP_BYTES)

    def _requested_window(self) -> tuple[int, int]:
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

    def _check_growth(self) -> None:
        """End the window when the process grew by more than the profiler's share of the budget since it began:
        TensorFlow's profiler holds every event in memory until it stops, and that buffer is what grows."""
        if self._resident_start is None or len(self._steps) < GROWTH_CHECK_AFTER_STEPS:
            return
        if self._epoch_rebase is not None:
            at_epoch, from_step = self._epoch_rebase
            if len(self._steps) < from_step:
                return
            # What the new epoch's input pipeline took in its first steps is not the profiler's buffer.
            filled = resident_bytes()
            if filled is not None:
                self._resident_start += max(0, filled - at_epoch)
            self._epoch_rebase = None
        now = resident_bytes()
        if now is None or now - self._resident_start <= self._budget(_PROFILER_SHARE):
            return
        self._window_cut = (f"the window ended after {len(self._steps)} steps: the process grew by "
                            f"{(now - self._resident_start) / 2**20:.0f} MiB while profiling "
                            f"(memory_budget_bytes={self.memory_budget_bytes})")
        log.warning("crystalperf: %s", self._window_cut)
        self._warnings.append(self._window_cut)
        self._stop_window()
        if self._batch < self._window[1] and self._steps:
            # The steps still asked for are timed, so that the report covers them (the first ones after the
            # window's start often ran on batches prefetched before it: no input wait the rest of the fit had).
            ended = self._steps[-1].end
            self._unprofiled = Unprofiled(first=self._batch, last=self._batch - 1, count=0, start=ended, seconds=0.0)
            self._unprofiled_mark = ended

    def _start_window(self) -> None:
        self._cpu_start = _cpu_seconds()
        with guard("crystalperf: reading the worker processes' CPU time", log):
            self._workers_at_start = descendant_cpu(os.getpid())
        self._read_start = _read_bytes()
        self._resident_start = resident_bytes()
        self._epoch_rebase = None
        max_rows = max(1_000, self._budget(_SAMPLES_SHARE) // SAMPLE_ROW_BYTES)
        self._sampler = PythonStackSampler(self._key_for, interval_s=self.sample_interval_s, max_rows=max_rows,
                                           capture_depth=_INPUT_SEARCH_DEPTH, budget=self._cpu_budget,
                                           idle_max_s=IDLE_SAMPLER_WAITS * self.sample_interval_s).start()
        self._profiling = True
        backend = _keras_backend()
        if backend != "tensorflow":
            # Keras 3 on JAX or PyTorch: TensorFlow's profiler would see none of the step's ops, only cost.
            self._profiler_error = f"Keras runs on its {backend} backend"
            self._warnings.append(
                f"Keras runs on its {backend} backend, whose ops TensorFlow's profiler does not see: only step times "
                "and the Python samples of the training thread and the input code were recorded")
            log.warning("crystalperf: Keras runs on its %s backend; the report will have step times and Python "
                        "samples only", backend)
            return
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
        # the stack the sampler captured for this thread: walking a running thread's frames here is unsafe
        stack = self._sampler.captured.get(ident, []) if self._sampler is not None else []
        if ident == self._main_ident:
            # With the op timeline, kernels describe the step, except the batch callbacks' Python (a progress bar,
            # the program's own callback) in its tail; without it, the training thread does.
            if self._profiler_error:
                return tr.SampleKey(operation=f"s{step.index}", thread="main")
            return tr.SampleKey(operation=f"s{step.index}", thread=CALLBACKS_THREAD) if _in_batch_callback(stack) else None
        if any(marker in code.co_filename for code, _ in stack_frames(stack) for marker in _INPUT_CODE_MARKERS):
            return tr.SampleKey(operation=f"s{step.index}/input", thread=name or "tf.data")
        return None

    def _stop_window(self) -> None:
        with hook_budget.PROCESS.timed("profile_read"):
            self._read_window()

    def _read_window(self) -> None:
        """Stops the profiler and reads what it recorded (the window's last step has ended)."""
        cpu = _cpu_seconds() - self._cpu_start
        with guard("crystalperf: reading the worker processes' CPU time", log):
            # a worker that started during the window spent all its time in it; one that ended is not counted
            workers = descendant_cpu(os.getpid())
            self._worker_cpu = (sum(max(0.0, used - self._workers_at_start.get(pid, 0.0))
                                    for pid, used in workers.items()), len(workers))
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
                    timeline = read_timeline(found, max_ops=max(1, self._budget(_EVENTS_SHARE) // OP_EVENT_BYTES))
        if timeline is not None and timeline.dropped_ops:
            self._warnings.append(
                f"{timeline.dropped_ops} kernel executions after the first {len(timeline.ops)} were left out "
                f"(memory_budget_bytes={self.memory_budget_bytes}); the steps they belong to are timed only")
        if self._logdir is not None:  # the profile is read: its files are not needed any more
            shutil.rmtree(self._logdir, ignore_errors=True)
        self._timeline = timeline
        self._cpu = cpu

    # -- the end of training -----------------------------------------------------------------------
    def _finish(self, status: str, partial: str | None = None, wait_s: float | None = None) -> None:
        """Write the trace, then (unless ``analyze=False``) start the finish command for the report and wait
        for it up to ``wait_s`` (default: ``wait_for_report_s``). ``partial`` says why fit did not end normally."""
        if self._finished:
            return
        self._finished = True
        with guard("crystalperf: restoring the SIGTERM handler", log):
            self._restore_sigterm()
        try:
            with guard("crystalperf: writing the training report", log):
                rec = self._recording()
                if rec is None:
                    return
                out = self.report_dir or config.DEFAULT_BASE / config.run_id()
                with hook_budget.PROCESS.timed("trace_build"):
                    trace = build_trace_for(rec, self._run_info(out, status))
                trace.hook = self._hook_cost()
                if partial is not None:
                    trace.partial = partial[:1000]
                self.trace_path = finish_job(trace, out, analyze=False)
                if self.trace_path is None:
                    return
                if self.analyze:
                    self._analyse(self.trace_path, out, self.wait_for_report_s if wait_s is None else wait_s)
                log.warning("crystalperf: %s() profile written to %s%s", self._run, out,
                            f" (partial: {partial})" if partial else "")
        finally:
            # also when the recording failed: no thread or temporary directory of ours outlives the fit
            self._stop_io()
            self._drop_profile()

    def _hook_cost(self) -> tr.HookCost:
        """What the callback cost in this process since fit began, until the trace was built."""
        parts = hook_budget.PROCESS.since(self._hook_at_start)
        sampler = self._sampler
        return tr.HookCost(processes=[hook_budget.process_cost(
            f"python:{os.getpid()}", parts, host=socket.gethostname(),
            process_cpu_s=max(0.0, _cpu_seconds() - self._process_cpu_at_start), budget=self._cpu_budget,
            paces=[sampler.pace] if sampler is not None else [])])

    def _drop_profile(self) -> None:
        logdir, self._logdir = self._logdir, None
        if logdir is not None:
            shutil.rmtree(logdir, ignore_errors=True)

    def _recording(self) -> Recording | None:
        """What the window recorded (the profiler stopped, its files removed); None without a step."""
        try:
            if self._profiling:
                self._stop_window()
            io = self._stop_io()
            python_samples = self._sampler.stop() if self._sampler is not None else None
        finally:
            self._drop_profile()
        steps = [s for s in self._steps if s.end > s.start]
        timeline = self._timeline
        cpu = self._cpu
        worker_cpu, workers = self._worker_cpu if self._worker_cpu is not None else (None, 0)
        unprofiled = self._unprofiled
        if timeline is not None and timeline.complete_until is not None and steps:
            cut = timeline.complete_until
            recorded = steps[-1].end - steps[0].start
            kept_steps = [s for s in steps if s.end <= cut]  # their kernels were all kept
            if kept_steps and len(kept_steps) < len(steps):
                unprofiled = _with_dropped(unprofiled, steps[len(kept_steps):], kept_steps[-1].end)
            steps = kept_steps
            if steps and recorded > 0:  # the CPU seconds were counted over every recorded step
                kept = (steps[-1].end - steps[0].start) / recorded
                cpu *= kept
                worker_cpu = worker_cpu * kept if worker_cpu is not None else None
        if not steps:
            log.warning("crystalperf: no %s() step was profiled (it ended before step %d); no report",
                        self._run, self._window[0])
            return None
        return Recording(
            steps=steps, timeline=timeline, python_samples=python_samples,
            threads=_threads(_keras_backend()), cpu_count=len(os.sched_getaffinity(0)),
            cpu_seconds=cpu, memory_bytes=_memory_bytes(), read_bytes=self._read, io=io,
            worker_cpu_s=worker_cpu, worker_processes=workers,
            device=_device(_keras_backend()),
            multi_worker=config.multi_worker(config.tf_config()), layer_names=_layer_names(self.model),
            fit_start=self._fit_start, fit_end=time.time(), properties=self._properties(), warnings=self._warnings,
            unprofiled=unprofiled if unprofiled is not None and unprofiled.count else None,
            later_step_s=list(self._later_steps),
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
        name = getattr(self.model, "name", "") or "keras model"
        return RunInfo(run_id=out.name, name=name if self._run == "fit" else f"{name}.{self._run}()",
                       framework_version=tf.__version__, status=status, output_dir=str(out),
                       host=socket.gethostname())

    def _analyse(self, trace_path: Path, out: Path, wait_s: float | None) -> None:
        """The analysis runs in its own process (its own session), as for every framework: the classifiers it
        loads stay out of the training process. fit() returns once the report is there, or after ``wait_s``
        seconds, the analysis then finishing on its own."""
        log_path = out / ANALYSIS_LOG
        status = run_finish(INTEGRATION.finish_command(str(trace_path), "--out", str(out)), log_path,
                            timeout_s=wait_s)
        if status is None:
            log.warning("crystalperf: the report will be written to %s when the analysis ends", out)
            return
        if status != 0:
            message = f"the analysis failed (exit status {status}); the trace is kept, see {log_path}"
            if testing():
                raise RuntimeError(message)
            log.warning("crystalperf: %s", message)
            return
        log.warning("crystalperf: %s Report: %s", _bottleneck_sentence(out), out / "crystalperf-report.html")

    # -- SIGTERM --------------------------------------------------------------------------------------------
    def _install_sigterm(self) -> None:
        """Handle SIGTERM for the duration of fit: only from the main thread (Python runs handlers there), and
        only over the default disposition or a Python handler we can call afterwards -- an ignored signal or a
        handler installed outside Python is left alone."""
        if threading.current_thread() is not threading.main_thread() or self._sigterm_handler is not None:
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_DFL or (callable(previous) and not isinstance(previous, int)):
            handler = self._on_sigterm
            signal.signal(signal.SIGTERM, handler)
            self._sigterm_handler, self._sigterm_previous = handler, previous

    def _restore_sigterm(self) -> None:
        handler, previous = self._sigterm_handler, self._sigterm_previous
        if handler is None or threading.current_thread() is not threading.main_thread():
            return  # only the main thread may: ours stays installed and still hands the signal on
        self._sigterm_handler = self._sigterm_previous = None
        if signal.getsignal(signal.SIGTERM) is handler:  # a handler installed after ours stays
            signal.signal(signal.SIGTERM, previous)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """Write what was recorded, marked partial, then let the signal do what it did without us: the
        default kills the process (with the status of SIGTERM), a user's handler is called. The analysis is
        started in the background and not waited for: the process must go."""
        previous = self._sigterm_previous
        try:
            self._finish(status="cancelled", partial=f"{self._run}() received SIGTERM after {self._batch} steps",
                         wait_s=0.0)
        except Exception:  # testing() re-raises inside guard; a signal must still end the process
            log.exception("crystalperf: writing the trace at SIGTERM failed")
        if previous is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        elif callable(previous):
            previous(signum, frame)

    def _properties(self) -> dict[str, str]:
        props = {
            "tensorflow.version": tf.__version__,
            "keras.version": keras.__version__,
            "intra_op_parallelism_threads": str(tf.config.threading.get_intra_op_parallelism_threads()),
            "inter_op_parallelism_threads": str(tf.config.threading.get_inter_op_parallelism_threads()),
            "keras.run": self._run,
            "keras.backend": _keras_backend(),
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
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)  # set for an uncaught exception
    cause = f" ({type(error).__name__}: {error})" if error is not None else ""
    for callback in list(_pending):
        if not callback._finished:
            callback._finish(status="failed", wait_s=callback.wait_for_report_s,
                             partial=f"{callback._run}() did not finish{cause} after {callback._batch} steps; "
                                     "written at interpreter exit")
