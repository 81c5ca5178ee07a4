"""What a user installs: the sdist and the wheel built from it hold the jars, the model weights, the typing
marker and the trace schema, and the wheel works in a fresh virtualenv, away from the source tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLED_TRACE = ROOT / "tests" / "data" / "spark-demo-trace.json.gz"

pytest.importorskip("build")


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist first, then the wheel from the unpacked sdist (what pip does with an sdist)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], check=True,
                   capture_output=True, timeout=900)
    return out


def _one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def test_wheel_holds_what_a_user_needs(dist: Path) -> None:
    with zipfile.ZipFile(_one(dist, "crystalperf-*.whl")) as wheel:
        names = set(wheel.namelist())
    for needed in (
        "crystalperf/py.typed",
        "crystalperf/integrations/spark/crystalperf-spark.jar",
        "crystalperf/integrations/flink/crystalperf-flink.jar",
        "crystalperf/models/weights/combine.json",
        "crystalperf/models/weights/code/model.pt",
        "crystalperf/models/weights/doc/gru.pt",
        "crystalperf/models/weights/sparse/model.npz",
        "crystalperf/models/weights/sparse/config.json",
    ):
        assert needed in names, needed
    # The Java sources ship beside the jars: the installed package refuses a jar that does not match them.
    assert any(n.startswith("crystalperf/integrations/spark/java/") and n.endswith(".java") for n in names)
    assert any(n.startswith("crystalperf/spec/trace-") and n.endswith(".schema.json") for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(_one(dist, "crystalperf-*.whl")) as wheel:
        text = wheel.read(entry_points).decode()
    assert "[crystalperf.integrations]" in text and "crystalperf = crystalperf.core.cli:main" in text


def test_sdist_builds_the_same_package(dist: Path) -> None:
    with tarfile.open(_one(dist, "crystalperf-*.tar.gz")) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    for needed in ("pyproject.toml", "hatch_build.py", "README.md", "noxfile.py",
                   "crystalperf/integrations/flink/crystalperf-flink.jar", "tests/data/spark-demo-trace.json.gz",
                   "data/measured/jvm.jsonl.gz", "data/measured/python.jsonl.gz"):
        assert needed in names, needed
    assert any(name.startswith("spec/trace-") for name in names)


def test_the_wheel_installs_and_runs_in_a_fresh_venv(dist: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    wheel = _one(dist, "crystalperf-*.whl")
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=600)
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    crystalperf = env_dir / "bin" / "crystalperf"
    helped = subprocess.run([str(crystalperf), "--help"], cwd=tmp_path, env=run_env, capture_output=True,
                            text=True, timeout=120)
    assert helped.returncode == 0 and "analyze" in helped.stdout
    where = subprocess.run([str(python), "-c", "import crystalperf, sys; sys.stdout.write(crystalperf.__file__)"],
                           cwd=tmp_path, env=run_env, capture_output=True, text=True, check=True)
    assert str(env_dir) in where.stdout  # the installed wheel, not the checkout
    out = tmp_path / "report"
    done = subprocess.run([str(crystalperf), "analyze", str(BUNDLED_TRACE), "--out", str(out)], cwd=tmp_path,
                          env=run_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "crystalperf-report.json").read_text())
    assert report["bottleneck"]["resource"] in ("cpu", "disk", "network")
    # No extras, no torch: the trained sparse classifier (numpy) classified, not the keyword fallback.
    assert report["sources"]["classifier"].startswith("sparse-"), report["sources"]["classifier"]
    classified = subprocess.run(
        [str(python), "-c",
         "import sys\n"
         "from crystalperf.core.attribution.classify import FunctionSource, load_classifier\n"
         "c = load_classifier(cache=False)\n"
         "[v] = c.classify([FunctionSource('example.send', 'python', 'def send(sock, data):\\n"
         "    sock.sendall(data)\\n    sock.shutdown(socket.SHUT_WR)\\n')])\n"
         "print(c.version, v.dominant(), 'torch' in sys.modules)"],
        cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=120)
    assert classified.returncode == 0, classified.stderr
    version, dominant, torch_loaded = classified.stdout.split()
    assert version.startswith("sparse-") and dominant == "network" and torch_loaded == "False"
    # The bundled jars are current in the installed layout too (importlib.resources, sources beside them).
    checked = subprocess.run(
        [str(python), "-c",
         "from crystalperf.integrations import available\n"
         "print(sorted(str(i.jar_path().name) for i in available() if i.jar))"],
        cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == "['crystalperf-flink.jar', 'crystalperf-spark.jar']"
