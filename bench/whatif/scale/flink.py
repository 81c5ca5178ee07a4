"""Flink scale cases on PyFlink's local mini cluster (the cluster one is in ``bench.whatif.scale.cluster``), each a
job of ``bench.whatif.flink``'s script with every run traced:

- ``groupby-warm``: batch SQL ``SELECT k, COUNT(*), SUM(v) ... GROUP BY k`` over 8 CSV files (about 800 MB, read
  into the page cache before every run), parallelism 1 -> 2. At parallelism 1 the split fetcher and the task
  threads already keep both cores busy: the cores are the ceiling.
- ``scan-disk``: the same batch GROUP BY over 8 CSV files of about 67 MB in all, evicted from the page cache before
  every run and read behind a 5 MB/s cgroup read limit, parallelism 2 -> 4: the device is the ceiling.
- ``stream-files``: a streaming job with a file source (the filesystem connector's CSV scan and a filter) over the
  warm 800 MB, parallelism 2 -> 1.

The runtime is the job's net runtime as Flink reports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.whatif import machine
from bench.whatif.flink import FlinkSqlWorkload, ensure_csv
from bench.whatif.runner import Run, Target

WARM_BYTES = 800_000_000
COLD_BYTES = 67_000_000
FILES = 8
DISK_BPS = 5_000_000


class FlinkFileCase(FlinkSqlWorkload):
    """A Flink SQL job over CSV files, traced at ``parallelism`` and re-run at ``target``."""

    trace_every_run = True
    where = "local"
    expect = ("parallelism",)

    def __init__(self, name: str, job: str, data_dir: Path, *, parallelism: int, target: int, batch: bool,
                 total_bytes: int, read_bps: int | None = None, ceiling: str | None = None) -> None:
        super().__init__(job, parallelism=parallelism)
        self.name = name
        self.ceiling = ceiling
        self.data_dir = data_dir
        self.total_bytes = total_bytes
        self.target = target
        csv = data_dir / f"flink-csv-{FILES}x{total_bytes // FILES}"
        self.baseline.update(csv=str(csv.resolve()), batch=batch)
        if read_bps:
            self.baseline["read_bps"] = read_bps
        else:
            self.baseline["warm"] = True

    def targets(self, quick: bool) -> list[Target]:
        def unavailable() -> str | None:
            if self.no_flink():
                return self.no_flink()
            return machine.disk_throttle_unavailable(self.data_dir) if self.baseline.get("read_bps") else None

        p, q = self.baseline["parallelism"], self.target
        limit = f", {self.baseline['read_bps'] / 1e6:g} MB/s device" if self.baseline.get("read_bps") else ""
        return [Target(f"parallelism {p} -> {q}{limit}", "parallelism-up" if q > p else "parallelism",
                       {**self.baseline, "parallelism": q}, [f"parallelism={q}"], unavailable)]

    def run(self, config: dict[str, Any], out_dir: Path) -> Run:
        ensure_csv(Path(config["csv"]), FILES, self.total_bytes)
        return super().run(config, out_dir)


def cases(data_dir: Path) -> list[Any]:
    return [
        FlinkFileCase("scan-disk", "csv-groupby", data_dir, parallelism=2, target=4, batch=True,
                      total_bytes=COLD_BYTES, read_bps=DISK_BPS, ceiling="disk"),
        FlinkFileCase("groupby-warm", "csv-groupby", data_dir, parallelism=1, target=2, batch=True,
                      total_bytes=WARM_BYTES, ceiling="cores"),
        FlinkFileCase("stream-files", "csv-scan", data_dir, parallelism=2, target=1, batch=False,
                      total_bytes=WARM_BYTES),
    ]
