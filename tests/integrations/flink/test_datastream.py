"""A real PyFlink DataStream job (source -> map -> key_by -> window -> sink) with the reporter configured."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from crystalperf.integrations import flink as cpflink
from crystalperf.integrations.flink.assemble import PYTHON_WORKERS_WARNING

from .reports import plumbing_top_functions


@pytest.fixture(scope="module")
def datastream_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pyflink")
    from pyflink.common import Configuration, Types
    from pyflink.datastream import StreamExecutionEnvironment

    out = tmp_path_factory.mktemp("flink-datastream")
    config = cpflink.configure(Configuration(), out)
    config.set_string("python.executable", sys.executable)
    config.set_string("parallelism.default", "1")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    pair = Types.TUPLE([Types.INT(), Types.INT()])
    numbers = env.from_collection([(i % 10, i) for i in range(5000)], type_info=pair)
    doubled = numbers.map(lambda r: (r[0], r[1] * 2), output_type=pair).name("double")
    windowed = doubled.key_by(lambda r: r[0]).count_window(100).reduce(lambda a, b: (a[0], a[1] + b[1]))
    windowed.name("sum100").print().name("out")
    assert cpflink.record_plan(env, out) is not None
    env.execute("crystalperf-datastream")
    return out


def test_operators_and_edges_come_from_the_plan(datastream_job: Path) -> None:
    files = cpflink.wait_for_metrics(datastream_job)
    assert len(files) == 1
    trace = cpflink.read_metrics(files[0])
    assert trace.application.name == "crystalperf-datastream"
    chains = {op.id: op for op in trace.operations}
    operators = {c.name: (op.id, c) for op in trace.operations for c in op.children}
    # PyFlink fuses the Python map with the key selector into one operator (hence the comma)
    assert set(operators) == {
        "Source: Collection Source",
        "double, _stream_key_by_map_operator",
        "sum100",
        "Sink: out",
    }
    source_chain = operators["Source: Collection Source"][0]
    window_chain = operators["sum100"][0]
    assert source_chain != window_chain  # key_by shuffles: two chains
    assert operators["double, _stream_key_by_map_operator"][0] == source_chain
    assert operators["Sink: out"][0] == window_chain
    assert chains[window_chain].parents == [source_chain]
    assert chains[source_chain].parents == []
    assert "HASH" in chains[window_chain].attributes["ship_strategy"]
    # inside a chain, operators follow the plan's order and edges
    assert operators["Sink: out"][1].parents == [operators["sum100"][1].id]
    assert operators["double, _stream_key_by_map_operator"][1].parents == [
        operators["Source: Collection Source"][1].id
    ]
    assert not any("assumed linear" in w for w in trace.warnings)
    # the Python map and reduce run in PyFlink's loopback workers, threads of this process: their samples carry
    # the role python-worker, shared by the two Python chains by when each one's task thread was in its Python
    # operator; or (the sampler did not catch them) the trace says the workers' time is not shown
    worker_keys = {key.operation for key in trace.samples.keys if key.thread == "python-worker"} if trace.samples else set()
    assert bool(worker_keys) != (PYTHON_WORKERS_WARNING in trace.warnings)
    assert worker_keys <= {source_chain, window_chain, operators["double, _stream_key_by_map_operator"][1].id,
                           operators["sum100"][1].id}
    assert operators["Source: Collection Source"][1].metrics["records_out"] == 5000
    assert operators["sum100"][1].metrics["records_out"] == 50
    # chained operators share their chain's thread: their busy times split the chain's
    for chain in trace.operations:
        busy = max(t.metrics["run_time_s"] for t in chain.tasks)
        assert sum(c.metrics["run_time_s"] for c in chain.children) == pytest.approx(busy)


def _analysis_log(out: Path, timeout_s: float = 180) -> str:
    """The log of the analysis the reporter started, once it says it is done (or the timeout passed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        log = "".join(p.read_text() for p in out.glob("crystalperf-flink-*.log"))
        if "crystalperf: wrote" in log or "Error" in log or time.monotonic() >= deadline:
            return log
        time.sleep(0.5)


def test_the_reporter_writes_the_report_when_the_job_ends(datastream_job: Path) -> None:
    # Nobody calls finish(): the reporter started `python -m crystalperf.integrations.flink.finish` at job end.
    log = _analysis_log(datastream_job)
    report_path = datastream_job / "crystalperf-report.json"
    assert report_path.exists(), f"no report; analysis log: {log!r}"
    assert (datastream_job / "crystalperf-report.html").exists()
    report = json.loads(report_path.read_text())
    names = {op["name"] for op in report["operations"]}
    assert any("sum100" in n for n in names) and any("Collection Source" in n for n in names)
    assert report["bottleneck"]["resource"] in {"cpu", "disk", "network", "waiting"}
    assert plumbing_top_functions(report) == []


def test_a_second_analysis_of_the_same_parts_is_skipped(datastream_job: Path) -> None:
    _analysis_log(datastream_job)
    part = cpflink.wait_for_metrics(datastream_job)[0]
    assert cpflink.finish_when_complete(part, timeout_s=5) is None
