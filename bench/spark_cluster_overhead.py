"""Traced against untraced runs of the Spark cluster what-if job (``bench.whatif.cluster``: the wide-row shuffle
join on two namespaced workers, links relayed at 1 Gbit/s), alternating on one cluster, so that the runs of the
traced configuration can be told from crystalperf's own cost. Prints one line per pair; nothing is asserted.

    python bench/spark_cluster_overhead.py --pairs 3      # as root, with pyspark (the spark nox session's python)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    from bench.whatif.cluster import ShuffleClusterWorkload

    workload = ShuffleClusterWorkload(Path(tempfile.mkdtemp()), 1000, rtt=True)
    out = Path(tempfile.mkdtemp(prefix="spark-cluster-overhead-"))
    traced, plain = [], []
    for i in range(args.pairs):
        # the baseline dict itself is the traced run; a copy of it runs the same job untraced
        traced.append(workload.run(workload.baseline, out / f"traced{i}").runtime_s)
        plain.append(workload.run(dict(workload.baseline), out / f"untraced{i}").runtime_s)
        print(f"pair {i}: traced {traced[-1]:.2f} s, untraced {plain[-1]:.2f} s", flush=True)
    print(f"median: traced {statistics.median(traced):.2f} s, untraced {statistics.median(plain):.2f} s")


if __name__ == "__main__":
    main()
