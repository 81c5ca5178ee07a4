"""Memory of a Python sampler's table vs the number of distinct stacks it sees (tracemalloc).

Drives the real ``PythonStackSampler`` table the way its sampling loop does (frames interned per code
location, a stack per distinct call path, one row per key, bucket and stack) with N distinct stacks of
``--depth`` frames, each frame name ``--name-chars`` long, over ``--tasks`` task keys and one-second buckets,
once with the byte budget and once unbounded, and prints the heap the table holds, its own estimate, and
how many samples lost their detail (``dropped``) while the total stays exact.

    python bench/sampler_memory.py                      # 1k .. 1M distinct stacks, 16 MiB budget
    python bench/sampler_memory.py --max 20000 --budget 4  # a quick run
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

from crystalperf.core import trace as tr
from crystalperf.core.record.sampletable import SampleTable


def fill(stacks: int, *, depth: int, name_chars: int, tasks: int, budget: int | None) -> tuple[int, SampleTable]:
    """Heap bytes the table holds after ``stacks`` distinct stacks were each sampled once."""
    pad = "x" * max(0, name_chars - 24)
    keys = [tr.SampleKey(operation=f"stage-{t % 8}", task=str(t), thread="python-worker") for t in range(tasks)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    table = SampleTable(0.0, 1.0, 0.1, max_bytes=budget)
    for n in range(stacks):
        # frames shared between stacks as in a real program: a common entry, a varying middle, a distinct top
        frames = [table.frame_id(f"module_{n}.function_{pad}", f"/src/module_{n}.py", 1)]
        frames += [table.frame_id(f"lib_{(n + d) % 997}.call_{pad}", f"/src/lib_{(n + d) % 997}.py", d)
                   for d in range(1, depth - 1)]
        frames.append(table.frame_id("main.entry", "/src/main.py", 1))
        table.add(keys[n % tasks], table.stack_id(frames, "runnable"), n * 0.01)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--min", type=int, default=1000, help="fewest distinct stacks")
    parser.add_argument("--max", type=int, default=1_000_000, help="most distinct stacks")
    parser.add_argument("--budget", type=float, default=16, help="the table's byte budget in MiB")
    parser.add_argument("--depth", type=int, default=32)
    parser.add_argument("--name-chars", type=int, default=80)
    parser.add_argument("--tasks", type=int, default=1000, help="distinct task keys the samples go to")
    parser.add_argument("--unbounded-max", type=int, default=10_000,
                        help="largest run without a budget (its memory grows without bound)")
    args = parser.parse_args()
    budget = int(args.budget * 1024 * 1024)
    print(f"budget {args.budget:g} MiB, depth {args.depth}, names of {args.name_chars} chars, {args.tasks} tasks")
    print(f"{'stacks':>9} {'bounded MiB':>12} {'estimate MiB':>13} {'kept stacks':>12} {'dropped':>9} "
          f"{'total':>9} {'unbounded MiB':>14} {'s':>6}")
    n = args.min
    while n <= args.max:
        started = time.perf_counter()
        held, table = fill(n, depth=args.depth, name_chars=args.name_chars, tasks=args.tasks, budget=budget)
        samples = table.to_samples()
        assert samples.total == n, "a sample was lost"
        unbounded = "-"
        if n <= args.unbounded_max:
            free, _ = fill(n, depth=args.depth, name_chars=args.name_chars, tasks=args.tasks, budget=None)
            unbounded = f"{free / 2**20:.1f}"
        print(f"{n:>9} {held / 2**20:>12.1f} {table.bytes / 2**20:>13.1f} {len(samples.stacks):>12} "
              f"{samples.dropped:>9} {samples.total:>9} {unbounded:>14} {time.perf_counter() - started:>6.1f}")
        n *= 10


if __name__ == "__main__":
    main()
