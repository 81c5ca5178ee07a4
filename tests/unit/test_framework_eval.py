"""The hand-labelled framework evaluation set (crystalperf/models/evaldata/frameworks.jsonl) and its scoring."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from crystalperf.core.attribution.classify import FixedClassifier
from crystalperf.core.resources import ResourceVector
from crystalperf.models import corpus
from crystalperf.models import framework_eval as fe
from crystalperf.models.framework_collect import framework_of, function_key

MIN_PER_FRAMEWORK = 100


@pytest.fixture(scope="module")
def functions() -> list[fe.EvalFunction]:
    return fe.load_set()


def test_the_set_is_well_formed(functions: list[fe.EvalFunction]) -> None:
    per_framework = Counter(f.framework for f in functions)
    assert set(per_framework) == set(fe.FRAMEWORKS)
    assert all(n >= MIN_PER_FRAMEWORK for n in per_framework.values()), per_framework
    assert len({f.id for f in functions}) == len(functions)
    assert all(f.label in fe.CLASSES for f in functions)
    assert all(len(f.reason.split()) >= 3 for f in functions), [f.id for f in functions if len(f.reason.split()) < 3]
    # what the classifiers read: every function has text, and the ids are unique per method, not per variant
    assert all(f.code.strip() for f in functions)
    assert len({function_key(f.id.split(":", 1)[1]) for f in functions}) == len(functions)


def test_each_function_belongs_to_its_framework(functions: list[fe.EvalFunction]) -> None:
    wrong = [f.id for f in functions if framework_of(f.qualified_name) != f.framework]
    assert not wrong


def test_no_function_can_enter_a_training_corpus(functions: list[fe.EvalFunction]) -> None:
    assert all(corpus.FORBIDDEN.search(f.id) and corpus.FORBIDDEN.search(f.qualified_name) for f in functions)
    # Through the corpus builder itself, with a rule that would label anything: nothing survives.
    claim_all = [corpus.Rule("cpu", __import__("re").compile(".*"), "test: claims every function")]
    extracted = []
    for f in functions:
        library = (corpus.java_library(f.qualified_name) if f.language in ("java", "scala")
                   else "python:" + f.qualified_name.split(".")[0])
        long_code = f.code + "\n" * corpus.MIN_LINES + " ".join(["token"] * corpus.MIN_SUBTOKENS)
        extracted.append(corpus.Extracted(library, f.language if f.language != "unknown" else "java",
                                          f.qualified_name, long_code, f.doc))
    assert corpus.label_functions(extracted, claim_all) == []


def test_scores_match_a_hand_computed_example() -> None:
    truth = ["cpu", "cpu", "disk", "network", "waiting"]
    predicted = ["cpu", "disk", "disk", "cpu", "waiting"]
    scores = fe.score(truth, predicted)
    assert scores.accuracy == pytest.approx(3 / 5)
    # cpu: precision 1/2, recall 1/2 -> F1 0.5; disk: P 1/2, R 1 -> 2/3; network: 0; waiting: 1
    assert scores.per_class["cpu"]["f1"] == pytest.approx(0.5)
    assert scores.per_class["disk"]["f1"] == pytest.approx(2 / 3)
    assert scores.per_class["network"]["f1"] == 0.0
    assert scores.macro_f1 == pytest.approx((0.5 + 2 / 3 + 0 + 1) / 4)
    assert scores.confusion["network"]["cpu"] == 1
    # a class absent from truth and predictions stays out of the macro average
    assert fe.score(["cpu", "disk"], ["cpu", "disk"]).macro_f1 == pytest.approx(1.0)


def _row(**fields: object) -> dict[str, object]:
    row: dict[str, object] = {"framework": "spark", "language": "java", "origin": "bytecode", "code": "x()",
                              "doc": "", "reason": "hand-written test row", "source_trace": "test"}
    row.update(fields)
    row.setdefault("qualified_name", str(row["id"]).split(":", 1)[1])
    return row


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_waiting_function_is_right_only_when_waiting_is_the_top_class(tmp_path: Path) -> None:
    rows = [
        _row(id="spark:org.apache.spark.A.read", label="disk"),
        _row(id="spark:org.apache.spark.B.hash", label="cpu"),
        _row(id="spark:org.apache.spark.C.await", label="waiting"),
        _row(id="flink:org.apache.flink.D.park", framework="flink", label="waiting"),
        _row(id="flink:org.apache.flink.runtime.taskmanager.Task.run", framework="flink", label="waiting"),
        _row(id="tensorflow:tensorflow.op.MatMul", framework="tensorflow", language="python", origin="op-kernel",
             label="cpu", declared_vector="1,0,0"),
    ]
    functions = fe.load_set(_write(tmp_path / "set.jsonl", rows))
    classifier = FixedClassifier({
        "org.apache.spark.A": ResourceVector(0.1, 0.8, 0.1),
        "org.apache.spark.C": ResourceVector(0.2, 0.7, 0.1),
        "org.apache.flink.D": ResourceVector(0.1, 0.1, 0.1, 0.7),
        "tensorflow.op.MatMul": ResourceVector(0.1, 0.1, 0.8),
    }, default=ResourceVector(1.0, 0.0, 0.0))
    result = fe.evaluate(classifier, functions, "fixed")
    # right: A (disk), B (cpu), D (waiting on top); wrong: C (disk), Task.run (cpu), MatMul (network)
    assert result.four["all"].accuracy == pytest.approx(3 / 6)
    assert result.predictions["flink:org.apache.flink.D.park"] == "waiting"
    # 3-class: only the cpu/disk/network functions (A, B, MatMul), arg-max over the three resources
    assert result.three["all"].n == 3
    assert result.three["all"].accuracy == pytest.approx(2 / 3)
    assert "flink" not in result.three  # the flink rows are all waiting
    # as analysed: Task.run is plumbing (waiting), MatMul keeps its declared compute vector
    assert result.analysed_four["all"].accuracy == pytest.approx(5 / 6)
    summary = fe.plumbing_summary(functions)
    assert summary["waiting"] == 3 and summary["waiting_recognised"] == 1
    assert "fixed" in fe.format_report(functions, [result])


def test_bad_files_are_one_clear_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _row(id="spark:org.apache.spark.A.read", label="disk")
    cases = {
        "label.jsonl": [dict(good, label="gpu")],
        "dupe.jsonl": [good, good],
        "reason.jsonl": [dict(good, reason=" ")],
        "framework.jsonl": [dict(good, id="flink:org.apache.spark.A.read")],
    }
    for name, rows in cases.items():
        path = _write(tmp_path / name, rows)
        with pytest.raises(fe.EvalSetError, match=str(path).replace(".", r"\.")):
            fe.load_set(path)
    (tmp_path / "broken.jsonl").write_text("{not json\n", encoding="utf-8")
    assert fe.main(["--data", str(tmp_path / "broken.jsonl"), "--classifier", "keyword"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "broken.jsonl:1" in err


def test_main_prints_the_table_for_the_keyword_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    assert fe.main(["--classifier", "keyword"]) == 0
    out = capsys.readouterr().out
    assert "keyword-1" in out and "3-class" in out and "tensorflow" in out


def test_variants_of_one_method_share_a_key() -> None:
    assert function_key("org.apache.spark.rdd.RDD.$anonfun$mapPartitions$2") == function_key(
        "org.apache.spark.rdd.RDD.mapPartitions")
    assert function_key("org.apache.flink.runtime.taskmanager.Task$$Lambda$815/0x00007f553b630200.run") == (
        "org.apache.flink.runtime.taskmanager.Task.run")
    assert function_key("org.apache.spark.util.Utils$.tryWithSafeFinally") == "org.apache.spark.util.Utils.tryWithSafeFinally"
    assert function_key("tensorflow.op._MklNativeFusedConv2D") == "tensorflow.op.FusedConv2D"
    assert function_key(
        "org.apache.spark.sql.catalyst.expressions.GeneratedClass$GeneratedIteratorForCodegenStage4.processNext"
    ) == function_key(
        "org.apache.spark.sql.catalyst.expressions.GeneratedClass$GeneratedIteratorForCodegenStage9.processNext")
    assert framework_of("java.io.FileInputStream.read") is None
    assert framework_of("keras.src.layers.core.dense.Dense.call") == "tensorflow"


def test_seam_classes_are_waiting_for_plumbing_else_the_arg_max_of_the_three_resources(tmp_path: Path) -> None:
    rows = [
        _row(id="spark:org.apache.spark.A.read", label="disk"),
        _row(id="flink:org.apache.flink.runtime.taskmanager.Task.run", framework="flink", label="waiting"),
        _row(id="spark:org.apache.spark.C.await", label="waiting"),
    ]
    functions = fe.load_set(_write(tmp_path / "set.jsonl", rows))
    scores = np.array([[0.1, 0.6, 0.0, 0.3],   # disk
                       [0.9, 0.0, 0.1, 0.0],   # plumbing: waiting whatever the scores say
                       [0.1, 0.2, 0.3, 0.4]])  # waiting on top is not what the seam gives: network
    assert [fe.CLASSES[i] for i in fe.seam_classes(functions, scores)] == ["disk", "waiting", "network"]
