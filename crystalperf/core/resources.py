"""The three resources of the paper and the vector type that splits time between them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

RESOURCES: tuple[str, str, str] = ("cpu", "disk", "network")


class ResourceVector(NamedTuple):
    """Fractions of time spent on CPU, disk and network; they sum to 1 (paper §4.1)."""

    cpu: float
    disk: float
    network: float

    @classmethod
    def of(cls, cpu: float = 0.0, disk: float = 0.0, network: float = 0.0) -> ResourceVector:
        """A normalised vector; all-zero input means 'nothing known' and gives pure CPU."""
        values = [max(0.0, float(v)) if math.isfinite(v) else 0.0 for v in (cpu, disk, network)]
        total = sum(values)
        if total <= 0:
            return CPU_ONLY
        return cls(values[0] / total, values[1] / total, values[2] / total)

    def dominant(self) -> str:
        return RESOURCES[max(range(3), key=lambda i: self[i])]

    def as_dict(self) -> dict[str, float]:
        return {"cpu": self.cpu, "disk": self.disk, "network": self.network}

    def scaled(self, seconds: float) -> dict[str, float]:
        """Resource-time: this vector times a duration."""
        return {"cpu": self.cpu * seconds, "disk": self.disk * seconds, "network": self.network * seconds}


CPU_ONLY = ResourceVector(1.0, 0.0, 0.0)


def weighted_mean(pairs: Iterable[tuple[ResourceVector, float]]) -> ResourceVector | None:
    """Weighted mean of vectors; None when the weights sum to zero."""
    acc = [0.0, 0.0, 0.0]
    total = 0.0
    for vec, weight in pairs:
        if weight <= 0:
            continue
        total += weight
        for i in range(3):
            acc[i] += vec[i] * weight
    if total <= 0:
        return None
    return ResourceVector.of(*acc)

