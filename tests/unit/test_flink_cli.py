"""The Flink commands on bad input, as a user runs them: no Flink needed to be told a file is not a part."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _crystalperf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crystalperf.core.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def test_flink_finish_on_a_missing_or_foreign_part_exits_2_with_one_line(tmp_path: Path) -> None:
    for part in (tmp_path / "crystalperf-flink-nope.1.json", tmp_path / "crystalperf-flink-x.2.json"):
        if part.name.endswith("2.json"):
            part.write_text('{"format": "something else"}')
        result = _crystalperf("flink-finish", str(part), "--timeout", "1")
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and str(part) in result.stderr


def test_bad_metrics_file_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "crystalperf-flink-broken.json"
    bad.write_text('{"format": "crystalperf-flink-metrics", "scopes": 3}')
    result = _crystalperf("import", "flink-metrics", str(bad))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(bad) in result.stderr and "Traceback" not in result.stderr
