"""The benchmark's jobs, per framework, with their ground truth by construction.

Sizes are for a 2-core machine: each job's measured window is about 10 s. Disk-bound jobs read text
files cold through a cgroup read limit; network-bound jobs pull from a data server through a link shaped
to a few MB/s; idle jobs wait on a sleeping or rate-limited input.
"""

from __future__ import annotations

from bench.fidelity.harness import JobSpec
from bench.fidelity.scoring import OperationTruth as Op

DISK_BPS = 8_000_000
LINK_MBIT = 20


def spark_jobs() -> list[JobSpec]:
    stage = ("stage",)
    return [
        JobSpec("spark", "cpu", "cpu", "cpu", {"rows": 1_500_000}, op_kinds=stage),
        JobSpec("spark", "disk", "disk", "disk", data={"spark-disk": 96}, read_bps=DISK_BPS, op_kinds=stage),
        JobSpec("spark", "network", "network", "network", {"chunks": [3_000_000] * 2}, link_mbit=LINK_MBIT,
                op_kinds=stage),
        JobSpec("spark", "idle", "idle", "waiting", {"sleeps": 160}, op_kinds=stage),
        JobSpec("spark", "mixed", "mixed", None, {"rows": 1_000_000}, data={"spark-mixed": 64},
                read_bps=DISK_BPS, op_kinds=stage),
        JobSpec("spark", "pyudf", "pyudf", "cpu", {"rows": 20_000}, op_kinds=stage),
        # Parquet scans with vectored (asynchronous) reads: from the page cache, and cold behind the throttle
        JobSpec("spark", "parquet", "parquet", "cpu", {"rows": 250_000, "resource": "cpu"}, op_kinds=stage),
        JobSpec("spark", "parquet-disk", "parquet", "disk", {"rows": 250_000, "resource": "disk"}, read_bps=DISK_BPS,
                op_kinds=stage),
    ]


def flink_jobs() -> list[JobSpec]:
    return [
        JobSpec("flink", "cpu", "cpu", "cpu", {"rows": 600_000}, operations=[Op(r"gen", "cpu")]),
        JobSpec("flink", "disk", "disk", "disk", data={"flink-disk": 96}, read_bps=DISK_BPS,
                operations=[Op(r"lines", "disk")]),
        JobSpec("flink", "network", "network", "network", {"requests": 8, "bytes": 3_000_000},
                link_mbit=LINK_MBIT, operations=[Op(r"(?i)python|pull", "network")]),
        JobSpec("flink", "idle", "idle", "waiting", {"rows": 300, "rate": 30, "parallelism": 1}, slots=1,
                operations=[Op(r"slow", "waiting")]),
        JobSpec("flink", "mixed", "mixed", None, {"rows": 400_000}, data={"flink-mixed": 56}, read_bps=DISK_BPS,
                operations=[Op(r"gen", "cpu"), Op(r"lines", "disk")]),
        # file sources in batch mode, cold behind the throttle and from the page cache, and in streaming mode warm
        JobSpec("flink", "batch-disk", "disk", "disk", {"batch": True}, data={"flink-disk": 96}, read_bps=DISK_BPS,
                operations=[Op(r"lines", "disk")]),
        JobSpec("flink", "batch-files", "scan", "cpu", {"batch": True}, data={"flink-scan": 160}, warm=True,
                operations=[Op(r"files", "cpu")]),
        JobSpec("flink", "stream-files", "scan", "cpu", {}, data={"flink-scan": 160}, warm=True,
                operations=[Op(r"files", "cpu")]),
    ]


def tensorflow_jobs() -> list[JobSpec]:
    layers = [Op(r"^dense\d+( backward)?$", "cpu")]
    step_parts = ("input", "op")
    return [
        JobSpec("tensorflow", "cpu", "cpu", "cpu", {"batch": 1024, "features": 256, "layers": [1024] * 3,
                "steps": 100}, operations=layers, op_kinds=step_parts),
        JobSpec("tensorflow", "disk", "disk", "disk", {"batch": 4096, "steps": 200}, data={"tf-disk": 96},
                read_bps=DISK_BPS, operations=[Op(r"^input pipeline", "disk")], op_kinds=step_parts),
        JobSpec("tensorflow", "network", "network", "network", {"chunk": 262_144, "steps": 100},
                link_mbit=LINK_MBIT, operations=[Op(r"^input pipeline", "network")], op_kinds=step_parts),
        JobSpec("tensorflow", "idle", "idle", "waiting", {"sleep_s": 0.1, "steps": 80},
                operations=[Op(r"^input pipeline", "waiting")], op_kinds=step_parts),
        JobSpec("tensorflow", "mixed", "mixed", None, {"batch": 1024, "layers": [256, 256], "steps": 100},
                data={"tf-mixed": 16}, read_bps=2_000_000,
                operations=[Op(r"^input pipeline", "disk"), *layers], op_kinds=step_parts),
    ]


ALL = {"spark": spark_jobs, "flink": flink_jobs, "tensorflow": tensorflow_jobs}
