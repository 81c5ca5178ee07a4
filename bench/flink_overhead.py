"""Throughput overhead of the crystalperf Flink reporter, without and with 100 ms stack sampling.

Runs the same local SQL job (datagen -> aggregate -> blackhole) with no reporter, the reporter with
sampling off, and the reporter sampling every 100 ms, interleaved round by round; prints per case the
median wall time of the job (its end-to-end latency: a bounded job), the rows/s it implies (throughput)
and the overhead against no reporter, plus the machine's load average before and after.
Run: python bench/flink_overhead.py [rows] [repeats]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time


def run(rows: int, reporter: bool, interval_ms: int) -> float:
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    from crystalperf.integrations import flink as cpflink

    config = Configuration()
    if reporter:
        cpflink.configure(config, tempfile.mkdtemp(), analyze=False)
        config.set_string("metrics.reporter.crystalperf.sample.interval.ms", str(interval_ms))
    config.set_string("parallelism.default", "1")
    env = TableEnvironment.create(
        EnvironmentSettings.new_instance().in_batch_mode().with_configuration(config).build()
    )
    env.execute_sql(
        f"CREATE TABLE src (k INT, v DOUBLE) WITH ('connector'='datagen', 'number-of-rows'='{rows}', "
        # datagen's default 10,000 rows/s would make the job wait for its source, hiding any overhead
        "'rows-per-second'='1000000000', 'fields.k.min'='0', 'fields.k.max'='999')"
    )
    env.execute_sql("CREATE TABLE snk (k INT, s DOUBLE) WITH ('connector'='blackhole')")
    began = time.perf_counter()
    env.execute_sql("INSERT INTO snk SELECT k, SUM(SQRT(v * v + 1)) FROM src GROUP BY k").wait()
    return time.perf_counter() - began


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores")
    run(rows // 10, False, 0)  # warm the JVM
    cases = {
        "no reporter": (False, 0),
        "reporter, no sampling": (True, 0),
        "reporter, 100 ms sampling": (True, 100),
    }
    times = {name: [] for name in cases}
    for _ in range(repeats):
        for name, (reporter, interval) in cases.items():
            times[name].append(run(rows, reporter, interval))
    base = statistics.median(times["no reporter"])
    for name, values in times.items():
        median = statistics.median(values)
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(
            f"{name:28s} median {median:7.2f} s  ({rows / median:,.0f} rows/s, "
            f"latency {100 * (median / base - 1):+.1f} %, throughput {100 * (base / median - 1):+.1f} %)  runs: {runs}"
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
