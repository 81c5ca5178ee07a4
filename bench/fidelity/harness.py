"""Running one fidelity job: its data, its cgroups and shaped link, the job process, the counters it
prints, its job-end report, the paper's analysis of the same trace, and the scores."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.fidelity import machine
from bench.fidelity.scoring import (
    JobResult,
    Measurement,
    MethodResult,
    OperationTruth,
    measured_shares,
    report_vector,
    score_operations,
)

ROOT = Path(__file__).resolve().parents[2]
REPORT = "crystalperf-report.json"
TRACE_NAMES = ("crystalperf-trace.json.gz", "crystalperf-trace.json")


# A Spark disk action's stages that read the file: the one after its shuffle (adding up partial counts) does
# not touch the disk by construction, whatever line it is named after.
_SCANS = ("rdd_lineage", r"FileScanRDD|HadoopRDD")

@dataclass
class JobSpec:
    framework: str
    name: str
    kind: str  # cpu, disk, network, idle, mixed, pyudf
    intended: str | None  # dominant resource by construction (None: mixed, the measurement decides)
    params: dict[str, Any] = field(default_factory=dict)
    slots: int = 2
    data: dict[str, int] = field(default_factory=dict)  # text files the job reads: name -> MB
    read_bps: int | None = None  # the disk throttle on the data's device
    link_mbit: int | None = None  # a shaped link to the data server
    operations: list[OperationTruth] = field(default_factory=list)  # truths known before the run
    op_kinds: tuple[str, ...] = ()  # the report's operation kinds that are scored
    timeout_s: int = 300
    warm: bool = False  # the data files read into the page cache before the job (else evicted from it)

    @property
    def waits(self) -> bool:
        return self.kind == "idle"


def ensure_text(path: Path, megabytes: int) -> Path:
    """A text file of ``megabytes`` MB in 100-character lines, written once."""
    size = megabytes * 1_000_000
    if path.exists() and path.stat().st_size == size:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        written = 0
        while written < size:
            block = b"".join(os.urandom(50).hex().encode() + b"\n" for _ in range(10_000))[: size - written]
            f.write(block)
            written += len(block)
    tmp.replace(path)
    return path


def _find_trace(out: Path) -> Path | None:
    return next((out / n for n in TRACE_NAMES if (out / n).exists()), None)


def _wait_for(path: Path, seconds: float, alive: Callable[[], bool] = lambda: True) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size > 0:
            time.sleep(0.5)  # a writer that just created it
            return True
        time.sleep(0.5)
    return path.exists()


def _method_from_report(path: Path, spec: JobSpec, truths: list[OperationTruth]) -> MethodResult:
    report = json.loads(path.read_text())
    return MethodResult(
        verdict=(report.get("bottleneck") or {}).get("resource"),
        vector=report_vector(report),
        operations=score_operations(report.get("operations", []), truths, spec.op_kinds),
        report=str(path),
    )


def run_job(spec: JobSpec, python: str, data_dir: Path, out_root: Path, log: Callable[[str], None] = print,
            env: dict[str, str] | None = None) -> JobResult:
    result = JobResult(spec.framework, spec.name, spec.kind, spec.intended)
    out = out_root / spec.framework / spec.name
    if out.exists():
        for old in out.iterdir():
            if old.is_file():
                old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    files = [ensure_text(data_dir / f"{name}.txt", mb) for name, mb in spec.data.items()]
    config: dict[str, Any] = {"job": spec.kind, "name": spec.name, "out": str(out), "params": spec.params,
                              "files": [str(f) for f in files], "data_dir": str(data_dir)}
    environment = dict(os.environ, **(env or {}))
    # PySpark's workers import the job's functions from the bench package
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (environment.get("PYTHONPATH"), str(ROOT)) if p)
    environment["PYSPARK_PYTHON"] = python
    data_dir.mkdir(parents=True, exist_ok=True)
    device = machine.block_device(data_dir)
    started = time.monotonic()
    stdout = ""
    try:
        with machine.cgroups(device, spec.read_bps) as groups:
            config["cgroups"] = groups.as_config()
            link_ctx = machine.shaped_link(spec.link_mbit) if spec.link_mbit else None
            link = link_ctx.__enter__() if link_ctx else None
            try:
                if link is not None:
                    config["url"], config["host_if"] = link.url, link.host_if
                (machine.warm if spec.warm else machine.evict)(files)
                module = f"bench.fidelity.{spec.framework}_jobs"
                proc = subprocess.run(groups.command([python, "-m", module, json.dumps(config)]), cwd=ROOT,
                                      env=environment, capture_output=True, text=True, timeout=spec.timeout_s)
                stdout = proc.stdout
                (out / "job.log").write_text(proc.stdout + "\n---- stderr ----\n" + proc.stderr)
                if proc.returncode != 0:
                    raise RuntimeError(f"exit {proc.returncode}: {proc.stderr.strip()[-600:]}")
                # a hook may write the report from a background finisher: wait for it inside the cgroups,
                # so the groups go only once it is done
                _wait_for(out / REPORT, 90)
            finally:
                if link_ctx is not None:
                    link_ctx.__exit__(None, None, None)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        result.error = str(exc)
        log(f"[{spec.framework}/{spec.name}] failed: {result.error}")
        return result
    window = next((json.loads(x.split(" ", 1)[1]) for x in stdout.splitlines() if x.startswith("FIDELITY ")), None)
    if window is None:
        result.error = "the job printed no FIDELITY line"
        return result
    truths = list(spec.operations) + [OperationTruth(_escape(loc), res, _SCANS if res == "disk" else None)
                                      for res, loc in (x.split()[1:3] for x in stdout.splitlines()
                                                       if x.startswith("OPERATION "))]
    measurement = Measurement(wall_s=window["wall_s"], slots=int(window.get("slots", spec.slots)),
                              cpu_s=window.get("cpu_s", 0.0), read_bytes=window.get("read_bytes", 0.0),
                              read_bps=spec.read_bps, rx_bytes=window.get("rx_bytes", 0.0),
                              link_bps=spec.link_mbit * 1_000_000 / 8 if spec.link_mbit else None,
                              waits=spec.waits)
    result.measurement = {**window, "read_bps": spec.read_bps, "link_mbit": spec.link_mbit,
                          "job_s": round(time.monotonic() - started, 1)}
    result.shares = measured_shares(measurement)
    parts = sorted(p for p in out.glob("crystalperf-flink-*.json") if "-plan-" not in p.name)
    if not (out / REPORT).exists() and parts:
        # the reporter's finisher did not run (or failed): finish the job by hand, as docs/flink.md says
        done = subprocess.run([python, "-m", "crystalperf.integrations.flink.finish", str(parts[0]), "--out",
                               str(out)], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600)
        result.notes.append("no job-end report: finished by hand with crystalperf.integrations.flink.finish"
                            + ("" if done.returncode == 0 else f" (exit {done.returncode})"))
        log(f"[{spec.framework}/{spec.name}] {result.notes[-1]}")
    trace = _find_trace(out)
    result.trace = str(trace) if trace else None
    if (out / REPORT).exists():
        result.methods["crystalperf"] = _method_from_report(out / REPORT, spec, truths)
    elif trace is not None:
        result.methods["crystalperf"] = _reanalyse(python, trace, out / "default-report.json", "default", spec,
                                                   truths, environment)
        result.notes.append("no job-end report: the trace analysed again instead")
        log(f"[{spec.framework}/{spec.name}] {result.notes[-1]}")
    else:
        result.methods["crystalperf"] = MethodResult(error="no report and no trace written")
    if trace is not None:
        result.methods["paper"] = _reanalyse(python, trace, out / "paper-report.json", "paper", spec, truths,
                                             environment)
    (out / "fidelity-result.json").write_text(json.dumps(_as_dict(result), indent=1, default=str))
    return result


def _escape(text: str) -> str:
    import re

    # the stage name ends with the action's line: "...spark_jobs.py:42" must not match ":420"
    return re.escape(text) + r"(?!\d)"


def _reanalyse(python: str, trace: Path, out: Path, attribution: str, spec: JobSpec,
               truths: list[OperationTruth], env: dict[str, str]) -> MethodResult:
    proc = subprocess.run([python, "-m", "bench.fidelity.reanalyse", str(trace), str(out),
                           "--attribution", attribution], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        return MethodResult(error=proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed")
    return _method_from_report(out, spec, truths)


def _as_dict(result: JobResult) -> dict[str, Any]:
    from dataclasses import asdict

    data = asdict(result)
    data["truth"], data["confirmed"] = result.truth, result.confirmed
    return data


def load_trace_json(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        return dict(json.load(f))
