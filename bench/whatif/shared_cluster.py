"""What the cluster workloads of both frameworks share (``bench.whatif.cluster`` for Spark,
``bench.whatif.flink_cluster`` for Flink): one cluster kept for every run of a benchmark, and the round-trip case
on relayed links."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.whatif.runner import Target

RTT_DELAY_MS = 5.0  # a round trip between two workers crosses both links: +10 ms; to the driver, one: +5 ms


class SharedCluster:
    """One cluster for every run of a benchmark's workloads (starting one costs a minute): a network of
    ``hosts`` and what ``start(network)`` starts on it, made on the first ``get`` and re-shaped by each; closed at
    interpreter exit by the harness."""

    def __init__(self, hosts: list[str], start: Callable[[Any], Any], relay: bool = False) -> None:
        self.hosts, self.start, self.relay = hosts, start, relay
        self.started: tuple[Any, Any] | None = None
        self.fresh = True  # nothing measured on it yet (a benchmark may warm it up first)

    def get(self, rate_mbit: float, delay_ms: float = 0.0) -> Any:
        """The cluster, its links re-shaped to ``rate_mbit`` and (relayed links) a one-way ``delay_ms`` on what each
        host receives: between two hosts a round trip crosses two links, ``2 * delay_ms`` more."""
        from bench.cluster import Link, Network

        if delay_ms and not self.relay:
            raise ValueError("a delay needs the cluster's links relayed (relay=True)")
        if self.started is None:
            net = Network(self.hosts, link=Link(rate_mbit=rate_mbit, delay_ms=delay_ms), relay=self.relay)
            net.start()
            cluster = self.start(net)
            cluster.start()
            self.started = (net, cluster)
        net, cluster = self.started
        net.set_rate(rate_mbit)
        if self.relay:
            net.set_delay(delay_ms)
        return cluster

    def close(self) -> None:
        """Stop the cluster and remove its network (the next ``get`` starts a fresh one)."""
        if self.started is not None:
            net, cluster = self.started
            self.started = None
            self.fresh = True
            try:
                cluster.stop()
            finally:
                net.close()


def rtt_target(baseline: dict[str, Any], framework_unavailable: Callable[[], str | None]) -> Target:
    """The round-trip case of a relayed cluster workload: re-run with ``RTT_DELAY_MS`` on every link, predicted
    with the round trip between two hosts that gives."""
    from bench.cluster import relay_available

    added = f"{2 * RTT_DELAY_MS:g}"
    # the links' capacity, as their owner knows it (the trace holds only the rate the job reached): where a
    # receiver's credits queue behind its own records, the wait is that queue drained at the capacity
    capacity = f"{baseline['rate_mbit']}mbit"
    return Target(f"RTT +{added} ms", "network-rtt", {**baseline, "delay_ms": RTT_DELAY_MS},
                  [f"rtt=+{added}ms", f"network={capacity}:{capacity}"],
                  lambda: framework_unavailable() or relay_available())
