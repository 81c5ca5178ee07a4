"""The what-if benchmark's shaped-link harness (``bench.whatif.shaped``) and its "up" cases' listing.

The harness tests start real namespaces, veth pairs and tc qdiscs: they need root and iproute2, and skip
with the reason where the machine has neither. They check behaviour (bytes served, everything removed),
never the rate reached.
"""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest

from bench.whatif import shaped


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.split()}


def _links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False).stdout


@pytest.fixture(scope="module")
def can_shape() -> None:
    reason = shaped.unavailable()
    if reason:
        pytest.skip(f"no shaped link on this machine: {reason}")


def test_serves_the_asked_bytes_and_removes_everything_on_exit(can_shape: None) -> None:
    with shaped.ShapedServer(rate_mbit=200, prefix="cpt") as server:
        assert server.namespace in _netns() and server.host_if in _links()
        with urllib.request.urlopen(server.url(300_000), timeout=30) as response:
            assert len(response.read()) == 300_000
        server.set_rate(400)
        with urllib.request.urlopen(server.url(1), timeout=30) as response:
            assert response.read() == b"\0"
    assert server.namespace not in _netns() and server.host_if not in _links()
    with pytest.raises(RuntimeError):
        server.url(10)


def test_a_failure_half_way_through_set_up_leaves_nothing(can_shape: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(self: shaped.ShapedServer, verb: str) -> None:
        raise RuntimeError("tc refused")

    monkeypatch.setattr(shaped.ShapedServer, "_shape", fail)
    server = shaped.ShapedServer(rate_mbit=40, prefix="cpt")
    with pytest.raises(RuntimeError, match="tc refused"):
        server.start()
    assert server.namespace not in _netns() and server.host_if not in _links()


def test_a_namespace_left_by_a_killed_process_is_removed_by_the_next_server(can_shape: None) -> None:
    stale = "cpt4194303n7"  # the largest pid Linux allows: no live process has it, in practice
    if Path("/proc/4194303").exists():
        pytest.skip("a process has pid 4194303")
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        with shaped.ShapedServer(rate_mbit=40, prefix="cpt"):
            assert stale not in _netns()
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True, check=False)


def test_rejects_names_that_would_not_fit_an_interface() -> None:
    with pytest.raises(ValueError):
        shaped.ShapedServer(rate_mbit=40, prefix="toolong")
    with pytest.raises(ValueError):
        shaped.ShapedServer(rate_mbit=0)


def test_spark_up_cases_are_marked_up_and_say_why_they_cannot_run(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.whatif import spark

    monkeypatch.setattr(spark, "spark_python", lambda: None)
    workloads = spark.up_workloads(tmp_path, quick=False)
    targets = [t for w in workloads for t in w.targets(False)]
    assert {t.kind for t in targets} == {"disk-up", "network-up", "cores-up"}
    assert {tuple(t.changes) for t in targets} == {("disk=20MB/s",), ("disk=10MB/s",), ("network=100mbit",), ("cores=2",),
                                                  ("network=200mbit",), ("network=1000mbit",)}
    assert all("not installed" in (t.unavailable() or "") for t in targets)
    assert spark.up_workloads(tmp_path, quick=True) == []
    # the cold start joins its limit before the JVM starts
    cold = next(w for w in workloads if w.name == "scan-cold-up")
    assert cold.baseline["cold_start"] and cold.baseline["read_bps"] == 5_000_000
    # each traces the slower configuration: the target is the faster one
    by_kind = {t.kind: (w, t) for w in workloads for t in w.targets(False)}
    w, t = by_kind["disk-up"]
    assert w.baseline["read_bps"] < t.config["read_bps"]
    w, t = by_kind["network-up"]
    assert w.baseline["rate_mbit"] < t.config["rate_mbit"]
