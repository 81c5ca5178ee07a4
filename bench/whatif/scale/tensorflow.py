"""TensorFlow scale cases: the ResNet-style CNN of ``bench.whatif.tensorflow`` trained by Keras ``fit`` on PNG files
read through tf.data, every run traced by the callback; TensorFlow's intra- and inter-op threads are the slots.

- ``threads-up`` / ``threads-down``: 64×64 images from the page cache, 1 -> 2 threads and 2 -> 1;
- ``input-disk``: 144×144 images (about 62 KB each, 2 MB a step) evicted from the page cache before every run and
  read behind a 3 MB/s cgroup read limit, 1 -> 2 threads: the input pipeline waits for the device, the ceiling.

The runtime is the wall time of the 40 profiled steps, as the other TensorFlow what-if cases measure it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.whatif import machine
from bench.whatif.runner import Target
from bench.whatif.tensorflow import CnnWorkload

DISK_BPS = 3_000_000


class ThreadsCase(CnnWorkload):
    """The CNN traced with ``threads`` TF threads and re-run with ``target``."""

    trace_every_run = True
    where = "local"
    expect = ("cores",)

    def __init__(self, name: str, data_dir: Path, *, threads: int, target: int, read_bps: int | None = None,
                 image_size: int = 64, ceiling: str | None = None) -> None:
        super().__init__("resnet", data_dir)
        self.name = name
        self.ceiling = ceiling
        self.target = target
        self.baseline.update(threads=threads)
        if image_size != 64:
            self.baseline["image_size"] = image_size
        if read_bps:
            self.baseline["read_bps"] = read_bps

    def targets(self, quick: bool) -> list[Target]:
        def unavailable() -> str | None:
            if self.python is None:
                return "TensorFlow is not installed (set CRYSTALPERF_TF_PYTHON)"
            return machine.disk_throttle_unavailable(self.data_dir) if self.baseline.get("read_bps") else None

        t, q = self.baseline["threads"], self.target
        limit = f", {self.baseline['read_bps'] / 1e6:g} MB/s device" if self.baseline.get("read_bps") else ""
        return [Target(f"TF threads {t} -> {q}{limit}", "cores-up" if q > t else "cores",
                       {**self.baseline, "threads": q}, [f"cores={q}"], unavailable)]


def cases(data_dir: Path) -> list[Any]:
    return [
        ThreadsCase("input-disk", data_dir, threads=1, target=2, read_bps=DISK_BPS, image_size=144, ceiling="disk"),
        ThreadsCase("threads-up", data_dir, threads=1, target=2),
        ThreadsCase("threads-down", data_dir, threads=2, target=1),
    ]
