"""PyFlink's SQL calls keep working while another thread frees py4j Java objects (``configure()`` sends those
deletes over a connection of their own, see ``crystalperf.integrations.flink.gateway``)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from .test_python_workers import _WORKER_ENVIRONMENT

# A thread collecting garbage all the time stands for any thread that allocates (our samplers do): Java objects
# that only a reference cycle of the job's thread holds die there. A tiny switch interval lets that thread run
# between two of the job's calls, where a delete borrows the job's connection. Without the isolation, the job's
# next call gets a new connection whose Java thread never created a TableEnvironment, and every explain after
# that fails with "NullPointerException: metadataHandlerProvider" (100 of 100 here).
COLLECTED_ELSEWHERE_JOB = """
import gc, sys, threading, time
from pyflink.common import Configuration
from pyflink.java_gateway import get_gateway
from pyflink.table import EnvironmentSettings, ExplainDetail, TableEnvironment
from crystalperf.integrations import flink as cpflink

config = cpflink.configure(Configuration(), analyze=False)
sys.setswitchinterval(1e-6)
stop = threading.Event()

def collect():
    while not stop.is_set():
        gc.collect(0)
        time.sleep(0.0002)

threading.Thread(target=collect, daemon=True).start()
env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(config).build())
env.execute_sql("CREATE TABLE ids (id BIGINT) WITH ('connector'='datagen', 'number-of-rows'='5')")
env.execute_sql("CREATE TABLE snk (n BIGINT) WITH ('connector'='blackhole')")

class Cycle:
    pass

failed = []
for i in range(40):
    for _ in range(20):
        cycle = Cycle()
        cycle.me = cycle
        cycle.java = env.get_config().get_configuration()
    del cycle
    try:
        env.explain_sql(f"INSERT INTO snk SELECT id * {i} FROM ids WHERE id > 1", ExplainDetail.JSON_EXECUTION_PLAN)
    except Exception as exc:
        failed.append(str(exc).splitlines()[1] if len(str(exc).splitlines()) > 1 else str(exc))
stop.set()
gc.collect()
time.sleep(0.5)
bindings = get_gateway().java_gateway_server.getGateway().getBindings().size()
print("FAILED", len(failed), failed[:1])
print("BINDINGS", bindings)
"""


def test_sql_calls_survive_java_objects_freed_on_another_thread(tmp_path: Path) -> None:
    pytest.importorskip("pyflink")
    env = {k: v for k, v in os.environ.items() if k not in _WORKER_ENVIRONMENT}
    done = subprocess.run([sys.executable, "-c", COLLECTED_ELSEWHERE_JOB], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("FAILED", "BINDINGS")))
    assert lines["FAILED"].startswith("0 "), lines["FAILED"]
    # the deletes still reach Java: 800 configuration objects were freed, a handful of bindings stay
    assert int(lines["BINDINGS"]) < 100, lines["BINDINGS"]


class _Connection:
    def __init__(self, sent: list[str], during_send: Any = None) -> None:
        self.sent = sent
        self.during_send = during_send

    def send_command(self, command: str) -> str:
        self.sent.append(command.split("\n")[2])
        if self.during_send is not None:
            hook, self.during_send = self.during_send, None
            hook()
        return "yv"

    def close(self) -> None:
        pass


def test_a_delete_freed_during_a_delete_is_sent_after_it_not_into_it() -> None:
    pytest.importorskip("py4j")
    import py4j.java_gateway as gateway

    from crystalperf.integrations.flink.gateway import _DeleteChannel

    channel = _DeleteChannel()
    sent: list[str] = []
    client = gateway.GatewayClient.__new__(gateway.GatewayClient)
    client.is_connected = True
    # the collector runs a finaliser in the middle of the first send: that delete waits for the channel
    client._create_connection = lambda: _Connection(sent, lambda: channel.delete(client, "o2"))
    done = threading.Event()
    worker = threading.Thread(target=lambda: (channel.delete(client, "o1"), done.set()))
    worker.start()
    worker.join(timeout=10)
    assert done.is_set()
    assert sent == ["o1", "o2"]
