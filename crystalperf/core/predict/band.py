"""The band around every prediction: a seeded Monte Carlo over the uncertain inputs (task durations resampled,
resource vectors drawn around the measured ones, the first-wave warm-up factor), the draws' quantiles."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from crystalperf.core.resources import ResourceVector

MONTE_CARLO_RUNS = 16
# Replayed tasks (plus operations) up to which every band gets MONTE_CARLO_RUNS draws; beyond, fewer, within
# MONTE_CARLO_BUDGET replayed tasks per band, each draw redrawing at most MONTE_CARLO_OPERATIONS operations.
MONTE_CARLO_FULL_WORK = 5000
MONTE_CARLO_BUDGET = 40_000
MONTE_CARLO_OPERATIONS = 2000
MONTE_CARLO_MIN_RUNS = 2
# Task durations of Monte Carlo draws kept for the next scenario's same draw (about 32 bytes each).
MONTE_CARLO_KEPT_DURATIONS = 2_000_000
BAND_QUANTILES = (0.1, 0.9)
# A rerun of the same job on the same machine takes another time (the JIT, the collector, the page cache, the
# machine's other work), which no trace shows: the band spans that too. The spread is the standard deviation of a rerun's
# log-runtime on the 2-core VM of docs/accuracy.md: the scale bench's reruns (52 non-median runs of 26 triples)
# were a median 2.6 % and at the 75th percentile 5.7 % from their triple's median.
RERUN_SPREAD = 0.04
# A bandwidth the trace does not give may have been this much lower / higher than the assumed figure.
ASSUMED_BANDWIDTH_RANGE = (0.1, 4.0)


@dataclass
class Draw:
    """One Monte Carlo draw of the uncertain inputs (None: use the measured values)."""

    rng: random.Random | None = None
    warmup: float | None = None
    key: float | None = None  # the seed of rng: draws with the same seed draw the same
    # On a job of many operations a draw redraws this share of them (the same ones for draw ``number`` of
    # every scenario); the others keep their point estimate.
    share: float = 1.0
    number: int = 0

    @classmethod
    def seeded(cls, seed: float, warmup: float | None, share: float = 1.0, number: int = 0) -> Draw:
        return cls(random.Random(seed), warmup, seed, share, number)

    def redraws_all(self, count: int) -> bytearray:
        """Which of the operations of index 0 .. count - 1 this draw redraws (1: redrawn), a fixed pseudo-random
        choice: index i is when (i * 0x9E3779B1 + number * 0x85EBCA6B) % 4096 < share * 4096. Computed at once, a
        mask per draw over 20,000 operations: only the low 12 bits of the sum decide, and unsigned 64-bit
        arithmetic wraps without changing them."""
        if self.share >= 1.0:
            return bytearray(b"\x01" * count)
        index = np.arange(count, dtype=np.uint64)
        mixed = index * np.uint64(0x9E3779B1) + np.uint64(self.number * 0x85EBCA6B % 2**64)
        return bytearray(((mixed % np.uint64(4096)) < self.share * 4096).astype(np.uint8).tobytes())


def quantile(values: Sequence[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, round(q * 100) - 1))]


def perturb(vec: ResourceVector, samples: int, source: str, rng: random.Random) -> ResourceVector:
    """A Dirichlet draw around the vector: confident with many samples, loose for guesses."""
    if source == "samples":
        concentration = 10.0 + min(samples, 400)
    elif source in ("metrics", "children"):
        concentration = 60.0
    else:
        concentration = 6.0
    # A category the operation never showed (most often waiting) is not invented by the draw.
    draws = [rng.gammavariate(concentration * v + 0.05, 1.0) if v > 0 or i < 3 else 0.0 for i, v in enumerate(vec)]
    return ResourceVector.of(*draws)


def with_rerun(point: float, low: float, high: float) -> tuple[float, float]:
    """The band (low, high) around ``point`` widened by a rerun's spread (RERUN_SPREAD at the band's quantiles): the
    model's error and a rerun's are independent, so their log-widths add in quadrature on each side."""
    if point <= 0 or low <= 0:
        return low, high
    rerun = statistics.NormalDist().inv_cdf(BAND_QUANTILES[1]) * RERUN_SPREAD
    down = math.hypot(math.log(point / low), rerun) if low < point else rerun
    up = math.hypot(math.log(high / point), rerun) if high > point else rerun
    return point * math.exp(-down), point * math.exp(up)
