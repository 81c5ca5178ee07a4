"""Export the trace JSON Schema and the example documents to ``spec/``.

Run ``python -m crystalperf.core.trace.spec`` after changing the trace models; a test fails until then.
"""

from __future__ import annotations

import json
from pathlib import Path

from crystalperf.core import trace as tr

SPEC_DIR = Path("spec")


def schema_path(root: Path | None = None) -> Path:
    root = root or Path(__file__).resolve().parents[3]
    return root / SPEC_DIR / f"trace-{tr.SCHEMA_VERSION}.schema.json"


def export(root: Path | None = None) -> list[Path]:
    from crystalperf.core.trace.synthetic import spark_like_trace

    root = root or Path(__file__).resolve().parents[3]
    path = schema_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(tr.json_schema(), indent=2, sort_keys=True) + "\n")
    examples = root / SPEC_DIR / "examples"
    examples.mkdir(exist_ok=True)
    minimal = tr.Trace(
        application=tr.Application(framework="other", id="minimal", start=0.0, end=1.5),
        operations=[tr.Operation(id="only", name="the only operation", start=0.1, end=1.4,
                                 metrics={tr.METRIC_RUN_TIME: 1.3, tr.METRIC_CPU_TIME: 1.0})],
    )
    written = [path]
    for name, doc in (("minimal.json", minimal),
                      ("spark-hierarchical.json", spark_like_trace(jobs=1, stages_per_job=2, tasks_per_stage=2,
                                                                   samples_per_second=2))):
        target = examples / name
        target.write_text(doc.to_json(indent=2) + "\n")
        written.append(target)
    return written


if __name__ == "__main__":
    for p in export():
        print(p)  # noqa: T201
