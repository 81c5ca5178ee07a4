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

from bench.whatif.interpreters import spark_python
from bench.whatif.runner import Run, Target
from bench.whatif.shared_cluster import SharedCluster, rtt_target

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


def _spark_cluster(net: Any) -> Any:
    from bench.cluster import SparkCluster

    return SparkCluster(net, Path(tempfile.mkdtemp(prefix="whatif-cluster-")), pin=True)


_CLUSTER = SharedCluster(["w0", "w1"], _spark_cluster)
# The round-trip case: links relayed (bench/cluster/taprelay.c: this kernel has no netem), traced with no delay
# added and re-run with shared_cluster.RTT_DELAY_MS on what each host receives, both through the same relays.
_RELAYED = SharedCluster(["w0", "w1"], _spark_cluster, relay=True)


class ShuffleClusterWorkload:
    """The wide-row shuffle join on two namespaced workers; ``traced_mbit`` is the link rate of the traced run."""

    framework = "spark"

    def __init__(self, data_dir: Path, traced_mbit: int, rtt: bool = False,
                 find_python: Callable[[], str | None] = spark_python) -> None:
        self.data_dir = data_dir
        self.find_python = find_python
        self.traced_mbit = traced_mbit
        self.rtt = rtt
        self.name = f"shuffle-cluster-rtt-{traced_mbit}mbit" if rtt else f"shuffle-cluster-{traced_mbit}mbit"
        self.baseline: dict[str, Any] = {"rate_mbit": traced_mbit, "executors": 2, "delay_ms": 0.0}
        self.python = find_python()

    def _unavailable(self) -> str | None:
        from bench.cluster import unavailable

        if self.find_python() is None:
            return "pyspark is not installed (set CRYSTALPERF_SPARK_PYTHON)"
        return unavailable()

    def targets(self, quick: bool) -> list[Target]:
        if self.rtt:
            return [rtt_target(self.baseline, self._unavailable)]

        def rate(mbit: int) -> Target:
            kind = "network-up" if mbit > self.traced_mbit else "network"
            return Target(f"network {self.traced_mbit}->{mbit} Mbit/s", kind, {**self.baseline, "rate_mbit": mbit},
                          [f"network={mbit}mbit"], self._unavailable)

        if self.traced_mbit >= 1000:
            return [rate(200), rate(50), Target("executors 2->1", "executors", {**self.baseline, "executors": 1},
                                                ["executors=1"], self._unavailable)]
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


