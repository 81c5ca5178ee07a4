"""How sure the classifier is of the functions a report shows: its confidence in each one's class, where it gives
one (:class:`~crystalperf.core.attribution.classify.ConfidentClassifier`), so that a class it is unsure of reads
as a guess rather than as a verdict."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

from crystalperf.core.attribution.classify import ConfidentClassifier, ResourceClassifier
from crystalperf.core.attribution.vectors import FunctionStat
from crystalperf.core.resources import ResourceVector

log = logging.getLogger(__name__)

# How far apart two vectors of the same classification may be: one read back from a trace's embedded resolution
# is renormalised after its JSON round trip.
SAME_VECTOR = 1e-9


def _same(a: ResourceVector, b: ResourceVector) -> bool:
    return all(math.isclose(x, y, rel_tol=0.0, abs_tol=SAME_VECTOR) for x, y in zip(a, b, strict=True))


def attach_confidence(stats: Iterable[FunctionStat], classifier: ResourceClassifier) -> None:
    """Set ``confidence`` of each function, asking the classifier once per function.

    A function gets the classifier's confidence only where the vector the analysis gave it is the one this
    classifier gives it: not one a locator declared (a compute kernel, a blocking system call), the keyword
    classifier's after this one failed, nor another classifier's that the trace embeds from its job-end analysis.
    Call it with the functions the report shows: a classifier without a cache computes each confidence anew."""
    if not isinstance(classifier, ConfidentClassifier):
        return
    stats = list(stats)
    functions = list({s.function.key: s.function for s in stats}.values())
    if not functions:
        return
    try:
        rated = [(f, c) for f, c in zip(functions, classifier.confidences(functions), strict=True) if c is not None]
        vectors = classifier.classify([f for f, _ in rated]) if rated else []
        # per key, the confidence and the vector it is a confidence in
        known = {f.key: (c, v) for (f, c), v in zip(rated, vectors, strict=True)}
    except Exception as exc:  # noqa: BLE001 - a plug-in's failure costs the report its confidences, nothing more
        log.warning("classifier %s gave no confidences (%s)", classifier.version, exc)
        return
    for stat in stats:
        found = known.get(stat.function.key)
        given = stat.classified if stat.classified is not None else stat.vector
        if found is not None and _same(found[1], given):
            stat.confidence = found[0]
