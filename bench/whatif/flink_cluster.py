"""Network and scale-out what-ifs for Flink on a real multi-host cluster (bench.cluster): a JobManager in this
namespace and two TaskManagers of one slot each, each in a network namespace of its own on a tc-shaped link,
running a keyed tumbling-window aggregation over a bounded stream of wide rows (about 1.5 kB each: the bytes cost
the links more than the rows cost the CPU). At parallelism 2 every source subtask sends about half its rows to
the window subtask on the other TaskManager, across both links.

Three workloads: traced on 1 Gbit/s links and predicted on 200 and 50 Mbit/s; traced on 50 Mbit/s and predicted
on 200 Mbit/s and 1 Gbit/s; traced at parallelism 1 (one TaskManager does everything, nothing crosses a link) and
predicted at parallelism 2. One cluster serves every run, its links re-shaped in place. The runtime is the job's
net runtime as Flink reports it, what the trace calls the job's latency (as in ``bench.whatif.flink``).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.whatif.interpreters import flink_python
from bench.whatif.runner import Run, Target
from bench.whatif.shared_cluster import SharedCluster, rtt_target

JOB = textwrap.dedent('''
    import json, sys
    config = json.loads(sys.argv[1])
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment
    conf = Configuration()
    for key, value in config["conf"].items():
        conf.set_string(key, value)
    settings = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build()
    env = TableEnvironment.create(settings)
    # datagen's default of 10,000 rows/s would make every run last rows/10,000 s whatever its resources
    env.execute_sql(f"""CREATE TABLE events (
        id BIGINT, ts AS TO_TIMESTAMP_LTZ(id, 3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
    ) WITH ('connector' = 'datagen', 'fields.id.kind' = 'sequence', 'fields.id.start' = '1',
            'fields.id.end' = '{config["rows"]}', 'rows-per-second' = '1000000000')""")
    # the payload is built before the exchange (the window needs it), so every row crosses it at full width
    env.execute_sql(f"""CREATE TEMPORARY VIEW wide AS SELECT CAST(MOD(id * 7919, {config["keys"]}) AS INT) AS k, ts,
        CONCAT(CAST(id AS STRING), REPEAT('x', {config["width"]})) AS payload FROM events""")
    env.execute_sql("CREATE TABLE sink (k INT, window_start TIMESTAMP(3), n BIGINT, top STRING) "
                    "WITH ('connector' = 'blackhole')")
    query = """INSERT INTO sink
        SELECT k, window_start, COUNT(*), MAX(payload)
        FROM TABLE(TUMBLE(TABLE wide, DESCRIPTOR(ts), INTERVAL '60' SECOND))
        GROUP BY k, window_start, window_end"""
    if config.get("out"):
        from crystalperf.integrations import flink as cpflink
        cpflink.record_plan(env, config["out"], query)
    result = env.execute_sql(query)
    result.wait()
    client = result.get_job_client()
    runtime = client.get_job_execution_result().result().get_net_runtime() / 1000
    print("RESULT", json.dumps({"runtime_s": runtime, "job_id": str(client.get_job_id())}))
''')

ROWS = 300_000
WIDTH = 4000  # bytes of payload a row: about 1.2 GB generated, half of it crossing the links at parallelism 2
KEYS = 200
# A TaskManager rewrites its part when it releases the job's metrics, seconds after the job ended.
PARTS_TIMEOUT_S = 90.0


# The TaskManagers outlive the jobs: the first jobs on them run on cold JVMs (class loading, JIT). With one
# warm-up job the first workload's runs took 5.9 s at 1 Gbit/s and the last ones 3.9 s (the first job 11.8 s),
# so untraced jobs warm them before any run is measured.
WARM_UP_JOBS = 4


def _flink_cluster(net: Any) -> Any:
    from bench.cluster import FlinkCluster

    workdir = Path(tempfile.mkdtemp(prefix="whatif-flink-cluster-"))
    # the reporter runs in every run (it is cluster-wide): traced and re-run jobs pay the same for it; each
    # TaskManager on a CPU of its own, as on machines of their own
    return FlinkCluster(net, workdir, out=workdir / "reports", pin=True)


_CLUSTER = SharedCluster(["t0", "t1"], _flink_cluster)
# The round-trip cases: links relayed (bench/cluster/taprelay.c: this kernel has no netem), traced with no delay
# added and re-run with bench.whatif.shared_cluster.RTT_DELAY_MS on what each host receives, through the same relays.
_RELAYED = SharedCluster(["t0", "t1"], _flink_cluster, relay=True)


def collect_trace(reports: Path, job_id: str, taskmanagers: int, out: Path) -> Path:
    """The job's trace from the parts its processes wrote to ``reports`` (the JobManager's and those of the
    ``taskmanagers`` that ran its subtasks), saved as ``out``: waits until every TaskManager's part holds
    the job's final values."""
    from crystalperf.core.trace import METRIC_CPU_TIME, save_trace
    from crystalperf.integrations import flink as cpflink

    deadline = time.monotonic() + PARTS_TIMEOUT_S
    while True:
        parts = cpflink.wait_for_metrics(reports, job_id, parts=1 + taskmanagers, timeout_s=PARTS_TIMEOUT_S)
        trace = cpflink.read_metrics(parts[0]) if parts else None
        # every chain's subtasks with their final CPU time: the TaskManagers' last rewrites are in
        complete = trace is not None and len(parts) >= 1 + taskmanagers and all(
            op.tasks and all(t.metrics.get(METRIC_CPU_TIME) is not None for t in op.tasks) for op in trace.operations)
        if complete or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    if trace is None:
        raise RuntimeError(f"no reporter part of job {job_id} in {reports}")
    save_trace(trace, out)
    return out


class WindowClusterWorkload:
    """The wide-row keyed window on two namespaced TaskManagers. ``traced_mbit``: the link rate of the traced
    run; ``parallelism``: its parallelism (1: the scale-out case, predicted at 2)."""

    framework = "flink"

    def __init__(self, traced_mbit: int, parallelism: int = 2, rtt: bool = False,
                 find_python: Callable[[], str | None] = flink_python) -> None:
        self.traced_mbit = traced_mbit
        self.find_python = find_python
        self.name = f"window-cluster-{traced_mbit}mbit" if parallelism == 2 else f"window-cluster-p{parallelism}"
        if rtt:
            self.name = f"window-cluster-rtt-{traced_mbit}mbit"
        self.rtt = rtt
        self.baseline: dict[str, Any] = {"rate_mbit": traced_mbit, "parallelism": parallelism, "delay_ms": 0.0}
        self.python = find_python()

    def _unavailable(self) -> str | None:
        from bench.cluster import unavailable

        if self.find_python() is None:
            return "PyFlink is not installed (set CRYSTALPERF_FLINK_PYTHON)"
        return unavailable()

    def targets(self, quick: bool) -> list[Target]:
        if self.rtt:
            return [rtt_target(self.baseline, self._unavailable)]
        if self.baseline["parallelism"] == 1:
            return [Target("parallelism 1->2", "parallelism-up", {**self.baseline, "parallelism": 2},
                           ["parallelism=2"], self._unavailable)]

        def rate(mbit: int) -> Target:
            kind = "network-up" if mbit > self.traced_mbit else "network"
            return Target(f"network {self.traced_mbit}->{mbit} Mbit/s", kind, {**self.baseline, "rate_mbit": mbit},
                          [f"network={mbit}mbit"], self._unavailable)

        return [rate(200), rate(50)] if self.traced_mbit >= 1000 else [rate(200), rate(1000)]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        assert self.python is not None
        out_dir.mkdir(parents=True, exist_ok=True)
        traced = config is self.baseline
        shared = _RELAYED if self.rtt else _CLUSTER
        cluster = shared.get(config["rate_mbit"], config["delay_ms"])
        conf = {**cluster.client_config(), "parallelism.default": str(config["parallelism"]),
                # one phase: a local pre-aggregation before the exchange would keep the payloads off the links
                "table.optimizer.agg-phase-strategy": "ONE_PHASE",
                "pipeline.name": f"whatif-{self.name}"}
        job = {"conf": conf, "rows": ROWS, "width": WIDTH, "keys": KEYS,
               "out": str(cluster.out) if traced else None}
        if shared.fresh:
            for _ in range(WARM_UP_JOBS):
                self._submit({**job, "out": None}, cluster)
            shared.fresh = False
        started = time.perf_counter()
        result = self._submit(job, cluster)
        wall = time.perf_counter() - started
        trace = None
        if traced:
            trace = collect_trace(cluster.out, result["job_id"], config["parallelism"],
                                  out_dir / "crystalperf-trace.json.gz")
        return Run(float(result["runtime_s"]), trace, wall)

    def _submit(self, job: dict[str, Any], cluster: Any) -> dict[str, Any]:
        """Runs the job from a client process here; its RESULT line (the job's net runtime and id)."""
        assert self.python is not None
        done = subprocess.run([self.python, "-c", JOB, json.dumps(job)], capture_output=True, text=True,
                              timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} failed: {done.stderr[-2000:]}\n{cluster.logs()}")
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
        result: dict[str, Any] = json.loads(line.split(" ", 1)[1])
        return result
