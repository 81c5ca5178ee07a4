"""The hand-labelled framework evaluation (paper Table 4): Spark, Flink and TensorFlow functions seen on real
stacks, each labelled by hand with the resource its time goes to and a one-line reason.

The set (``evaldata/frameworks.jsonl``, built as ``evaldata/README.md`` says) is for evaluation only: every id
names a framework the training corpus can never contain (``corpus.FORBIDDEN``). Scores:

- 4-class accuracy and macro-F1 over cpu/disk/network/waiting: a classifier's class is the arg-max of its
  vector; a function labelled *waiting* is right only where the classifier gives waiting the top probability
  (the keyword baseline never does);
- 3-class accuracy and macro-F1 on the functions labelled cpu/disk/network, with the arg-max over those three;
- both per framework, per class (precision, recall, F1) and as a confusion matrix;
- "as analysed": what ``crystalperf analyze`` makes of each function: plumbing frames
  (``crystalperf.core.attribution.waiting``) are waiting, compute kernels keep the vector their locator declares, the rest
  is the classifier's.

    python -m crystalperf.models.framework_eval [--classifier NAME ...] [--data FILE] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crystalperf.core.attribution.classify import FunctionSource, ResourceClassifier, load_classifier
from crystalperf.core.attribution.waiting import is_plumbing
from crystalperf.core.resources import ResourceVector

if TYPE_CHECKING:
    import numpy as np

EVALDATA = Path(__file__).resolve().parent / "evaldata" / "frameworks.jsonl"
FRAMEWORKS = ("spark", "flink", "tensorflow")
CLASSES = ("cpu", "disk", "network", "waiting")
RESOURCE_CLASSES = CLASSES[:3]
ORIGINS = ("source", "bytecode", "op-doc", "op-kernel", "frame-name")
LANGUAGES = ("java", "scala", "python", "cpp", "unknown")
REQUIRED = ("id", "framework", "qualified_name", "language", "origin", "code", "doc", "label", "reason",
            "source_trace")
BATCH = 256


class EvalSetError(ValueError):
    """The evaluation file is not what this module expects; the message names the file and line."""


@dataclass(frozen=True)
class EvalFunction:
    """One hand-labelled framework function and the text the classifiers read for it."""

    id: str
    framework: str
    qualified_name: str
    language: str
    origin: str
    code: str
    doc: str
    label: str
    reason: str
    source_trace: str
    declared_vector: str | None = None  # a compute kernel's vector, fixed by its locator (never classified)

    def source(self) -> FunctionSource:
        return FunctionSource(qualified_name=self.qualified_name, language=self.language, code=self.code,
                              doc=self.doc, origin=self.origin)


def _check(row: Any, where: str) -> EvalFunction:
    if not isinstance(row, dict):
        raise EvalSetError(f"{where}: not a JSON object")
    missing = [k for k in REQUIRED if not isinstance(row.get(k), str)]
    if missing:
        raise EvalSetError(f"{where}: missing or non-string field(s) {', '.join(missing)}")
    checks = (("framework", FRAMEWORKS), ("label", CLASSES), ("origin", ORIGINS), ("language", LANGUAGES))
    for key, allowed in checks:
        if row[key] not in allowed:
            raise EvalSetError(f"{where}: {key} {row[key]!r} is not one of {', '.join(allowed)}")
    if not row["reason"].strip():
        raise EvalSetError(f"{where}: empty reason")
    if not row["id"].startswith(row["framework"] + ":"):
        raise EvalSetError(f"{where}: id {row['id']!r} does not start with its framework")
    declared = row.get("declared_vector")
    if declared is not None and not isinstance(declared, str):
        raise EvalSetError(f"{where}: declared_vector must be a string like '1,0,0'")
    return EvalFunction(**{k: row[k] for k in REQUIRED}, declared_vector=declared)


def load_set(path: Path = EVALDATA) -> list[EvalFunction]:
    """The evaluation set, checked: every field present and valid, ids unique. Raises :class:`EvalSetError`."""
    functions: list[EvalFunction] = []
    seen: set[str] = set()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalSetError(f"{path}: cannot read: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise EvalSetError(f"{where}: not JSON ({exc})") from None
        function = _check(row, where)
        if function.id in seen:
            raise EvalSetError(f"{where}: duplicate id {function.id}")
        seen.add(function.id)
        functions.append(function)
    if not functions:
        raise EvalSetError(f"{path}: no functions")
    return functions


def set_sha256(functions: Sequence[EvalFunction]) -> str:
    """The first 16 hex digits of the SHA-256 of what a classifier reads and is scored on, per function."""
    rows = [[f.id, f.language, f.code, f.doc, f.label] for f in functions]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]


def predicted_class(vector: ResourceVector) -> str:
    """The 4-class prediction: the arg-max of the vector, waiting included (ties go to the earlier class)."""
    return vector.dominant()


def predicted_resource(vector: ResourceVector) -> str:
    """The 3-class prediction: the arg-max over cpu, disk and network."""
    return vector.dominant_resource()


def plumbing_label(function: EvalFunction) -> str | None:
    """What ``crystalperf.core.attribution.waiting`` makes of the function's frame alone: waiting for plumbing, else None."""
    return "waiting" if is_plumbing(function.qualified_name) else None


def seam_classes(functions: Sequence[EvalFunction], scores4: np.ndarray) -> np.ndarray:
    """Index into :data:`CLASSES` of what the core's seam makes of each function from a model's [n, 4] class scores
    (probabilities or any scores ordered as CLASSES): waiting for plumbing frames, else the arg-max over cpu, disk
    and network, since the seam's vector never says waiting."""
    import numpy as np

    plumbing = np.asarray([plumbing_label(f) == "waiting" for f in functions], dtype=bool)
    return np.where(plumbing, CLASSES.index("waiting"), np.asarray(scores4)[:, :3].argmax(1))


def as_analysed(function: EvalFunction, vector: ResourceVector) -> ResourceVector:
    """The function's vector as the analysis uses it: plumbing is waiting, a compute kernel keeps its
    declared vector, anything else the classifier's."""
    if plumbing_label(function) == "waiting":
        return ResourceVector(0.0, 0.0, 0.0, 1.0)
    if function.declared_vector:
        try:
            cpu, disk, network = (float(x) for x in function.declared_vector.split(","))
            return ResourceVector.of(cpu, disk, network)
        except ValueError:
            pass
    return vector


@dataclass
class Scores:
    """Accuracy, macro-F1, per-class figures and the confusion matrix of one set of predictions."""

    n: int
    accuracy: float
    macro_f1: float
    per_class: dict[str, dict[str, float]]
    confusion: dict[str, dict[str, int]]

    @property
    def balanced_accuracy(self) -> float:
        """The mean recall over the labels the functions have: the accuracy the same classifier would score on a set
        with as many functions of each label, which a set drawn from real stacks (mostly cpu) is not."""
        recalls = [c["recall"] for c in self.per_class.values() if c["support"]]
        return sum(recalls) / len(recalls) if recalls else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "accuracy": self.accuracy, "macro_f1": self.macro_f1,
                "balanced_accuracy": self.balanced_accuracy, "per_class": self.per_class,
                "confusion": self.confusion}


def score(truth: Sequence[str], predicted: Sequence[str], classes: Sequence[str] = CLASSES) -> Scores:
    """Accuracy and macro-F1 over ``classes``; a class with no true and no predicted member is left out of
    the macro average (it says nothing), one with members but no hit counts as F1 0."""
    if len(truth) != len(predicted):
        raise ValueError("truth and predictions differ in length")
    confusion = {c: dict.fromkeys(classes, 0) for c in classes}
    for t, p in zip(truth, predicted, strict=True):
        confusion.setdefault(t, dict.fromkeys(classes, 0))
        confusion[t][p] = confusion[t].get(p, 0) + 1
    per_class: dict[str, dict[str, float]] = {}
    for c in classes:
        hits = confusion[c].get(c, 0)
        support = sum(confusion[c].values())
        chosen = sum(row.get(c, 0) for row in confusion.values())
        precision = hits / chosen if chosen else 0.0
        recall = hits / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[c] = {"precision": precision, "recall": recall, "f1": f1, "support": float(support)}
    present = [c for c in classes if per_class[c]["support"] or any(row.get(c, 0) for row in confusion.values())]
    n = len(truth)
    correct = sum(1 for t, p in zip(truth, predicted, strict=True) if t == p)
    return Scores(
        n=n,
        accuracy=correct / n if n else 0.0,
        macro_f1=sum(per_class[c]["f1"] for c in present) / len(present) if present else 0.0,
        per_class=per_class,
        confusion=confusion,
    )


@dataclass
class Evaluation:
    """One classifier on the set: 4-class and 3-class scores, overall and per framework, classifier alone and
    as analysed."""

    classifier: str
    four: dict[str, Scores] = field(default_factory=dict)  # "all" and each framework
    three: dict[str, Scores] = field(default_factory=dict)
    analysed_four: dict[str, Scores] = field(default_factory=dict)
    predictions: dict[str, str] = field(default_factory=dict)  # id -> 4-class prediction

    def as_dict(self) -> dict[str, Any]:
        return {"classifier": self.classifier,
                "four_class": {k: v.as_dict() for k, v in self.four.items()},
                "three_class": {k: v.as_dict() for k, v in self.three.items()},
                "as_analysed_four_class": {k: v.as_dict() for k, v in self.analysed_four.items()}}


def classify_all(classifier: ResourceClassifier, functions: Sequence[EvalFunction]) -> list[ResourceVector]:
    vectors: list[ResourceVector] = []
    for start in range(0, len(functions), BATCH):
        vectors.extend(classifier.classify([f.source() for f in functions[start:start + BATCH]]))
    return vectors


def evaluate(classifier: ResourceClassifier, functions: Sequence[EvalFunction], name: str | None = None) -> Evaluation:
    """Score one classifier on the set."""
    vectors = classify_all(classifier, functions)
    result = Evaluation(classifier=name or classifier.version)
    groups: dict[str, list[int]] = {"all": list(range(len(functions)))}
    for fw in FRAMEWORKS:
        groups[fw] = [i for i, f in enumerate(functions) if f.framework == fw]
    four = [predicted_class(v) for v in vectors]
    three = [predicted_resource(v) for v in vectors]
    analysed = [predicted_class(as_analysed(f, v)) for f, v in zip(functions, vectors, strict=True)]
    result.predictions = {f.id: p for f, p in zip(functions, four, strict=True)}
    for group, members in groups.items():
        if not members:
            continue
        truth = [functions[i].label for i in members]
        result.four[group] = score(truth, [four[i] for i in members])
        result.analysed_four[group] = score(truth, [analysed[i] for i in members])
        resource_members = [i for i in members if functions[i].label in RESOURCE_CLASSES]
        if resource_members:
            result.three[group] = score([functions[i].label for i in resource_members],
                                        [three[i] for i in resource_members], RESOURCE_CLASSES)
    return result


def counts(functions: Sequence[EvalFunction]) -> dict[str, dict[str, int]]:
    """Functions per framework and label."""
    table = {fw: dict.fromkeys(CLASSES, 0) for fw in FRAMEWORKS}
    for f in functions:
        table[f.framework][f.label] += 1
    return table


def plumbing_summary(functions: Sequence[EvalFunction]) -> dict[str, int]:
    """How the plumbing rules treat the set: waiting functions they recognise, and resource functions they
    would (wrongly) pass over as plumbing."""
    waiting = [f for f in functions if f.label == "waiting"]
    busy = [f for f in functions if f.label != "waiting"]
    return {
        "waiting": len(waiting),
        "waiting_recognised": sum(1 for f in waiting if plumbing_label(f) == "waiting"),
        "resource": len(busy),
        "resource_taken_for_plumbing": sum(1 for f in busy if plumbing_label(f) == "waiting"),
    }


def format_report(functions: Sequence[EvalFunction], evaluations: Sequence[Evaluation]) -> str:
    """The tables ``main`` prints."""
    lines = ["Hand-labelled framework functions (framework x label):",
             f"{'framework':<12}" + "".join(f"{c:>9}" for c in CLASSES) + f"{'total':>9}"]
    table = counts(functions)
    for fw in FRAMEWORKS:
        lines.append(f"{fw:<12}" + "".join(f"{table[fw][c]:>9}" for c in CLASSES) + f"{sum(table[fw].values()):>9}")
    lines.append(f"{'all':<12}" + "".join(f"{sum(table[fw][c] for fw in FRAMEWORKS):>9}" for c in CLASSES)
                 + f"{len(functions):>9}")
    plumbing = plumbing_summary(functions)
    lines += ["", f"Plumbing rules (crystalperf.core.attribution.waiting): {plumbing['waiting_recognised']} of "
              f"{plumbing['waiting']} waiting functions recognised; {plumbing['resource_taken_for_plumbing']} of "
              f"{plumbing['resource']} cpu/disk/network functions taken for plumbing."]
    groups = ["all", *FRAMEWORKS]
    header = f"{'classifier':<36}{'scoring':<22}" + "".join(f"{g:>16}" for g in groups)
    lines += ["", "Accuracy / macro-F1:", header]
    for ev in evaluations:
        for label, part in (("4-class", ev.four), ("3-class (no waiting)", ev.three),
                            ("4-class as analysed", ev.analysed_four)):
            cells = "".join(f"{part[g].accuracy:>9.3f}/{part[g].macro_f1:.3f}" if g in part else f"{'-':>16}"
                            for g in groups)
            lines.append(f"{ev.classifier[:35]:<36}{label:<22}{cells}")
    lines += ["", "Balanced accuracy (mean recall over the labels present; what a set with as many functions of each "
              "label would score):", header]
    for ev in evaluations:
        for label, part in (("3-class (no waiting)", ev.three), ("4-class as analysed", ev.analysed_four)):
            cells = "".join(f"{part[g].balanced_accuracy:>16.3f}" if g in part else f"{'-':>16}" for g in groups)
            lines.append(f"{ev.classifier[:35]:<36}{label:<22}{cells}")
    for ev in evaluations:
        lines += ["", f"{ev.classifier}: per class (4-class, all frameworks): precision / recall / F1 (support)"]
        for c in CLASSES:
            pc = ev.four["all"].per_class[c]
            lines.append(f"  {c:<8} {pc['precision']:.3f} / {pc['recall']:.3f} / {pc['f1']:.3f} ({int(pc['support'])})")
        lines.append("  confusion (rows: label, columns: predicted): " + " ".join(f"{c:>8}" for c in CLASSES))
        for c in CLASSES:
            row = ev.four["all"].confusion[c]
            lines.append(f"  {c:<8}" + " " * 38 + " ".join(f"{row.get(p, 0):>8}" for p in CLASSES))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crystalperf.models.framework_eval",
                                     description="Score classifiers on the hand-labelled framework functions.")
    parser.add_argument("--classifier", action="append", default=None, metavar="NAME",
                        help="classifier entry point to score (repeatable); default: keyword and the best installed")
    parser.add_argument("--data", type=Path, default=EVALDATA, help="evaluation set (JSON lines)")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    args = parser.parse_args(argv)
    try:
        functions = load_set(args.data)
    except EvalSetError as exc:
        sys.stderr.write(f"crystalperf: {exc}\n")
        return 2
    names = args.classifier or ["keyword", None]
    evaluations = []
    done: set[str] = set()
    for name in names:
        try:
            classifier = load_classifier(name, cache=False)
        except ValueError as exc:
            sys.stderr.write(f"crystalperf: {exc}\n")
            return 2
        if classifier.version in done:
            continue
        done.add(classifier.version)
        label = f"{name or 'installed'} ({classifier.version})"
        evaluations.append(evaluate(classifier, functions, label))
    if args.json:
        plumbing: dict[str, Any] = dict(plumbing_summary(functions))
        plumbing["waiting_missed"] = [f.id for f in functions if f.label == "waiting" and not plumbing_label(f)]
        plumbing["resource_taken_for_plumbing_ids"] = [f.id for f in functions
                                                       if f.label != "waiting" and plumbing_label(f)]
        out = {"counts": counts(functions), "plumbing": plumbing,
               "evaluations": [e.as_dict() for e in evaluations]}
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
    else:
        sys.stdout.write(format_report(functions, evaluations))
    return 0


if __name__ == "__main__":
    sys.exit(main())
