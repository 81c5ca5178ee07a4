"""The Flink keyed window on the relayed two-TaskManager cluster at several round trips: traced once with no delay
added, re-run at each delay, and predicted from the trace by crystalperf's credit loop and by the credits' bound
alone (``window / round trip``, the simpler model the loop replaced). Shows where the round trip's bound and the path's
own time per buffer meet (docs/accuracy.md, "Flink").

    python -m bench.whatif.rtt_sweep --delays 0,2.5,5,10 --rounds 2

``--delays`` are one-way (ms, on what each host receives): a round trip between the two TaskManagers gains twice
each. The rounds are interleaved, every other one in reverse order, as the what-if bench does; the prediction is
scaled by the no-delay runs' median over the traced run's runtime, as the bench scales it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock


def _predict(trace_path: Path, added_rtt_ms: float, capacity_mbit: int, loop: bool) -> float:
    from crystalperf.core.attribution.classify import FixedClassifier
    from crystalperf.core.predict import Predictor
    from crystalperf.core.predict.base import Changes
    from crystalperf.core.predict.streaming import StreamingCpu
    from crystalperf.core.profile.dag import build_profile
    from crystalperf.core.trace import load_trace

    predictor = Predictor(build_profile(load_trace(trace_path), FixedClassifier({}), locators=[]))
    changes = Changes.parse([f"rtt=+{added_rtt_ms:g}ms", f"network={capacity_mbit}mbit:{capacity_mbit}mbit"])
    if loop:
        return predictor.predict(changes, band=False).crystalperf.runtime_s
    # the bound alone: the path's time per buffer unknown
    with mock.patch.object(StreamingCpu, "buffer_service_s", lambda self, delay_s: None):
        return predictor.predict(changes, band=False).crystalperf.runtime_s


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.whatif.rtt_sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--delays", default="0,2.5,5,10", help="one-way delays in ms, comma-separated; 0 is traced")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate-mbit", type=int, default=1000)
    args = parser.parse_args(argv)
    from bench.whatif.flink_cluster import WindowClusterWorkload

    delays = sorted({float(d) for d in args.delays.split(",")} | {0.0})
    workload = WindowClusterWorkload(args.rate_mbit, rtt=True)
    out = Path(tempfile.mkdtemp(prefix="rtt-sweep-"))
    runs: dict[float, list[float]] = {d: [] for d in delays}
    trace: tuple[Path, float] | None = None
    for round_ in range(args.rounds):
        for delay in delays if round_ % 2 == 0 else list(reversed(delays)):
            config: dict[str, Any] = {**workload.baseline, "delay_ms": delay}
            traced = delay == 0.0 and trace is None
            if traced:
                workload.baseline = config  # the workload traces the run whose configuration is its baseline
            run = workload.run(config, out / f"delay-{delay:g}-round-{round_}")
            if traced and run.trace is not None:
                trace = (run.trace, run.runtime_s)
            runs[delay].append(run.runtime_s)
            print(f"round {round_ + 1}: one-way delay {delay:g} ms: {run.runtime_s:.2f} s", flush=True)
    if trace is None:
        raise SystemExit("the no-delay run left no trace")
    scale = statistics.median(runs[0.0]) / trace[1]
    print(f"\ntraced {trace[1]:.2f} s ({trace[0]}); no-delay median {statistics.median(runs[0.0]):.2f} s")
    print("| RTT added | actual (median; runs) | credit loop | bound alone |")
    print("|---|---|---|---|")
    for delay in delays:
        if not delay:
            continue
        actual = statistics.median(runs[delay])
        cells = []
        for loop in (True, False):
            predicted = _predict(trace[0], 2 * delay, args.rate_mbit, loop) * scale
            cells.append(f"{predicted:.2f} s, {abs(predicted - actual) / actual:.1%}")
        shown = ", ".join(f"{r:.2f}" for r in runs[delay])
        print(f"| +{2 * delay:g} ms | {actual:.2f} s ({shown}) | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
