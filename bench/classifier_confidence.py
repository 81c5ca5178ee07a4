"""How much the sparse classifier's confidence says: on the measured corpus's validation libraries (where the
confidence curve was fitted), its held-out test libraries and the hand-labelled framework set, the share of
functions under ``LOW_CONFIDENCE`` and how often the 4-class arg-max is right under it and above it, with the
confidence against the accuracy in bins (docs/models.md, "How sure the classifier is").

Nothing is fitted here: the curve is the one in the weights' ``config.json``. Numpy only.

Usage: python bench/classifier_confidence.py --measured data/measured [--weights DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from crystalperf.models import framework_eval as fe
from crystalperf.models.evaluate import to_function
from crystalperf.models.measured import measured_splits
from crystalperf.models.sparse import LABELS4, LOW_CONFIDENCE, SparseClassifier

BINS = (0.0, 0.5, LOW_CONFIDENCE, 0.8, 0.9, 1.0 + 1e-9)


def report(name: str, classifier: SparseClassifier, functions: list, labels: list[str]) -> None:
    probs = classifier.predict_proba4(functions)
    confidence = classifier.confidence_from_proba(probs)
    right = probs.argmax(axis=1) == np.asarray([LABELS4.index(label) for label in labels])
    low = confidence < LOW_CONFIDENCE
    print(f"{name}: {len(right)} functions, accuracy {right.mean():.3f}, mean confidence {confidence.mean():.3f}; "
          f"low confidence {low.mean():.3f} of them, right {right[low].mean():.3f} of those and "
          f"{right[~low].mean():.3f} of the rest")
    for lo, hi in zip(BINS, BINS[1:], strict=False):
        chosen = (confidence >= lo) & (confidence < hi)
        if chosen.any():
            print(f"  confidence [{lo:.2f}, {min(hi, 1.0):.2f}): {int(chosen.sum()):5d} functions, "
                  f"mean confidence {confidence[chosen].mean():.3f}, accuracy {right[chosen].mean():.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measured", required=True, type=Path)
    parser.add_argument("--weights", type=Path, help="sparse weights directory (default: the shipped ones)")
    args = parser.parse_args()
    classifier = SparseClassifier(args.weights)
    _, val, test = measured_splits(args.measured)
    print(f"weights {classifier.version}, confidence fit {classifier.confidence_fit}, low below {LOW_CONFIDENCE:.3f}")
    for name, rows in (("validation", val), ("test", test)):
        report(name, classifier, [to_function(r) for r in rows], [r["label"] for r in rows])
    framework = fe.load_set()
    report("framework set", classifier, [f.source() for f in framework], [f.label for f in framework])


if __name__ == "__main__":
    main()
