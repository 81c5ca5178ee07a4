"""Where a training's report goes (explicit dir, the fit's TensorBoard/checkpoint dir, TF_CONFIG task), and
the finish command on a recorded trace -- no TensorFlow."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from crystalperf.integrations.tensorflow import config, finish

TRACE = Path(__file__).resolve().parents[1] / "data" / "tensorflow-fit-trace.json.gz"
WORKER_1 = json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})


def test_tf_config_task_and_cluster() -> None:
    assert config.tf_config({}) == {} and config.tf_config({"TF_CONFIG": "not json"}) == {}
    assert config.tf_config({"TF_CONFIG": "[1]"}) == {}
    parsed = config.tf_config({"TF_CONFIG": WORKER_1})
    assert config.worker_suffix(parsed) == "worker-1" and config.multi_worker(parsed)
    one = {"cluster": {"chief": ["a:1"]}, "task": {"type": "chief"}}
    assert config.worker_suffix(one) == "chief-0" and not config.multi_worker(one)
    assert config.worker_suffix({}) is None and not config.multi_worker({})


def test_run_id_names_the_time_and_process() -> None:
    assert config.run_id(now=0.0, pid=42, sequence=1).endswith("-42") and config.run_id(pid=7).startswith("fit-")
    assert config.run_id(now=0.0, pid=42, sequence=3).endswith("-42-3")
    assert config.run_id(now=0.0, pid=42) != config.run_id(now=0.0, pid=42)  # two fits in one second


def test_output_dir_rules(tmp_path: Path) -> None:
    tensorboard = SimpleNamespace(log_dir=str(tmp_path / "tb"))
    checkpoint = SimpleNamespace(filepath=str(tmp_path / "ckpt" / "model-{epoch}.keras"))
    assert config.sibling_output_dir([object(), tensorboard]) == tmp_path / "tb"
    assert config.sibling_output_dir([checkpoint]) == tmp_path / "ckpt"
    assert config.sibling_output_dir([SimpleNamespace(log_dir="")]) is None
    worker = config.tf_config({"TF_CONFIG": WORKER_1})
    assert config.output_dir(tmp_path / "x", tmp_path / "tb", "fit-1", {}) == tmp_path / "x"
    assert config.output_dir(None, tmp_path / "tb", "fit-1", {}) == tmp_path / "tb" / "crystalperf" / "fit-1"
    assert config.output_dir(None, None, "fit-1", {}) == Path("crystalperf") / "fit-1"
    assert config.output_dir(tmp_path / "x", None, "fit-1", worker) == tmp_path / "x" / "worker-1"


def test_the_callbacks_of_the_running_fit_are_found_in_the_callers_frames() -> None:
    ours = object()

    def hook() -> list[object]:
        return config.fit_callbacks(ours, sys._getframe())

    def fit() -> list[object]:
        callbacks = SimpleNamespace(callbacks=[SimpleNamespace(log_dir="tb"), ours])  # Keras's CallbackList
        return callbacks.callbacks if hook() is callbacks.callbacks else []

    assert len(fit()) == 2
    assert config.fit_callbacks(ours, sys._getframe()) == []


def test_finish_without_analysis_rewrites_the_trace(tmp_path: Path) -> None:
    saved = tmp_path / "in.json.gz"
    shutil.copyfile(TRACE, saved)
    assert finish.main([str(saved), "--out", str(tmp_path / "out"), "--no-analysis"]) == 0
    assert (tmp_path / "out" / "crystalperf-trace.json.gz").is_file()
    assert not (tmp_path / "out" / "crystalperf-report.json").exists()


def test_finish_needs_a_trace_and_an_out_dir() -> None:
    with pytest.raises(SystemExit):
        finish.main([])


def test_the_finish_command_writes_the_report(tmp_path: Path) -> None:
    from crystalperf.integrations.base import run_finish

    out = tmp_path / "out"
    command = config.INTEGRATION.finish_command(str(TRACE), "--out", str(out))
    assert run_finish(command, out / "crystalperf-analysis.log", timeout_s=120) == 0
    report = json.loads((out / "crystalperf-report.json").read_text())
    assert report["application"]["framework"] == "tensorflow"
    assert [o["name"] for o in report["operations"] if o["kind"] == "step"] == (
        [f"step {i} (epoch 1)" for i in range(2, 6)] + [f"step {i} (epoch 2)" for i in range(6, 10)])
    assert (out / "crystalperf-report.html").is_file()
