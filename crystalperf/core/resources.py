"""The three resources of the paper, the waiting that is none of them, and the vector that splits time
between them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

# What a job can be given more of: the paper's three resources.
RESOURCES: tuple[str, str, str] = ("cpu", "disk", "network")
# Time an operation's threads spent waiting for input, for downstream or for nothing: no resource of the
# operation is in use, so no resource change of the operation shortens it.
WAITING = "waiting"
CATEGORIES: tuple[str, str, str, str] = (*RESOURCES, WAITING)
_INF = math.inf


class ResourceVector(NamedTuple):
    """Fractions of time spent on CPU, disk and network, and waiting; they sum to 1 (paper §4.1, with waiting
    apart so that a parked thread is never counted as a resource)."""

    cpu: float
    disk: float
    network: float
    waiting: float = 0.0

    @classmethod
    def of(cls, cpu: float = 0.0, disk: float = 0.0, network: float = 0.0, waiting: float = 0.0) -> ResourceVector:
        """A normalised vector; all-zero input means 'nothing known' and gives pure CPU."""
        # Negative, NaN and infinite parts count as 0 (a comparison with NaN is false). Spelled out, not a loop:
        # an analysis makes one vector per operation and per Monte Carlo draw of it, tens of thousands.
        cpu = float(cpu) if 0.0 < cpu < _INF else 0.0
        disk = float(disk) if 0.0 < disk < _INF else 0.0
        network = float(network) if 0.0 < network < _INF else 0.0
        waiting = float(waiting) if 0.0 < waiting < _INF else 0.0
        total = sum((cpu, disk, network, waiting))  # sum(): the same rounding as before on every Python version
        if total <= 0:
            return CPU_ONLY
        return cls(cpu / total, disk / total, network / total, waiting / total)

    def dominant(self) -> str:
        return CATEGORIES[max(range(len(CATEGORIES)), key=lambda i: self[i])]

    def dominant_resource(self) -> str:
        """The largest of the three resources, ignoring waiting."""
        return RESOURCES[max(range(len(RESOURCES)), key=lambda i: self[i])]

    def as_dict(self) -> dict[str, float]:
        return {c: self[i] for i, c in enumerate(CATEGORIES)}

    def scaled(self, seconds: float) -> dict[str, float]:
        """Resource-time: this vector times a duration."""
        cpu, disk, network, waiting = self
        return dict(zip(CATEGORIES, (cpu * seconds, disk * seconds, network * seconds, waiting * seconds),
                        strict=True))

    def busy(self) -> ResourceVector:
        """The split of the time that was not waiting (pure CPU when all of it waited)."""
        return ResourceVector.of(self.cpu, self.disk, self.network)


CPU_ONLY = ResourceVector(1.0, 0.0, 0.0, 0.0)
WAITING_ONLY = ResourceVector(0.0, 0.0, 0.0, 1.0)


def weighted_mean(pairs: Iterable[tuple[ResourceVector, float]]) -> ResourceVector | None:
    """Weighted mean of vectors; None when the weights sum to zero."""
    acc = [0.0] * len(CATEGORIES)
    total = 0.0
    for vec, weight in pairs:
        if weight <= 0:
            continue
        total += weight
        for i in range(len(CATEGORIES)):
            acc[i] += vec[i] * weight
    if total <= 0:
        return None
    return ResourceVector.of(*acc)
