"""Retrain the sparse classifier on a (re-)measured corpus and score it next to the shipped weights and the
keyword baseline: on the corpus's held-out libraries, on the Debian libraries of the LibStore and LibNet2 drivers
(``NEW``; never seen by the weights it is compared with), and on the hand-labelled framework set (docs/models.md, "What we tried and
why it lost"). Variants: all training libraries; without the new libraries; plus the low-evidence rows at half
weight. Needs torch (the ``models`` extra).

Usage: python bench/classifier_remeasured.py --measured /work/data/measured --out OUT
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from crystalperf.core.attribution.classify import KeywordClassifier
from crystalperf.models import framework_eval as fe
from crystalperf.models.evaluate import _padded4, keyword_proba, measured_scores, to_function
from crystalperf.models.measure.python import MIN_SHARE
from crystalperf.models.measured import read_measured, split_by_library
from crystalperf.models.sparse import FourClassView, SparseClassifier, default_weights_dir
from crystalperf.models.sparse_train import train_sparse_classifier

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--measured", type=Path, required=True, help="directory of measured *.jsonl files")
parser.add_argument("--out", type=Path, required=True, help="where the weights and report.json go")
args = parser.parse_args()
measured, out = args.measured, args.out
NEW = {"libleveldb-java", "libleveldb-api-java", "libsqljet-java", "libantlr3-runtime-java", "liblz4-java",
       "libcommons-dbcp2-java", "libcommons-pool2-java", "libmina2-java", "libslf4j-java", "libjeromq-java",
       "libcommons-net-java", "libjakarta-mail-java", "libjakarta-activation-java", "libhttpasyncclient-java"}
rows = read_measured(measured)
split_by_library(rows, seed=0)
print("rows", len(rows), Counter(r["label"] for r in rows))
print("by split", {s: dict(Counter(r["label"] for r in rows if r["split"] == s)) for s in ("train", "val", "test")})
train = [r for r in rows if r["split"] == "train"]
val = [r for r in rows if r["split"] == "val"]
test = [r for r in rows if r["split"] == "test"]
variants = {}
variants["retrained"] = out / "retrained"
train_sparse_classifier(train, val, variants["retrained"], weight_decay=1e-4, seed=0)
# without the newly measured libraries (NEW): what the re-measurement alone changes, and a fair score on them
nonew_train = [r for r in train if r["library"] not in NEW]
nonew_val = [r for r in val if r["library"] not in NEW]
variants["retrained-without-new-libs"] = out / "nonew"
train_sparse_classifier(nonew_train, nonew_val, variants["retrained-without-new-libs"], weight_decay=1e-4, seed=0)
# Thin rows: the dominant share >= MIN_SHARE but under the evidence floor (< 10 ms or < 5 events), at half weight,
# from the training libraries only.
train_libs = {r["library"] for r in train}
thin = []
for f in sorted(measured.glob("*.jsonl")):
    for line in f.open():
        r = json.loads(line)
        if r.get("label") is not None or r["library"] not in train_libs:
            continue
        sh = r.get("shares") or {}
        if not sh:
            continue
        top = max(sh, key=sh.get)
        if sh[top] >= MIN_SHARE and r.get("events", 0) >= 1:
            thin.append({**r, "label": top, "weight": 0.5, "split": "train"})
print("thin rows", Counter(r["label"] for r in thin))
variants["plus-thin"] = out / "thin"
train_sparse_classifier(train + thin, val, variants["plus-thin"], weight_decay=1e-4, seed=0)
weights = {"shipped": default_weights_dir(), **variants}
newlib_rows = [r for r in rows if r["library"] in NEW]
def probs(w, recs):
    return SparseClassifier(w).predict_proba4([to_function(r) for r in recs])
report = {}
for name, recs in (("test", test), ("new-libraries", newlib_rows)):
    report[name] = {"n": len(recs), "labels": dict(Counter(r["label"] for r in recs))}
    for w, d in weights.items():
        if name == "new-libraries" and w in ("retrained", "plus-thin"):
            continue  # trained on some of them
        s = measured_scores(probs(d, recs), recs)
        report[name][w] = {k: s[k] for k in ("4-class", "3-class")}
    s = measured_scores(_padded4(keyword_proba([to_function(r) for r in recs])), recs)
    report[name]["keyword"] = {k: s[k] for k in ("4-class", "3-class")}
functions = fe.load_set()
report["frameworks"] = {}
for w, d in weights.items():
    ev = fe.evaluate(FourClassView(SparseClassifier(d)), functions, w)
    report["frameworks"][w] = {g: (round(sc.accuracy, 3), round(sc.macro_f1, 3)) for g, sc in ev.four.items()}
ev = fe.evaluate(KeywordClassifier(), functions, "keyword")
report["frameworks"]["keyword"] = {g: (round(sc.accuracy, 3), round(sc.macro_f1, 3)) for g, sc in ev.four.items()}
(out / "report.json").write_text(json.dumps(report, indent=1, default=str))
for name in ("test", "new-libraries"):
    print(f"== {name}: n={report[name]['n']} {report[name]['labels']}")
    for w, s in report[name].items():
        if isinstance(s, dict) and "4-class" in s:
            f4, f3 = s["4-class"], s["3-class"]
            print(f"  {w:28s} 4cl acc {f4['accuracy']:.3f} mF1 {f4['macro_f1']:.3f} | 3cl acc {f3['accuracy']:.3f} mF1 {f3['macro_f1']:.3f} | F1 {json.dumps({c: round(v['f1'], 3) for c, v in f4['per_class'].items()})}")
print("== frameworks (4-class acc, macro-F1)")
for w, s in report["frameworks"].items():
    print(f"  {w:28s} {s}")
