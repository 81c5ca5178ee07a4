"""What crystalperf's threads cost a PyFlink program while it runs no Python function (a SQL job's program waiting
for its job): the program configures the hook (``crystalperf.integrations.flink.configure``), creates a batch
``TableEnvironment`` (which starts the loopback Python worker sampler and its I/O counters) and sleeps; the hook's
own CPU time by part over that time, in milliseconds per second.

    .nox/flink/bin/python bench/pyflink_idle_cost.py --seconds 20

Nothing is asserted: the figures go to docs/overhead.md."""

from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    from crystalperf.core.record import budget as hook_budget
    from crystalperf.integrations.flink import configure

    config = configure(Configuration(), output_dir=tempfile.mkdtemp(prefix="pyflink-idle-"))
    TableEnvironment.create(EnvironmentSettings.new_instance().in_batch_mode().with_configuration(config).build())
    before, started = hook_budget.PROCESS.parts(), time.monotonic()
    time.sleep(args.seconds)
    after, elapsed = hook_budget.PROCESS.parts(), time.monotonic() - started
    for part in sorted(after):
        print(f"{part}: {1000 * (after[part] - before.get(part, 0.0)) / elapsed:.2f} ms per second")


if __name__ == "__main__":
    main()
