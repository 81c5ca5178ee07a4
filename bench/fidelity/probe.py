"""Counters a job reads around its measured window, from inside the job process (stdlib only: it runs
in each framework's environment). The window is the job's work, without the framework's start-up and
the job-end analysis, so the measured shares describe what the report's operations describe."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def _read_bytes(blkio: Path, device: str) -> int:
    for line in (blkio / "blkio.throttle.io_service_bytes").read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == device and parts[1] == "Read":
            return int(parts[2])
    return 0


def snapshot(config: dict[str, Any]) -> dict[str, float]:
    groups = config.get("cgroups") or {}
    snap: dict[str, float] = {"time": time.time()}
    if groups:
        snap["cpu_s"] = int(Path(groups["cpuacct"], "cpuacct.usage").read_text()) / 1e9
        snap["read_bytes"] = _read_bytes(Path(groups["blkio"]), groups["device"])
    if config.get("host_if"):
        snap["rx_bytes"] = int(Path(f"/sys/class/net/{config['host_if']}/statistics/rx_bytes").read_text())
    return snap


class Window:
    """``with Window(config): <the job's work>`` prints the counters' deltas as one ``FIDELITY {json}``
    line, which the harness reads."""

    def __init__(self, config: dict[str, Any], **extra: float) -> None:
        self.config = config
        self.extra = extra

    def __enter__(self) -> Window:
        self.start = snapshot(self.config)
        return self

    def __exit__(self, *exc: object) -> None:
        end = snapshot(self.config)
        delta = {"wall_s": end["time"] - self.start["time"], **self.extra}
        for key in ("cpu_s", "read_bytes", "rx_bytes"):
            if key in end:
                delta[key] = end[key] - self.start[key]
        print("FIDELITY " + json.dumps(delta), flush=True)
