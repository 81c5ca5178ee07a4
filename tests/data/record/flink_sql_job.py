"""Record the Flink golden inputs: the reporter's part(s) and the recorded plan of real PyFlink SQL jobs.

    python tests/data/record/flink_sql_job.py local     # -> tests/data/flink-sql-groupby/
    python tests/data/record/flink_sql_job.py cluster   # -> tests/data/flink-cluster-groupby/

``local``: the batch SQL job of tests/integrations/flink (datagen -> SUM(SQRT(v*v+1)) GROUP BY k ->
blackhole) on a local mini cluster, parallelism 2, 20,000 rows (datagen's default 10,000 rows/s: about
two seconds of run time), stack sampling every 100 ms: one part. ``cluster``: the same job on a standalone
cluster (JobManager + 2 TaskManagers, as tests/integrations/flink/test_cluster.py starts it): three parts
of one job, merged by the reader. Needs ``pip install 'crystalperf[flink]'``; the files are copied as the
reporter and ``record_plan`` wrote them.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

STATEMENT = "INSERT INTO snk SELECT k, SUM(SQRT(v * v + 1)) FROM src GROUP BY k"
ROWS = 20000
KEYS = 10


def _run(config: object, out: Path, parallelism: int) -> None:
    from crystalperf.integrations import flink as cpflink
    from tests.integrations.flink.sql_jobs import batch_table_env, create_keyed_tables

    env = batch_table_env(config, parallelism=parallelism)
    create_keyed_tables(env, ROWS, keys=KEYS)
    cpflink.record_plan(env, out, STATEMENT)
    env.execute_sql(STATEMENT).wait()


def _copy(out: Path, target: Path, parts: int, chains: int = 2) -> None:
    import time

    from crystalperf.integrations import flink as cpflink

    # A TaskManager writes a complete part when the source chain ends there, then again once the aggregation
    # chain deployed later on it ended: wait until the parts name both chains.
    deadline = time.monotonic() + 60
    while True:
        found = cpflink.wait_for_metrics(out, parts=parts, timeout_s=60)
        complete = len(found) == parts and len(cpflink.read_metrics(found[0]).operations) >= chains
        if complete or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if not complete:
        raise SystemExit(f"expected {parts} parts naming {chains} chains in {out}, found {len(found)} parts")
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for path in [*found, *out.glob("crystalperf-flink-plan-*.json")]:
        shutil.copy2(path, target / path.name)
        print(f"{target / path.name}: {path.stat().st_size} bytes")


def record_local(target: Path) -> None:
    from pyflink.common import Configuration

    from crystalperf.integrations import flink as cpflink

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        _run(cpflink.configure(Configuration(), out, analyze=False), out, parallelism=2)
        _copy(out, target, parts=1)


def record_cluster(target: Path) -> None:
    import contextlib

    from pyflink.common import Configuration

    from tests.integrations.flink import test_cluster

    # the cluster fixture of the integration test, driven by hand
    fixture = test_cluster.cluster.__wrapped__  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as tmp:

        class Factory:
            def mktemp(self, name: str) -> Path:
                path = Path(tmp) / name
                path.mkdir()
                return path

        started = fixture(Factory())
        rest_port, out = next(started)
        try:
            config = Configuration()
            config.set_string("execution.target", "remote")
            config.set_string("rest.address", "127.0.0.1")
            config.set_string("rest.port", str(rest_port))
            _run(config, out, parallelism=2)
            _copy(out, target, parts=3)
        finally:
            with contextlib.suppress(StopIteration):
                next(started)  # stops the cluster


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "local"
    data = ROOT / "tests" / "data"
    if which == "local":
        record_local(data / "flink-sql-groupby")
    elif which == "cluster":
        record_cluster(data / "flink-cluster-groupby")
    else:
        raise SystemExit("usage: flink_sql_job.py local|cluster")
