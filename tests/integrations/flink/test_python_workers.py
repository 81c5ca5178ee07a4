"""PyFlink's Python functions on a local mini cluster run in loopback workers, threads of the job's own Python
process, which ``configure()`` samples: a Python UDF reading from a slow HTTP server (in another process) is
network-bound through the workers' samples, not waiting on them; a Python UDF looping in Python is CPU-bound.
The Java operator's waits for its worker are dropped, and no top function is plumbing. In thread mode the
functions run on the task threads, sampled by the sampler the reporter starts in the embedded interpreter: the
same answers, without pemja's call in their place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from crystalperf.core import trace as t
from crystalperf.integrations import flink as cpflink
from crystalperf.integrations.flink.assemble import EMBEDDED_PYTHON_WARNING, PYTHON_WORKERS_WARNING
from crystalperf.integrations.flink.pyworkers import WORKER_ROLE

from .reports import plumbing_top_functions

# Answers every GET with 24 blocks of 8 KB, 0.08 s apart (about 2 s a request): the client mostly waits in recv.
TRICKLE_SERVER = """
import http.server, sys, time
class Trickle(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(24 * 8192))
        self.end_headers()
        for _ in range(24):
            self.wfile.write(b"x" * 8192)
            self.wfile.flush()
            time.sleep(0.08)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Trickle)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def _host_address() -> str | None:
    """This host's address on its network interface. The server listens there so that the UDF's socket has a
    peer that is not loopback: crystalperf counts a loopback socket as waiting for another local process."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: a UDP connect picks the route and sends nothing
            address = str(probe.getsockname()[0])
    except OSError:
        return None
    return None if address.startswith("127.") else address


def _pull(url: str) -> int:
    import urllib.request

    total = 0
    with urllib.request.urlopen(url) as answer:
        while block := answer.read(4096):
            total += len(block)
    return total


# About 0.6 s a row on a 2-core VM: eight rows outlast the worker's start-up (Java waiting for the harness, which is
# nobody's sampled work), so the operator's time is mostly the loop's even on a slow machine.
def _spin(i: int) -> int:
    total = 0
    for n in range(10_000_000):
        total = (total * 31 + n + i) % 1_000_003
    return total


def _run(out: Path, function: Any, rows: int, mode: str = "process") -> None:
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment
    from pyflink.table.udf import udf

    config = cpflink.configure(Configuration(), out)
    config.set_string("parallelism.default", "1")
    config.set_string("python.executable", sys.executable)
    config.set_string("python.execution-mode", mode)
    if mode == "thread":
        import sysconfig

        # the embedded interpreter starts from the base installation's paths, not this environment's
        config.set_string("python.pythonpath", sysconfig.get_paths()["purelib"])
    env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode()
                                  .with_configuration(config).build())
    env.create_temporary_function("work", udf(function, result_type="BIGINT"))
    env.execute_sql(f"CREATE TABLE ids (id BIGINT) WITH ('connector'='datagen', 'fields.id.kind'='sequence', "
                    f"'fields.id.start'='1', 'fields.id.end'='{rows}')")
    env.execute_sql("CREATE TABLE snk (n BIGINT) WITH ('connector'='blackhole')")
    statement = "INSERT INTO snk SELECT work(id) FROM ids"
    assert cpflink.record_plan(env, out, statement) is not None
    env.execute_sql(statement).wait()


def _report(out: Path, timeout_s: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    log = ""
    while time.monotonic() < deadline:
        log = "".join(p.read_text() for p in out.glob("crystalperf-flink-*.log"))
        if "crystalperf: wrote" in log or "Error" in log:
            break
        time.sleep(0.5)
    report = out / "crystalperf-report.json"
    if not report.exists():
        parts = {p.name: json.loads(p.read_text()).get("complete") for p in out.glob("crystalperf-flink-*.json")
                 if not p.name.startswith("crystalperf-flink-plan")}
        files = sorted(p.name for p in out.iterdir())
        raise AssertionError(f"no report after {timeout_s} s; analysis log: {log!r}; parts (complete?): {parts}; "
                             f"files: {files}")
    return dict(json.loads(report.read_text()))


def _network_job(tmp_path_factory: pytest.TempPathFactory, mode: str) -> Path:
    pytest.importorskip("pyflink")
    address = _host_address()
    if address is None:
        pytest.skip("no network interface but loopback: a socket to 127.0.0.1 is another local process, not network")
    out = tmp_path_factory.mktemp(f"flink-python-network-{mode}")
    server = subprocess.Popen([sys.executable, "-c", TRICKLE_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://{address}:{server.stdout.readline().strip()}/"
        _run(out, lambda i: _pull(url), rows=6, mode=mode)
    finally:
        server.kill()
        server.wait(timeout=10)
    return out


@pytest.fixture(scope="module", params=["process", "thread"])
def network_job(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _network_job(tmp_path_factory, request.param)


@pytest.fixture(scope="module")
def cpu_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pyflink")
    out = tmp_path_factory.mktemp("flink-python-cpu")
    _run(out, _spin, rows=8)
    return out


@pytest.fixture(scope="module")
def thread_mode_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pyflink")
    out = tmp_path_factory.mktemp("flink-python-thread-mode")
    _run(out, _spin, rows=8, mode="thread")
    return out


def _python_operator(report: dict[str, Any]) -> dict[str, Any]:
    return next(op for op in report["operations"] if op["name"].startswith("PythonCalc"))


def _worker_keys(out: Path) -> set[str]:
    samples = t.load_trace(out / "crystalperf-trace.json.gz").samples
    assert samples is not None
    return {key.operation for key in samples.keys if key.thread == WORKER_ROLE}


def test_a_python_udf_reading_a_slow_server_is_network_bound(network_job: Path) -> None:
    report = _report(network_job)
    trace = t.load_trace(network_job / "crystalperf-trace.json.gz")
    assert PYTHON_WORKERS_WARNING not in trace.warnings
    operator = _python_operator(report)
    # the workers' samples are the Python operator's (and its chain's), with their role
    assert operator["id"] in _worker_keys(network_job)
    vector = operator["vector"]
    assert max(vector, key=vector.get) == "network", vector
    assert plumbing_top_functions(report) == []


def test_a_python_udf_looping_in_python_is_cpu_bound(cpu_job: Path) -> None:
    report = _report(cpu_job)
    operator = _python_operator(report)
    assert operator["id"] in _worker_keys(cpu_job)
    vector = operator["vector"]
    assert max(vector, key=vector.get) == "cpu", (vector, operator.get("measured"), operator["runtime_s"])
    names = [f["name"] for f in operator.get("top_functions") or []]
    assert any(name.endswith("_spin") for name in names), names
    assert plumbing_top_functions(report) == []


def test_a_python_udf_run_in_the_task_thread_is_sampled_in_the_embedded_interpreter(thread_mode_job: Path) -> None:
    """Thread mode: the reporter starts the sampler inside the interpreter pemja embeds in the TaskManager, and
    the operator's time is the Python function's, not pemja's call."""
    report = _report(thread_mode_job)
    warnings = report.get("warnings") or []
    assert EMBEDDED_PYTHON_WARNING not in warnings and PYTHON_WORKERS_WARNING not in warnings
    assert list(thread_mode_job.glob("crystalperf-pyflink-workers.embedded-*.json"))
    operator = _python_operator(report)
    assert operator["id"] in _worker_keys(thread_mode_job)
    vector = operator["vector"]
    assert max(vector, key=vector.get) == "cpu", (vector, operator["runtime_s"])
    names = [f["name"] for f in operator.get("top_functions") or []]
    assert any(name.endswith("_spin") for name in names), names
    assert not any(name.startswith("pemja.") for name in names), names
    assert plumbing_top_functions(report) == []


# A loopback job whose worker sampler samples every millisecond instead of every 100 ms, while the Beam
# harness's gRPC threads start, run bundles and end: the job and the sampler must both come through whole.
# (bench/frame_walk_stress.py is the sharper probe of why current_stacks pauses the collector: it walks 5,000
# times a second, and the f_back walk with the collector running read garbage in 2 of 5 such jobs.)
# A DataStream job: the SQL planner's thread-local and py4j's connection pool have their own test
# (test_gateway.py).
FAST_SAMPLING_JOB = """
import logging, sys
from pathlib import Path
from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from crystalperf.integrations import flink as cpflink
from crystalperf.integrations.flink.pyworkers import start_worker_sampler

logging.basicConfig(level=logging.WARNING)

def steps(i):
    for k in range(3):
        yield (k * 31 + i) % 7

def work(i):
    return sum(steps(i)) + sorted(range(50), key=lambda x: -x)[0]

out = Path(sys.argv[1])
sampler = start_worker_sampler(out, interval_s=0.001)
SAMPLES, MAX_JOBS = 1000, 4
config = cpflink.configure(Configuration(), out, analyze=False)
config.set_string("parallelism.default", "1")
config.set_string("python.executable", sys.executable)
env = StreamExecutionEnvironment.get_execution_environment(config)
# jobs until the sampler has sampled a thousand times (one took 0.85-1.1 thousand samples here): how many
# samples a job's length allows is the machine's speed, not the behaviour under test
for _ in range(MAX_JOBS):
    numbers = env.from_source(NumberSequenceSource(1, 200000), WatermarkStrategy.no_watermarks(), "numbers")
    numbers.map(work, output_type=Types.LONG()).filter(lambda n: n < 0).print()
    env.execute("crystalperf-fast-sampling")
    if sampler.samples_taken >= SAMPLES:
        break
print("SAMPLES", sampler.samples_taken, flush=True)
"""


_WORKER_ENVIRONMENT = {"PYFLINK_GATEWAY_DISABLED", "PYFLINK_GATEWAY_PORT", "_PYFLINK_CONN_INFO_PATH", "WORKER_ID",
                       "PIPELINE_OPTIONS", "SEMI_PERSISTENT_DIRECTORY", "LOGGING_API_SERVICE_DESCRIPTOR",
                       "CONTROL_API_SERVICE_DESCRIPTOR", "PYTHON_LOOPBACK_SERVER_ADDRESS"}


def test_sampling_every_millisecond_never_breaks_the_job(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    from crystalperf.integrations.flink.pyworkers import load_spool, spool_files

    # a loopback job earlier in this process left PyFlink's worker variables in its environment; the job's
    # process is a program of its own, not a worker of that job
    env = {k: v for k, v in os.environ.items() if k not in _WORKER_ENVIRONMENT}
    # the hook's CPU budget would stretch a 1 ms interval (that is its job); this test wants the ms sampling itself
    env["CRYSTALPERF_CPU_BUDGET"] = "0"
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", FAST_SAMPLING_JOB, str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "sampler stopped" not in done.stderr, done.stderr[-4000:]
    taken = int(done.stdout.split("SAMPLES")[-1])
    assert taken >= 1000
    loaded = [load_spool(path) for path in spool_files(tmp_path)]
    samples = [part[0] for part in loaded if part is not None]
    assert samples and any(key.thread == WORKER_ROLE for part in samples for key in part.keys)
