"""Network and scale-out what-ifs on a real multi-host Spark cluster (bench.cluster): two standalone workers, each
in a network namespace of its own on a tc-shaped link, running a shuffle join whose rows are few and wide (the
bytes cost the link more than the rows cost the CPU). One run is traced at one link rate (or worker count) and
predicted at the others; every target is re-run for real on the same cluster, the links re-shaped in place.
Each worker and its executor run on a CPU of their own (``SparkCluster(pin=True)``), as on hosts of their own:
unpinned, two executors on this machine's two CPUs wait for each other's threads, and one executor runs faster
than two for that reason alone.

Two directions: traced on 1 Gbit/s and predicted on 200 and 50 Mbit/s (and on one executor), and traced on
50 Mbit/s and predicted on 200 Mbit/s and 1 Gbit/s. The runtime is the application's, from the SparkContext's
start to the end of the action, as the trace defines it.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.whatif.runner import Run, Target

JOB = textwrap.dedent('''
    import json, sys, time
    config = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.appName("whatif-shuffle-cluster")
    for key, value in config["conf"].items():
        builder = builder.config(key, value)
    if config.get("out"):
        from crystalperf.integrations.spark import configure
        builder = configure(builder, output_dir=config["out"]).config("spark.crystalperf.analysis", "false")
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    deadline = time.time() + 120
    while sc._jsc.sc().getExecutorMemoryStatus().size() < config["executors"] + 1 and time.time() < deadline:
        time.sleep(0.2)
    def side(name):
        return spark.range(0, config["rows"], numPartitions=4).selectExpr(
            "id AS k", *[f"lpad(cast(id * {s} AS string), {config['width']}, 'x') AS p{s}" for s in (3, 5, 7)]
        ).alias(name)
    total = " + ".join(f"length({t}.p{s})" for t in "ab" for s in (3, 5, 7))
    rows = side("a").join(side("b"), "k").selectExpr(f"sum({total})").collect()
    end = time.time()
    print("RESULT", json.dumps({"runtime_s": end - sc.startTime / 1000, "rows": rows[0][0]}))
    spark.stop()
''')

ROWS = 60_000
WIDTH = 1600  # 3 such columns a row: about 290 MB crosses the links, half each way
# Executors are per application, but the first application on a fresh cluster also pays for the workers' own
# first executor launch and for reading Spark's jars from disk: the RTT case's traced runs, first on a fresh
# cluster, took 36.6 s against 30-35 s for the same job later. One untraced application goes first.
WARM_UP_APPLICATIONS = 1


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


def _spark_cluster(net: Any) -> Any:
    from bench.cluster import SparkCluster

    return SparkCluster(net, Path(tempfile.mkdtemp(prefix="whatif-cluster-")), pin=True)


_CLUSTER = SharedCluster(["w0", "w1"], _spark_cluster)
# The round-trip case: links relayed (bench/cluster/taprelay.c: this kernel has no netem), traced with no delay
# added and re-run with RTT_DELAY_MS on what each host receives, both through the same relays.
_RELAYED = SharedCluster(["w0", "w1"], _spark_cluster, relay=True)
RTT_DELAY_MS = 5.0  # a round trip between two workers crosses both links: +10 ms; to the driver, one: +5 ms


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


def _unavailable() -> str | None:
    from bench.cluster import unavailable
    from bench.whatif.spark import spark_python

    if spark_python() is None:
        return "pyspark is not installed (set CRYSTALPERF_SPARK_PYTHON)"
    return unavailable()


class ShuffleClusterWorkload:
    """The wide-row shuffle join on two namespaced workers; ``traced_mbit`` is the link rate of the traced run."""

    framework = "spark"

    def __init__(self, data_dir: Path, traced_mbit: int, rtt: bool = False) -> None:
        self.data_dir = data_dir
        self.traced_mbit = traced_mbit
        self.rtt = rtt
        self.name = f"shuffle-cluster-rtt-{traced_mbit}mbit" if rtt else f"shuffle-cluster-{traced_mbit}mbit"
        self.baseline: dict[str, Any] = {"rate_mbit": traced_mbit, "executors": 2, "delay_ms": 0.0}
        from bench.whatif.spark import spark_python

        self.python = spark_python()

    def targets(self, quick: bool) -> list[Target]:
        if self.rtt:
            return [rtt_target(self.baseline, _unavailable)]

        def rate(mbit: int) -> Target:
            kind = "network-up" if mbit > self.traced_mbit else "network"
            return Target(f"network {self.traced_mbit}->{mbit} Mbit/s", kind, {**self.baseline, "rate_mbit": mbit},
                          [f"network={mbit}mbit"], _unavailable)

        if self.traced_mbit >= 1000:
            return [rate(200), rate(50), Target("executors 2->1", "executors", {**self.baseline, "executors": 1},
                                                ["executors=1"], _unavailable)]
        return [rate(200), rate(1000)]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        out_dir.mkdir(parents=True, exist_ok=True)
        traced = config is self.baseline
        shared = _RELAYED if self.rtt else _CLUSTER
        cluster = shared.get(config["rate_mbit"], config["delay_ms"])
        conf = {**cluster.driver_conf(), "spark.ui.enabled": "false", "spark.executor.memory": "512m",
                "spark.cores.max": str(config["executors"]), "spark.sql.shuffle.partitions": "4",
                "spark.sql.autoBroadcastJoinThreshold": "-1", "spark.sql.adaptive.enabled": "false",
                "spark.shuffle.compress": "false"}
        job = {"conf": conf, "executors": config["executors"], "rows": ROWS, "width": WIDTH,
               "out": str(out_dir) if traced else None}
        if shared.fresh:
            for _ in range(WARM_UP_APPLICATIONS):
                self._submit({**job, "out": None}, cluster)
            shared.fresh = False
        runtime = self._submit(job, cluster)
        trace = out_dir / "crystalperf-trace.json.gz"
        return Run(runtime, trace if traced and trace.exists() else None, runtime)

    def _submit(self, job: dict[str, Any], cluster: Any) -> float:
        """Runs one application from a driver process here; its runtime."""
        assert self.python is not None
        done = subprocess.run([self.python, "-c", JOB, json.dumps(job)], env=cluster.driver_env(),
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} failed: {done.stderr[-2000:]}")
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        return float(json.loads(line.split(" ", 1)[1])["runtime_s"])


