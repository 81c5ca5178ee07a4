"""Which framework a function belongs to, by its qualified name: Spark, Flink or TensorFlow (Keras included).

No training corpus may hold a framework's function (:data:`FORBIDDEN`): the hand-labelled framework functions
score the classifiers, so the measured and module-rule corpora leave them out, and a measured validation row can
say nothing about how a classifier does on them.
"""

from __future__ import annotations

import re

FORBIDDEN = re.compile(r"(^|[.:/])(pyspark|spark|flink|pyflink|tensorflow|keras|tf_keras)([._/]|$)", re.I)
FRAMEWORKS = ("spark", "flink", "tensorflow")
_SPARK = re.compile(r"(^|\.)(py)?spark(\.|$)")
_FLINK = re.compile(r"(^|\.)(py)?flink(\.|$)")


def framework_of(name: str) -> str | None:
    """spark | flink | tensorflow for a qualified name no training corpus may contain, else None."""
    if not FORBIDDEN.search(name):
        return None
    lowered = name.lower()
    if _SPARK.search(lowered):
        return "spark"
    if _FLINK.search(lowered):
        return "flink"
    return "tensorflow"
