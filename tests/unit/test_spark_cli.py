"""The Spark side that needs no Spark: event-log errors at the CLI."""

from __future__ import annotations

import pytest


def test_bad_event_log_is_one_clear_error(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from crystalperf.core.cli import main

    bad = tmp_path / "eventlog"
    bad.write_text('{"Event": "SomethingElse"}\nnot json\n')
    assert main(["import", "spark-eventlog", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not a Spark event log" in err and str(bad) in err
