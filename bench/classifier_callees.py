"""Does what a method calls help classify it? A stacked experiment on the measured corpus's JVM or Python rows
(docs/models.md, "What we tried and why it lost").

Measured labels are inclusive: a method is disk-bound when the methods it calls are. The sparse model sees
only the method's own text. Here each method's calls (``Owner.member();`` in its bytecode rendering) are
resolved to the measured corpus's methods of that simple class name and member (all rows, labelled or not:
every method seen on a recorded stack), and a second stage, a logistic regression, reads the sparse model's
log-probabilities together with the maximum and mean of its callees' (up to ``--hops`` calls deep), and the
number of callees. Stage-one predictions on training rows are out-of-fold (5 folds by library), so the
second stage learns from predictions like those it will see. Scored against stage one alone and against a
logistic regression over stage one's log-probabilities only (the same recalibration, no callees), each second stage also with balanced class
weights (the first stage trains balanced; an unweighted second stage trades macro-F1 for accuracy).

``--language python`` resolves a Python function's calls by name within its own library (the profiler
records every Python function a suite ran, so callees are in the corpus far more often than the JVM's
sampled ones): ``self.m(`` / ``cls.m(`` to ``m`` of the same class, else of any class of the library (an
abstract base's ``discard`` is its subclasses'); a bare ``f(`` to the library's module-level ``f`` or to
class ``f``'s ``__init__``; ``obj.m(`` to the library's ``m`` where at most ``AMBIGUOUS`` functions bear
that name. Needs torch and scikit-learn (both in the ``models`` extra's dependencies).

Usage: python bench/classifier_callees.py --measured DIR --out OUT [--hops 2] [--language jvm|python]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression

from crystalperf.models.evaluate import to_function
from crystalperf.models.measured import measured_files, measured_lines, read_measured, split_by_library
from crystalperf.models.sparse import LABELS4
from crystalperf.models.sparse_train import macro_f1, train_sparse_classifier

CALL = re.compile(r"^\s+(?:value = )?([A-Za-z_$][\w$]*)\.([A-Za-z_$][\w$<>]*)\(\);", re.MULTILINE)
FOLDS = 5
PY_CALL = re.compile(r"(?:\b([A-Za-z_]\w*)\s*\.\s*)?\b([A-Za-z_]\w*)\s*\(")
AMBIGUOUS = 5


def _simple(qualified_name: str) -> tuple[str, str]:
    owner, member = qualified_name.rsplit(".", 1)
    return owner.rsplit(".", 1)[-1].replace("$", "_"), member


def call_graph(directory: Path) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """Every JVM method in the files (labelled or not) by qualified name, and the methods each one calls."""
    methods: dict[str, dict[str, Any]] = {}
    bytecode: dict[str, str] = {}
    for path in measured_files(directory):
        for line in measured_lines(path):
            row = json.loads(line)
            if row.get("language") not in ("java", "scala"):
                continue
            if row.get("origin") == "bytecode":
                bytecode.setdefault(row["qualified_name"], row["code"])
            if not row["id"].endswith("#bytecode"):
                methods.setdefault(row["qualified_name"], row)
    by_simple: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name in methods:
        by_simple[_simple(name)].append(name)
    callees: dict[str, list[str]] = {}
    for name in methods:
        own = _simple(name)[0]
        found = {c for owner, member in CALL.findall(bytecode.get(name, ""))
                 for c in by_simple.get((own if owner == "this" else owner, member), ()) if c != name}
        callees[name] = sorted(found)
    return methods, callees


def _py_parts(qualified_name: str) -> tuple[str | None, str]:
    """(class or None, member) of ``pkg.mod.Class.method`` / ``pkg.mod.function``: a class is capitalised."""
    parts = qualified_name.split(".")
    owner = parts[-2] if len(parts) >= 2 and parts[-2][:1].isupper() else None
    return owner, parts[-1]


def python_call_graph(directory: Path) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """Every Python function in the files (labelled or not) by qualified name, and the functions each calls."""
    functions: dict[str, dict[str, Any]] = {}
    for path in measured_files(directory):
        for line in measured_lines(path):
            row = json.loads(line)
            if row.get("language") == "python" and isinstance(row.get("code"), str):
                functions.setdefault(row["qualified_name"], row)
    by_member: dict[tuple[str, str], list[str]] = defaultdict(list)
    by_class_member: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    module_level: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, row in functions.items():
        owner, member = _py_parts(name)
        by_member[(row["library"], member)].append(name)
        if owner is None:
            module_level[(row["library"], member)].append(name)
        else:
            by_class_member[(row["library"], owner, member)].append(name)
    callees: dict[str, list[str]] = {}
    for name, row in functions.items():
        library, (own_class, _member) = row["library"], _py_parts(name)
        found: set[str] = set()
        for receiver, member in PY_CALL.findall(row["code"]):
            if receiver in ("self", "cls") or (receiver == "" and member == "super"):
                found.update(by_class_member.get((library, own_class or "", member), ())
                             or by_member.get((library, member), ()))
            elif receiver == "":
                found.update(module_level.get((library, member), ())
                             or by_class_member.get((library, member, "__init__"), ()))
            else:
                candidates = by_member.get((library, member), ())
                if len(candidates) <= AMBIGUOUS:
                    found.update(candidates)
        found.discard(name)
        callees[name] = sorted(found)
    return functions, callees


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measured", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--hops", type=int, default=2)
    parser.add_argument("--language", choices=("jvm", "python"), default="jvm")
    args = parser.parse_args()
    languages = ("java", "scala") if args.language == "jvm" else ("python",)
    methods, callees = (call_graph if args.language == "jvm" else python_call_graph)(args.measured)
    rows = [r for r in read_measured(args.measured) if r["language"] in languages]
    split_by_library(rows, seed=0)
    train, val, test = ([r for r in rows if r["split"] == s] for s in ("train", "val", "test"))
    print(f"{len(methods)} {args.language} functions, {sum(1 for v in callees.values() if v)} with resolved callees; "
          f"labelled train/val/test {len(train)}/{len(val)}/{len(test)}")
    full = train_sparse_classifier(train, val, args.out / "full", weight_decay=1e-4, seed=0)
    names = list(methods)
    stage_one = dict(zip(names, full.predict_proba4([to_function(methods[n]) for n in names]), strict=True))
    libraries = sorted({r["library"] for r in train})
    fold_of = {lib: i % FOLDS for i, lib in enumerate(np.random.default_rng(0).permutation(libraries))}
    fold_models = []
    for k in range(FOLDS):
        model = train_sparse_classifier([r for r in train if fold_of[r["library"]] != k], val,
                                        args.out / f"fold{k}", weight_decay=1e-4, seed=0)
        fold_models.append(model)
        held = [n for n in names if fold_of.get(methods[n]["library"]) == k]
        stage_one.update(zip(held, model.predict_proba4([to_function(methods[n]) for n in held]), strict=True))

    def context(name: str) -> np.ndarray:
        seen: set[str] = set()
        frontier = [name]
        for _ in range(args.hops):
            frontier = [c for f in frontier for c in callees.get(f, ()) if c not in seen and c != name]
            seen.update(frontier)
        if not seen:
            return np.zeros(2 * len(LABELS4) + 1)
        probs = np.array([stage_one[c] for c in seen])
        return np.concatenate([probs.max(0), probs.mean(0), [np.log1p(len(seen))]])

    def features(part: list[dict[str, Any]], out_of_fold: bool) -> np.ndarray:
        own = []
        for r in part:
            if out_of_fold:  # each row (a #bytecode twin too) by the fold model that never saw its library
                own.append(fold_models[fold_of[r["library"]]].predict_proba4([to_function(r)])[0])
            else:
                own.append(full.predict_proba4([to_function(r)])[0])
        return np.array([np.concatenate([np.log(np.clip(p, 1e-6, 1)), context(r["qualified_name"])])
                         for r, p in zip(part, own, strict=True)])

    x_train, x_val, x_test = features(train, True), features(val, False), features(test, False)
    y_train, y_val, y_test = (np.array([LABELS4.index(r["label"]) for r in part]) for part in (train, val, test))
    own_pred = np.exp(x_test[:, :4]).argmax(1)
    print("| model | val macro-F1 | test acc / macro-F1 |")
    print("|---|---|---|")
    print(f"| sparse (stage one) | {macro_f1(y_val, np.exp(x_val[:, :4]).argmax(1)):.3f} | "
          f"{np.mean(own_pred == y_test):.3f} / {macro_f1(y_test, own_pred):.3f} |")
    for columns, name in ((slice(0, 4), "stage two, own log-probs only"),
                          (slice(None), f"stage two, + callees ({args.hops} hops)")):
        for balance in (None, "balanced"):
            for c in (0.1, 1.0, 10.0):
                lr = LogisticRegression(C=c, max_iter=2000, class_weight=balance).fit(x_train[:, columns], y_train)
                pred = lr.predict(x_test[:, columns])
                print(f"| {name}, C={c}{', balanced' if balance else ''} | "
                      f"{macro_f1(y_val, lr.predict(x_val[:, columns])):.3f} | "
                      f"{np.mean(pred == y_test):.3f} / {macro_f1(y_test, pred):.3f} |")
    print(f"test rows with resolved callees: {sum(1 for r in test if callees.get(r['qualified_name']))} of {len(test)}")


if __name__ == "__main__":
    main()
