"""The sparse classifier: numpy inference equals the torch module, training is reproducible, measured labels
are read and split by library, and ``crystalperf train/evaluate --measured`` work end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from crystalperf.core.errors import BadInputError
from crystalperf.models.evaluate import to_function
from crystalperf.models.features import batch_features
from crystalperf.models.measured import measured_splits, read_measured, split_by_library
from crystalperf.models.sparse import LABELS4, SparseClassifier
from crystalperf.models.sparse_train import (
    SparseModule,
    best_weight,
    fit_framework_blend,
    train_sparse_classifier,
    within_tolerance,
)
from tests.models.test_unmistakable import CASES

WAITING = {
    "java": "public void pause(long ms) throws InterruptedException {\n    Thread.sleep(ms);\n    lock.await();\n}",
    "python": "def pause(seconds):\n    time.sleep(seconds)\n    condition.wait()\n    queue.get()\n",
}


def _records(n: int, library_count: int = 12) -> list[dict[str, Any]]:
    """Measured-format rows: the unmistakable cases and waiting functions, renamed per copy."""
    templates = [(r, lang, code) for r, lang, code in CASES] + [("waiting", lang, c) for lang, c in WAITING.items()]
    rows = []
    for i in range(n):
        label, language, code = templates[i % len(templates)]
        library = f"lib{i % library_count}"
        rows.append(
            {
                "id": f"{language}:{library}.Mod.f{i}",
                "language": language,
                "qualified_name": f"{library}.Mod.f{i}",
                "library": library,
                "licence": "MIT",
                "code": code.replace("data", f"data{i % 7}").replace("line", f"line{i % 5}"),
                "doc": "" if i % 3 else f"Does the {label} work.",
                "origin": "source",
                "label": label,
                "shares": {k: float(k == label) for k in LABELS4},
                "seconds": 0.5,
                "events": 20,
                "workloads": ["test"],
                "method": "jfr",
            }
        )
    return rows


@pytest.mark.parametrize("hidden", [0, 8])
def test_numpy_inference_equals_the_torch_module(tmp_path: Path, hidden: int) -> None:
    rows = _records(320)
    classifier = train_sparse_classifier(rows[:240], rows[240:280], tmp_path / "w", hidden=hidden, epochs=2)
    module, keys = SparseModule.from_export(tmp_path / "w")
    functions = [to_function(r) for r in rows] + [to_function({**r, "code": ""}) for r in rows[:20]]
    indices, values, offsets = batch_features(functions)
    key_row = {int(k): i for i, k in enumerate(keys)}
    rows_, weights_, starts = [], [], []
    for f in range(len(functions)):
        starts.append(len(rows_))
        for j in range(offsets[f], offsets[f + 1]):
            if indices[j] in key_row:
                rows_.append(key_row[indices[j]])
                weights_.append(values[j])
    with torch.no_grad():
        logits = module(torch.tensor(rows_, dtype=torch.long), torch.tensor(starts, dtype=torch.long),
                        torch.tensor(weights_, dtype=torch.float32))
    expected = torch.softmax(logits, dim=1).numpy()
    got = classifier.predict_proba4(functions)
    assert got.shape == expected.shape == (len(functions), 4)
    assert np.abs(got - expected).max() < 1e-4
    assert np.allclose(got.sum(axis=1), 1.0, atol=1e-5)


def test_two_trainings_write_identical_weights(tmp_path: Path) -> None:
    rows = _records(200)
    for name in ("a", "b"):
        train_sparse_classifier(rows[:160], rows[160:], tmp_path / name, epochs=2, seed=3)
    for file in ("model.npz", "config.json"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes(), file
    other = train_sparse_classifier(rows[:160], rows[160:], tmp_path / "c", epochs=2, seed=4)
    assert other.version != SparseClassifier(tmp_path / "a").version  # the seed matters, so it is honoured


def test_classify_renormalises_three_and_exposes_waiting(tmp_path: Path) -> None:
    rows = _records(300)
    classifier = train_sparse_classifier(rows, rows[:40], tmp_path / "w", epochs=6)
    functions = [to_function(r) for r in rows[:40]]
    probs = classifier.predict_proba4(functions)
    vectors = classifier.classify(functions)
    waiting = classifier.waiting_probability(functions)
    for p, v, w in zip(probs, vectors, waiting, strict=True):
        assert v.waiting == 0.0 and abs(v.cpu + v.disk + v.network - 1.0) < 1e-6
        assert abs(v.cpu - p[0] / p[:3].sum()) < 1e-6
        assert abs(w - p[3]) < 1e-6
    waits = [i for i, r in enumerate(rows[:40]) if r["label"] == "waiting"]
    assert waits and all(probs[i].argmax() == 3 for i in waits)


def _write_measured(directory: Path, rows: list[dict[str, Any]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "jvm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_measured_rows_are_deduplicated_filtered_and_split_by_library(tmp_path: Path) -> None:
    rows = _records(240, library_count=30)
    twins = [{**r, "id": r["id"] + "#bytecode", "origin": "bytecode"} for r in rows[:60]]
    unlabelled = [{**rows[0], "id": "java:x.Unknown.f", "label": None}]
    _write_measured(tmp_path / "m", rows + twins + unlabelled + rows[:5])
    read = read_measured(tmp_path / "m")
    assert len(read) == 240 + 60  # duplicates once, null labels never
    train, val, test = measured_splits(tmp_path / "m")
    assert train and test
    split_of = {r["id"]: r["split"] for r in train + val + test}
    for twin in twins:
        assert split_of[twin["id"]] == split_of[twin["id"].removesuffix("#bytecode")]
    libraries = {s: {r["library"] for r in part} for s, part in (("train", train), ("val", val), ("test", test))}
    assert not libraries["train"] & libraries["test"] and not libraries["train"] & libraries["val"]
    again = read_measured(tmp_path / "m")
    split_by_library(again, seed=0)
    assert {r["id"]: r["split"] for r in again} == split_of  # seeded: the same split every time


@pytest.mark.parametrize(
    ("line", "problem"),
    [("not json", "line 1 is not JSON"), ('{"id": "a", "label": "cpu"}', "line 1 lacks"),
     ('{"id": "a", "language": "java", "qualified_name": "a", "library": "l", "code": "", "label": "gpu"}',
      "label 'gpu'")],
)
def test_bad_measured_file_is_a_clear_error(tmp_path: Path, line: str, problem: str) -> None:
    (tmp_path / "bad.jsonl").write_text(line + "\n")
    with pytest.raises(BadInputError, match=problem):
        read_measured(tmp_path)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CRYSTALPERF_CACHE_DIR=str(cwd / "cache"))
    return subprocess.run([sys.executable, "-m", "crystalperf.core.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def test_train_and_evaluate_on_measured_labels_through_the_cli(tmp_path: Path) -> None:
    _write_measured(tmp_path / "m", _records(300, library_count=30))
    done = _cli("train", "--measured", str(tmp_path / "m"), "--weights", str(tmp_path / "w"),
                "--data-dir", str(tmp_path / "d"), "--sparse-epochs", "3", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "d" / "evaluation.json").read_text())["measured_test"]
    trained = SparseClassifier(tmp_path / "w" / "sparse")
    assert report["sparse"]["version"] == trained.version
    # one-hot measured shares: the fitted share temperature sharpens, and the fit is on record
    assert trained.share_temperature < 1.0 and trained.config["training"]["share_fit"]["functions"] > 0
    assert "share temperature" in done.stdout
    for name in ("sparse", "keyword"):
        assert {"4-class", "3-class", "by_language"} <= set(report[name])
    # No paper-pair weights in that directory: the shipped pair is the baseline, side by side.
    assert report["neural"]["version"].startswith("neural-") and "4-class" in report["neural"]
    scored = _cli("evaluate", "--measured", str(tmp_path / "m"), "--weights", str(tmp_path / "w"), cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr
    assert "sparse" in scored.stdout and "keyword" in scored.stdout


def test_train_on_a_missing_measured_directory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _cli("train", "--measured", str(tmp_path / "nope"), "--weights", str(tmp_path / "w"), cwd=tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "nope" in done.stderr


KEPT_CORPUS = Path(__file__).resolve().parents[2] / "data" / "measured"
BLEND_DEV = KEPT_CORPUS.parent / "handlabelled" / "tensorflow-python.jsonl"


def test_the_hand_labels_choose_the_blend_within_what_the_measured_rows_allow() -> None:
    dev = {0.0: 0.50, 0.1: 0.55, 0.2: 0.60, 0.3: 0.64, 0.5: 0.70, 0.75: 0.72, 1.0: 0.75, 1.5: 0.80, 2.0: 0.78}
    measured = {0.0: 0.64, 0.1: 0.64, 0.2: 0.63, 0.3: 0.625, 0.5: 0.60, 0.75: 0.59, 1.0: 0.56, 1.5: 0.51, 2.0: 0.49}
    # alone, the hand labels would take 1.5; a weight that costs the measured rows over 0.02 of macro-F1 is out
    assert best_weight(dev) == 1.5
    assert within_tolerance(measured) == [0.0, 0.1, 0.2, 0.3]
    assert best_weight(dev, within_tolerance(measured)) == 0.3
    # ties go to the smaller weight
    assert best_weight({w: 0.5 for w in dev}) == 0.0


def test_a_framework_s_weight_is_fitted_on_its_own_functions_alone() -> None:
    """fit_framework_blend keys each framework's weight by language, from that framework's hand-labelled functions
    only: a function of no framework fits none, another framework's does not move it."""
    from crystalperf.models.framework_eval import EvalFunction, load_set

    tensorflow = load_set(BLEND_DEV)
    model = SparseClassifier()
    alone = fit_framework_blend(model, tensorflow)
    assert set(alone) == {"tensorflow"} and set(alone["tensorflow"]) == {"python"}
    other = [EvalFunction(id="x:a.b.Store.save", framework="spark", qualified_name="a.b.Store.save", language="python",
                          origin="source", code="def save(self, path):\n    open(path, 'wb').write(b'')\n", doc="",
                          label="disk", reason="writes a file", source_trace=""),
             EvalFunction(id="spark:org.apache.spark.storage.DiskStore.put", framework="spark",
                          qualified_name="org.apache.spark.storage.DiskStore.put", language="java", origin="bytecode",
                          code="void put(BlockId p0) {\n    FileChannel.write();\n}", doc="", label="disk",
                          reason="writes the block's file", source_trace="")]
    mixed = fit_framework_blend(model, [*tensorflow, *other])
    assert mixed["tensorflow"] == alone["tensorflow"]
    assert set(mixed) == {"tensorflow", "spark"} and set(mixed["spark"]) == {"java"}


def test_a_bad_blend_dev_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    _write_measured(tmp_path / "m", _records(120, library_count=12))
    (tmp_path / "dev.jsonl").write_text('{"id": "tensorflow:x", "label": "cpu"}\n')
    done = _cli("train", "--measured", str(tmp_path / "m"), "--weights", str(tmp_path / "w"), "--sparse-epochs", "1",
                "--keyword-blend-dev", str(tmp_path / "dev.jsonl"), "--quiet", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "dev.jsonl" in done.stderr and "missing" in done.stderr


def test_train_reproduces_the_shipped_weights_from_the_kept_corpus(tmp_path: Path) -> None:
    """What docs/models.md promises: the measured corpus kept in the repository, trained with the defaults,
    gives the shipped weights (single-threaded and seeded: byte for byte on one kind of CPU; across kinds, the
    float16 tables within a rounding step)."""
    done = _cli("train", "--measured", str(KEPT_CORPUS), "--weights", str(tmp_path / "w"),
                "--data-dir", str(tmp_path / "d"), "--sparse-only", "--quiet", "--keyword-blend-dev", str(BLEND_DEV),
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shipped_dir = SparseClassifier().weights_dir
    with np.load(tmp_path / "w" / "sparse" / "model.npz") as new, np.load(shipped_dir / "model.npz") as shipped:
        assert sorted(new.files) == sorted(shipped.files)
        assert np.array_equal(new["keys"], shipped["keys"])
        for name in new.files:
            assert np.allclose(new[name].astype(np.float32), shipped[name].astype(np.float32), atol=2e-3), name
    new_config = json.loads((tmp_path / "w" / "sparse" / "config.json").read_text())
    shipped_config = json.loads((shipped_dir / "config.json").read_text())
    assert new_config["share_temperature"] == shipped_config["share_temperature"]
    assert new_config["keyword_blend"] == shipped_config["keyword_blend"]
    assert new_config["framework_keyword_blend"] == shipped_config["framework_keyword_blend"]
    new_training, shipped_training = new_config["training"], shipped_config["training"]
    for config in (new_training, shipped_training):
        config.pop("source")  # names the directory it was given
    assert abs(new_training.pop("validation_macro_f1") - shipped_training.pop("validation_macro_f1")) < 1e-3
    new_fit, shipped_fit = new_training.pop("share_fit"), shipped_training.pop("share_fit")
    assert new_fit["functions"] == shipped_fit["functions"]
    assert all(abs(new_fit[k] - shipped_fit[k]) < 1e-3 for k in ("error", "error_unsharpened"))
    assert new_training == shipped_training
