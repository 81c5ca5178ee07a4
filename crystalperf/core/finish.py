"""The job end every hook shares: write the trace, then the report next to it, never raising into the job.

Light to import (a hook imports it while the job runs): the analysis is loaded only when the trace is written.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from crystalperf.core import trace as tr
from crystalperf.core.record.hooks import TRACE_NAME, guard

if TYPE_CHECKING:
    from crystalperf.core.analysis import Analysis

log = logging.getLogger("crystalperf")


def finish_job(trace: tr.Trace, out_dir: str | Path, *, analyze: bool = True) -> Path | None:
    """Write ``crystalperf-trace.json.gz`` into out_dir, then the report next to it.

    Returns the trace path, or None when even the trace could not be written. The analysis failing
    leaves the trace in place (it can be analysed later with ``crystalperf analyze``).
    """
    out = Path(out_dir)
    path: Path | None = None
    with guard(f"writing the trace to {out}"):
        out.mkdir(parents=True, exist_ok=True)
        path = tr.save_trace(trace, out / TRACE_NAME)
        log.info("crystalperf: trace written to %s", path)
    if path is not None and analyze:
        with guard("analysing the trace"):
            from crystalperf.core.analysis import analyze as analyse_trace
            from crystalperf.core.report import write_reports

            # The trace in memory is the one just written: no need to read it back for the analysis.
            result = analyse_trace(trace)
            result.files = write_reports(result.report, out)
            log.warning("crystalperf: %s Report: %s", result.report["bottleneck"]["sentence"],
                        out / "crystalperf-report.html")
            with guard("embedding the located functions in the trace"):
                _embed_what_was_used(result, path)
    return path


def _embed_what_was_used(result: Analysis, path: Path) -> None:
    """Write the trace again with the functions and vectors its analysis used (bounded), so that
    ``crystalperf analyze`` on another machine, without the framework or the job's files, gives this report."""
    from crystalperf.core.attribution.vectors import embed_resolution

    samples = result.trace.samples
    resolution = result.profile.resolution
    if samples is None or resolution is None or samples.resolution is not None:
        return
    samples.resolution = embed_resolution(samples, resolution, result.profile.classifier_version)
    tr.save_trace(result.trace, path)
