"""Where the Keras callback's cost on short steps goes: the bench's ``keras-fit`` model (``bench/overhead.py``) run
in interleaved rounds without any hook, with TensorFlow's profiler alone over the same 20-step window, with the
callback, and with the callback but no Python stack sampler; per mode the median over rounds of the ratio to the
round's run without a hook, in the window's wall time (the 20 steps) and the process's CPU time over it, the same
without the first profiled step (``steady_``: the callback starts the profiler inside it, once per fit), and the
median step.

    .nox/tensorflow/bin/python bench/keras_overhead_parts.py --rounds 5 [--one-cpu] [--in-process]

Each run is a fresh process; with ``--in-process`` every run is a ``fit`` of one process instead (the model built
once, the modes alternating fit after fit), which leaves out what differs between processes (where the allocator put
things, which CPU the scheduler chose) and so spreads less; TensorFlow's profiler is then warm in every mode but the
first fit. Nothing is asserted: the figures go to docs/overhead.md."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import KERAS_MODEL  # noqa: E402  (bench/ is not a package)

MODES = ("off", "profiler", "callback", "callback-no-sampler")
FIRST, STOP = 2, 22  # the callback's default window: 20 steps after 2 warm-up steps
# The window's figures hold what starts the profiler where Keras calls it inside a step (the callback starts it in the
# first step's begin, after the bench's timer started; "profiler" mode starts it before): the steady figures leave
# the first profiled step out, a cost paid once per fit, and the median step is the steady cost of one step.
KEYS = ("wall_s", "steady_wall_s", "step_median_s", "cpu_s", "steady_cpu_s")

ONE_RUN = '''
import glob, json, os, resource, sys, tempfile, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf, keras
modes, images, first, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if len(sys.argv) > 5:  # one core: a TensorFlow thread of each kind
    tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[5]))
    tf.config.threading.set_inter_op_parallelism_threads(int(sys.argv[5]))
''' + KERAS_MODEL + '''def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
class Window(keras.callbacks.Callback):
    def __init__(self, mode):
        super().__init__()
        self.mode, self.steps = mode, []
    def on_train_begin(self, logs=None):
        if self.mode == "profiler":  # warmed up as the callback warms it up
            tf.profiler.experimental.start("")
            tf.profiler.experimental.stop(save=False)
    def on_train_batch_begin(self, batch, logs=None):
        if batch == first:
            if self.mode == "profiler":
                tf.profiler.experimental.start(tempfile.mkdtemp())
            self.cpu0 = cpu()
        self.t, self.c = time.perf_counter(), cpu()
    def on_train_batch_end(self, batch, logs=None):
        if first <= batch < stop:
            self.steps.append((time.perf_counter() - self.t, cpu() - self.c))
        if batch == stop - 1:
            self.cpu1 = cpu()
            if self.mode == "profiler":
                tf.profiler.experimental.stop()
def one_fit(mode):
    window = Window(mode)
    callbacks = [window]
    if mode.startswith("callback"):
        from crystalperf.integrations.tensorflow import CrystalPerfCallback
        options = {"sample_interval_ms": 600_000} if mode == "callback-no-sampler" else {}
        callbacks.append(CrystalPerfCallback(output_dir=tempfile.mkdtemp(), analyze=False, **options))
    model.fit(data, epochs=1, steps_per_epoch=stop + 18, verbose=0, callbacks=callbacks)
    walls = [w for w, _ in window.steps]
    return {"mode": mode, "wall_s": sum(walls), "steady_wall_s": sum(walls[1:]),
            "step_median_s": sorted(walls)[len(walls) // 2], "cpu_s": window.cpu1 - window.cpu0,
            "steady_cpu_s": sum(c for _, c in window.steps[1:])}
# "off": one run; "off,profiler,...;R": R rounds of those modes in this process, in alternating order
if ";" in modes:
    names, rounds = modes.split(";")
    names = names.split(",")
    one_fit(names[0])  # the first fit builds the step function and the input pipeline: not a round's
    for round_ in range(int(rounds)):
        for mode in (names if round_ % 2 == 0 else names[::-1]):
            print(json.dumps({"round": round_, **one_fit(mode)}), flush=True)
else:
    print(json.dumps(one_fit(modes)))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--one-cpu", action="store_true",
                        help="every run pinned to the first CPU with one TensorFlow thread of each kind")
    parser.add_argument("--in-process", action="store_true",
                        help="every run a fit of one process, the modes alternating, instead of a process each")
    args = parser.parse_args()
    pin = sorted(os.sched_getaffinity(0))[:1] if args.one_cpu else None
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from overhead import _write_images

    images = tempfile.mkdtemp(prefix="keras-parts-")
    _write_images(images)
    ratios: dict[str, dict[str, list[float]]] = {m: {k: [] for k in KEYS} for m in MODES[1:]}
    if args.in_process:
        _in_process(args.rounds, images, pin, ratios)
    for round_ in range(0 if args.in_process else args.rounds):
        order = MODES if round_ % 2 == 0 else tuple(reversed(MODES))
        runs = {}
        for mode in order:
            command = [sys.executable, "-c", ONE_RUN, mode, images, str(FIRST), str(STOP)] + (["1"] if pin else [])
            done = subprocess.run(command, capture_output=True, text=True, check=True,
                                  preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)
            runs[mode] = json.loads(done.stdout.strip().splitlines()[-1])
            print(json.dumps({"round": round_, **runs[mode]}), flush=True)
        _add_ratios(ratios, runs)
    _summary(ratios)


def _in_process(rounds: int, images: str, pin: list[int] | None, ratios: dict[str, dict[str, list[float]]]) -> None:
    command = [sys.executable, "-c", ONE_RUN, ",".join(MODES) + f";{rounds}", images, str(FIRST), str(STOP)]
    done = subprocess.run(command + (["1"] if pin else []), capture_output=True, text=True, check=True,
                          preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None)
    runs: dict[int, dict[str, dict[str, float]]] = {}
    for line in done.stdout.splitlines():
        if line.startswith('{"round"'):
            run = json.loads(line)
            runs.setdefault(run["round"], {})[run["mode"]] = run
            print(line)
    for by_mode in runs.values():
        _add_ratios(ratios, by_mode)


def _add_ratios(ratios: dict[str, dict[str, list[float]]], round_runs: dict[str, dict[str, float]]) -> None:
    """One round's figures of each mode against the round's run without a hook."""
    for mode in MODES[1:]:
        for key in KEYS:
            ratios[mode][key].append(round_runs[mode][key] / round_runs["off"][key] - 1)


def _summary(ratios: dict[str, dict[str, list[float]]]) -> None:
    for mode, by_key in ratios.items():
        print(mode + ": " + ", ".join(
            f"{key} median {statistics.median(v):+.1%} ({min(v):+.1%} to {max(v):+.1%})" for key, v in by_key.items()))


if __name__ == "__main__":
    main()
