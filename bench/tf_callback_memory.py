"""What CrystalPerfCallback holds as the profiled window grows, against its memory budget.

Each run is a fresh process training a small MLP on in-memory data (one kernel-heavy step every few ms) with
a window of N profiled steps (``steps=(2, 2 + N)``), the trace only (``analyze=False``). Printed per run: the
steps asked for and the steps in the trace, the training process's peak RSS above the same training without
the callback, the trace's size, and the callback's warnings (where the budget cut the window):

    python bench/tf_callback_memory.py                       # windows 20, 200, 2000, 128 MiB budget
    python bench/tf_callback_memory.py --windows 20 2000 20000 --budget-mib 16
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys
import keras, numpy as np
from crystalperf.integrations.tensorflow import CrystalPerfCallback

window, budget, out, steps = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
x = np.random.rand(4096, 32).astype("float32"); y = np.random.rand(4096, 1).astype("float32")
model = keras.Sequential([keras.Input((32,))] + [keras.layers.Dense(64, activation="relu") for _ in range(6)]
                         + [keras.layers.Dense(1)])
model.compile("adam", "mse")
callbacks = [] if window == 0 else [CrystalPerfCallback(output_dir=out, steps=(2, 2 + window), analyze=False,
                                                        memory_budget_bytes=budget)]
model.fit(x, y, batch_size=16, epochs=-(-steps // 256), steps_per_epoch=min(steps, 256), verbose=0,
          callbacks=callbacks)
print(json.dumps({"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run(window: int, budget: int, out: Path, steps: int) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(window), str(budget), str(out), str(steps)],
                          capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    trace = out / "crystalperf-trace.json.gz"
    if trace.is_file():
        from crystalperf.core.trace import load_trace

        loaded = load_trace(trace)
        result.update(profiled=int(loaded.metrics.get("steps", 0)), trace_bytes=trace.stat().st_size,
                      warnings=[w for w in loaded.warnings if "budget" in w or "window ended" in w])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, nargs="+", default=[20, 200, 2000])
    parser.add_argument("--budget-mib", type=float, default=128.0)
    args = parser.parse_args()
    budget = int(args.budget_mib * 2**20)
    with tempfile.TemporaryDirectory() as tmp:
        steps = max(args.windows) + 4  # every run trains as long, so only the window differs
        base = int(run(0, budget, Path(tmp) / "none", steps)["peak_rss"])  # type: ignore[call-overload]
        print(f"{steps} steps; budget {args.budget_mib:g} MiB; training without the callback: "
              f"peak RSS {base / 2**20:.0f} MiB")
        print(f"{'window':>7} {'in trace':>8} {'RSS above baseline':>19} {'trace':>9}  warnings")
        for window in args.windows:
            found = run(window, budget, Path(tmp) / f"w{window}", steps)
            above = (int(found["peak_rss"]) - base) / 2**20  # type: ignore[call-overload]
            print(f"{window:>7} {found.get('profiled', 0):>8} {above:>15.0f} MiB "
                  f"{int(found.get('trace_bytes', 0)) / 2**10:>6.0f} KiB  {'; '.join(found.get('warnings', []))}")  # type: ignore[call-overload, arg-type]


if __name__ == "__main__":
    main()
