"""``python -m bench.whatif --scale``: scale cases of shapes the model was not tuned on, each predicted with
``crystalperf validate`` from its own traces (see ``runner.py`` and docs/accuracy.md, "Scale cases").

Cases by framework: ``spark.py`` (local), ``flink.py`` (local), ``tensorflow.py`` and ``cluster.py`` (Spark and
Flink on the namespace cluster with a CPU quota per host).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

FRAMEWORKS = ("spark", "tensorflow", "flink")


def cases(data_dir: Path, framework: str) -> list[Any]:
    """The framework's scale cases, in the order they run (the ceiling-bound ones first)."""
    from bench.whatif.scale import cluster, flink, spark, tensorflow

    local = {"spark": spark, "flink": flink, "tensorflow": tensorflow}[framework].cases(data_dir)
    return local + [c for c in cluster.cases(data_dir) if c.framework == framework]


def export_traces(result: Any, folder: Path, command: str) -> Path:
    """Plain copies of a case's traces in ``folder/<framework>-<case>/`` (``baseline-repN``/``target-repN``), with
    a README line: the command and the real runtimes."""
    target = folder / f"{result.framework}-{result.case}"
    target.mkdir(parents=True, exist_ok=True)
    for kind, traces in (("baseline", result.baseline_traces), ("target", result.target_traces)):
        for trace in traces:
            rep = Path(trace).parent.name  # repN: the round it ran in
            shutil.copyfile(trace, target / f"{kind}-{rep}.json.gz")
    line = (f"- `{result.framework}/{result.case}` ({result.target}, {result.where}"
            f"{', bound by ' + result.ceiling if result.ceiling else ''}): `{command}`; real runtimes baseline "
            f"{' / '.join(f'{x:.2f}' for x in result.baseline_runs_s)} s, target "
            f"{' / '.join(f'{x:.2f}' for x in result.actual_runs_s)} s (rounds 0, 1, 2...: `baseline-repN.json.gz`, "
            f"`target-repN.json.gz`); the case's prediction: `crystalperf validate "
            f"baseline-{Path(result.trace or '').parent.name}.json.gz target-{Path(result.target_trace or '').parent.name}"
            f".json.gz`\n")
    (target / "README.md").write_text(line)
    (target / "case.json").write_text(json.dumps(asdict(result), indent=1) + "\n")
    return target
