"""How near the classifiers' vectors are to what functions measured: the mean total-variation distance between
each function's <cpu, disk, network> vector and its measured busy shares, on the kept corpus's validation and
held-out test libraries (labelled or not, above the measurement's floors), for every candidate share temperature
of the sparse classifier and for the keyword baseline (docs/models.md, "Vectors are shares, not probabilities").

Usage: python bench/classifier_shares.py [--measured data/measured] [--weights DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.models.evaluate import to_function
from crystalperf.models.measured import measured_splits, share_rows
from crystalperf.models.sparse import SHARE_TEMPERATURES, SparseClassifier, share_error, sharpen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measured", type=Path, default=Path("data/measured"))
    parser.add_argument("--weights", type=Path, default=None, help="sparse weights (default: the shipped ones)")
    args = parser.parse_args()
    _train, val, test = measured_splits(args.measured)
    classifier = SparseClassifier(args.weights)
    print(f"{classifier.version}, share temperature {classifier.share_temperature:g}")
    sets = {name: share_rows(args.measured, {r["library"] for r in rows}) for name, rows in (("val", val),
                                                                                                ("test", test))}
    probs, shares, keyword = {}, {}, {}
    for name, rows in sets.items():
        functions = [to_function(r) for r in rows]
        probs[name] = classifier.predict_proba(functions).astype(np.float64)
        shares[name] = np.asarray([r["busy_shares"] for r in rows])
        keyword[name] = np.asarray([list(v)[:3] for v in KeywordClassifier().classify(functions)])
        print(f"{name}: {len(rows)} functions, mean measured shares cpu/disk/network "
              + " / ".join(f"{v:.3f}" for v in shares[name].mean(0)))
    print("\n| vectors | " + " | ".join(f"{n} distance | {n} mean cpu/disk/network" for n in sets) + " |")
    print("|---|" + "---:|---|" * len(sets))
    for temperature in SHARE_TEMPERATURES:
        mark = " (shipped)" if temperature == classifier.share_temperature else ""
        cells = []
        for name in sets:
            vectors = sharpen(probs[name], temperature)
            cells.append(f"{share_error(vectors, shares[name]):.3f} | "
                         + " / ".join(f"{v:.3f}" for v in vectors.mean(0)))
        print(f"| sparse, temperature {temperature:g}{mark} | " + " | ".join(cells) + " |")
    print("| keyword | " + " | ".join(f"{share_error(keyword[n], shares[n]):.3f} | "
                                      + " / ".join(f"{v:.3f}" for v in keyword[n].mean(0)) for n in sets) + " |")


if __name__ == "__main__":
    main()
