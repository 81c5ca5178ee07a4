"""Shipped weights against retrained ones on functions neither has seen: the held-out test split's rows whose
every measuring workload is new (not run for the shipped weights' corpus), by the 4-class scores, with the
keyword baseline (docs/models.md, "Held-out measured libraries").

Usage: python bench/classifier_unseen.py --measured data/measured --old WEIGHTS --new WEIGHTS \
           --old-workloads NAME [NAME ...]   (workload names as in the rows' "workloads": "LibNet", "pypi:sh", ...)
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from crystalperf.models.evaluate import _padded4, keyword_proba, measured_scores, to_function
from crystalperf.models.measured import measured_splits
from crystalperf.models.sparse import SparseClassifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measured", type=Path, required=True)
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--old-workloads", nargs="+", required=True,
                        help="workloads (or a driver's or suite kind's prefix, e.g. 'stdlib:') of the old corpus")
    args = parser.parse_args()
    _train, _val, test = measured_splits(args.measured)

    def old(workload: str) -> bool:
        return any(workload == w or workload.startswith(w + ":") or (w.endswith(":") and workload.startswith(w))
                   for w in args.old_workloads)

    unseen = [r for r in test if r.get("workloads") and not any(old(w) for w in r["workloads"])]
    print(f"{len(unseen)} of {len(test)} test rows measured only by new workloads: "
          f"{dict(Counter(r['label'] for r in unseen))}")
    functions = [to_function(r) for r in unseen]
    for name, probs in (("old", SparseClassifier(args.old).predict_proba4(functions)),
                        ("new", SparseClassifier(args.new).predict_proba4(functions)),
                        ("keyword", _padded4(keyword_proba(functions)))):
        s = measured_scores(probs, unseen)["4-class"]
        f1 = " / ".join(f"{v['f1']:.3f}" for v in s["per_class"].values())
        print(f"| {name} | {s['accuracy']:.3f} / {s['macro_f1']:.3f} | {f1} |")


if __name__ == "__main__":
    main()
