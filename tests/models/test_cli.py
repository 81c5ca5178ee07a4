"""``crystalperf classify`` per the ARCHITECTURE.md contract, through the real console entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.test_unmistakable import CHECKSUM, SOCKET_SEND


def _run(*args: str, env_cache: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ, CRYSTALPERF_CACHE_DIR=str(env_cache))
    return subprocess.run(
        [sys.executable, "-m", "crystalperf.core.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_classify_jsonl_in_jsonl_out_with_cache(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "language": "python", "code": SOCKET_SEND["python"], "doc": "Send every packet."},
        {"id": "b", "language": "cpp", "code": CHECKSUM["cpp"], "doc": ""},
        {"id": "c", "language": "java", "code": SOCKET_SEND["java"]},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    result = _run("classify", "--input", str(src), "--output", str(out), env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == ["a", "b", "c"]
    for line in lines:
        # the shipped sparse classifier also says how sure it is of each class
        assert set(line) == {"id", "cpu", "disk", "network", "waiting", "confidence", "low_confidence"}
        assert 0.0 <= line["confidence"] <= 1.0 and line["low_confidence"] == (line["confidence"] < 2 / 3)
        assert abs(line["cpu"] + line["disk"] + line["network"] - 1.0) < 1e-6
        assert 0.0 <= line["waiting"] <= 1.0
    # The shipped sparse classifier is the default; its version names the cache file.
    cached = list((tmp_path / "cache").glob("classified-sparse-*.jsonl"))
    assert len(cached) == 1 and len(cached[0].read_text().splitlines()) == 3
    again = _run(
        "classify", "--input", str(src), env_cache=tmp_path / "cache"
    )  # stdout, served from the cache
    assert [json.loads(line) for line in again.stdout.splitlines()] == lines
    assert len(cached[0].read_text().splitlines()) == 3


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"id": "a", "language": "cobol", "code": "x"}\n', "language 'cobol'"),
        ('{"id": "a", "code": "x"}\n', "lacks language"),
        ("not json\n", "line 1 is not JSON"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, content: str, problem: str) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(content)
    result = _run("classify", "--input", str(src), env_cache=tmp_path / "cache")
    assert result.returncode == 2
    assert problem in result.stderr and str(src) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_missing_input_file(tmp_path: Path) -> None:
    result = _run("classify", "--input", str(tmp_path / "nope.jsonl"), env_cache=tmp_path / "cache")
    assert result.returncode == 2 and "no such input file" in result.stderr


def test_classify_with_the_papers_pair_names_it(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "a", "language": "java", "code": SOCKET_SEND["java"]}) + "\n")
    result = _run("classify", "--input", str(src), "--classifier", "neural", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    [line] = [json.loads(x) for x in result.stdout.splitlines()]
    assert line["waiting"] == 0.0  # the paper's pair has no waiting class
    assert list((tmp_path / "cache").glob("classified-neural-*.jsonl"))
