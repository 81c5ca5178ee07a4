"""What the PySpark driver's call recorder (``crystalperf.integrations.spark.pydriver``) costs a py4j call.

``configure()`` wraps py4j's ``GatewayClient.send_command`` in the driver: two clock reads per call, a line written
for calls of 5 ms or more. This times short calls into the JVM (``JavaSparkContext.appName()``, which start no job
and are not written) with and without the wrapper, the two interleaved round after round in one local session.

``.nox/spark/bin/python bench/pydriver_cost.py [--rounds 6] [--calls 5000]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import timeit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=5000)
    args = parser.parse_args()

    from py4j.java_gateway import GatewayClient
    from pyspark.sql import SparkSession

    from crystalperf.integrations.spark import pydriver

    plain = GatewayClient.send_command
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    jsc = spark.sparkContext._jsc

    def per_call_us() -> float:
        started = time.perf_counter()
        for _ in range(args.calls):
            jsc.appName()
        return (time.perf_counter() - started) / args.calls * 1e6

    per_call_us()  # the JVM compiles py4j's paths first
    spool = tempfile.mkdtemp(prefix="crystalperf-bench-")
    timings: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(args.rounds):
        GatewayClient.send_command = plain
        timings["without"].append(per_call_us())
        pydriver.install(spool)
        timings["with"].append(per_call_us())
    GatewayClient.send_command = plain
    spark.stop()
    for mode, values in timings.items():
        print(f"{mode:8} the recorder: {statistics.median(values):7.2f} us a py4j call (median of {args.rounds} "
              f"rounds of {args.calls}; range {min(values):.2f}-{max(values):.2f})")
    # The JVM's side varies more than the wrapper costs: its own time, around a call that does nothing.
    GatewayClient.send_command = lambda self, *a, **k: None  # type: ignore[method-assign]
    client = object.__new__(GatewayClient)
    bare = min(timeit.repeat(lambda: client.send_command("c"), number=100_000, repeat=5)) / 100_000 * 1e6
    pydriver.install(spool)
    wrapped = min(timeit.repeat(lambda: client.send_command("c"), number=100_000, repeat=5)) / 100_000 * 1e6
    GatewayClient.send_command = plain
    print(f"the wrapper alone: {wrapped - bare:.2f} us a call ({bare:.2f} -> {wrapped:.2f} us around a call that does "
          "nothing; best of 5 rounds of 100,000)")


if __name__ == "__main__":
    main()
