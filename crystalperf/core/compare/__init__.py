"""Two runs of one job side by side: ``diff`` (what changed and why) and ``validate`` (a what-if against the
rerun that tested it). Both read traces (analysed here) or ``crystalperf-report.json`` files; ``runs`` loads
them and matches their operations level by level."""

from crystalperf.core.compare.diff import diff, exceeds, parse_percent
from crystalperf.core.compare.runs import Op, Run, load_run, match_operations, to_json, write_json
from crystalperf.core.compare.validate import validate

__all__ = ["Op", "Run", "diff", "exceeds", "load_run", "match_operations", "parse_percent", "to_json", "validate",
           "write_json"]
