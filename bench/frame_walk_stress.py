"""Walks every thread's Python stack as fast as it can while a PyFlink loopback DataStream job runs, and counts
the jobs in which the walk read garbage (a frame's attribute that is not what it must be) or the process
crashed. Two walks side by side: ``python`` follows ``f_back`` with the garbage collector running (the walk
``current_stacks`` replaced), ``capture`` is ``crystalperf.core.record.sampling.current_stacks`` (the collector
paused).

    python bench/frame_walk_stress.py --jobs 5          # in an environment with apache-flink (nox -s flink)

Each job runs in its own process (a crash must not end the benchmark). Prints one line per job and a summary;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

JOB = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[2])
from crystalperf.core.record.sampling import current_stacks, stack_frames

MODE = sys.argv[1]
stop = threading.Event()
walks = [0]
garbage = []

def walk_python():
    me = threading.get_ident()
    while not stop.is_set():
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            depth = 0
            while frame is not None and depth < 256:
                code, names = frame.f_code, frame.f_globals
                if type(code).__name__ != "code" or not isinstance(names, dict):
                    garbage.append(f"{type(code).__name__}/{type(names).__name__}")
                    return
                frame = frame.f_back
                depth += 1
        walks[0] += 1
        time.sleep(0.0002)

def walk_capture():
    while not stop.is_set():
        for stack in current_stacks(256).values():
            for code, names in stack_frames(stack):
                if type(code).__name__ != "code" or not isinstance(names, dict):
                    garbage.append(f"{type(code).__name__}/{type(names).__name__}")
                    return
        walks[0] += 1
        time.sleep(0.0002)

def steps(i):
    for k in range(3):
        yield (k * 31 + i) % 7

def work(i):
    return sum(steps(i)) + sorted(range(50), key=lambda x: -x)[0]

walker = threading.Thread(target=walk_python if MODE == "python" else walk_capture, daemon=True)
walker.start()
from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
config = Configuration()
config.set_string("parallelism.default", "1")
config.set_string("python.executable", sys.executable)
env = StreamExecutionEnvironment.get_execution_environment(config)
numbers = env.from_source(NumberSequenceSource(1, 200000), WatermarkStrategy.no_watermarks(), "numbers")
numbers.map(work, output_type=Types.LONG()).filter(lambda n: n < 0).print()
env.execute("frame-walk-stress")
stop.set()
print("RESULT", walks[0], garbage[0] if garbage else "-", flush=True)
"""


def run_job(mode: str, timeout_s: float) -> tuple[str, int, str]:
    root = str(Path(__file__).resolve().parent.parent)
    try:
        done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", JOB, mode, root],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout", 0, ""
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        return f"crashed (exit {done.returncode})", 0, ""
    _, walks, garbage = lines[-1].split(" ", 2)
    return ("garbage" if garbage != "-" else "clean"), int(walks), garbage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5, help="jobs per walk")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    broken = {"python": 0, "capture": 0}
    for n in range(args.jobs):
        for mode in broken:
            outcome, walks, garbage = run_job(mode, args.timeout)
            broken[mode] += outcome != "clean"
            print(f"job {n + 1} {mode:8s} {outcome:20s} walks {walks:7d} {garbage}", flush=True)
    for mode, count in broken.items():
        print(f"{mode}: {count} of {args.jobs} jobs broken")


if __name__ == "__main__":
    main()
