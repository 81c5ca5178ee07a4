"""bench.cluster's CPU pinning: hosts of a one-machine cluster get CPUs of their own."""

from __future__ import annotations

import os

import pytest

from bench.cluster import host_cpus, pinned


def test_each_host_gets_cpus_of_its_own(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 5})
    assert host_cpus(2, 1) == ["0", "1"]
    assert host_cpus(2, 2) == ["0,1", "2,3"]
    with pytest.raises(ValueError, match="need 6 CPUs; this process may use 5"):
        host_cpus(3, 2)


def test_pinned_wraps_the_command_in_taskset():
    assert pinned(["java", "-version"], "1") == ["taskset", "-c", "1", "java", "-version"]
    assert pinned(["java"], None) == ["java"]
