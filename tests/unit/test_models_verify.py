"""The verified subset's measurement: strace logs cut at markers into per-function resource shares."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crystalperf.models.verify import categorize, parse_strace

LOG = """\
100 1.000000 newfstatat(AT_FDCWD</w>, "/crystalperf-mark/B/7/0/m.save", 0x7ffd, 0) = -1 ENOENT (No such file or directory) <0.000010>
100 1.000100 openat(AT_FDCWD</w>, "/tmp/x.bin", O_WRONLY|O_CREAT, 0666) = 3</tmp/x.bin> <0.000050>
100 1.000200 write(3</tmp/x.bin>, "abc"..., 1048576) = 1048576 <0.008000>
100 1.000300 futex(0x7f, FUTEX_WAIT_PRIVATE, 0, NULL <unfinished ...>
200 1.000310 recvfrom(5<TCP:[127.0.0.1:80->127.0.0.1:5000]>, <unfinished ...>
100 1.000400 <... futex resumed>) = 0 <0.000900>
200 1.020000 <... recvfrom resumed>"x", 65536, 0, NULL, NULL) = 1 <0.019000>
100 1.010000 newfstatat(AT_FDCWD</w>, "/crystalperf-mark/E/7/1000/m.save", 0x7ffd, 0) = -1 ENOENT (No such file or directory) <0.000010>
"""


def test_parse_cuts_per_thread_intervals_and_categorizes_syscalls() -> None:
    measured = parse_strace(LOG.splitlines())
    m = measured["m.save"]
    assert m.calls == 1
    assert m.wall == pytest.approx(0.01)
    assert m.disk == pytest.approx(0.00805)
    assert m.network == 0.0  # the recv happened on another thread
    assert m.wait == pytest.approx(0.0009)
    assert m.cpu == pytest.approx(0.001)
    assert m.label() == "disk"


def test_categories() -> None:
    assert categorize("sendto", "sendto(4<TCP:[1->2]>, ...)") == "network"
    assert categorize("poll", "poll([{fd=4<TCPv6:[1->2]>, events=POLLIN}], 1, 100)") == "network"
    assert categorize("read", "read(3</data/x.csv>, ...)") == "disk"
    assert categorize("read", "read(3</usr/lib/python3.11/json/__init__.py>, ...)") == "cpu"
    assert categorize("futex", "futex(0x1, FUTEX_WAKE)") == "wait"
    assert categorize("mmap", "mmap(NULL, 4096, ...)") == "cpu"


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")
def test_real_strace_run_tells_file_writes_from_computation(tmp_path: Path) -> None:
    module = tmp_path / "cpverify_target.py"
    module.write_text(
        textwrap.dedent(
            """
            import os

            def write_file(path):
                with open(path, "wb") as fh:
                    for _ in range(64):
                        fh.write(os.urandom(1 << 16))
                        fh.flush()
                        os.fsync(fh.fileno())

            def checksum(n):
                total = 0
                for i in range(n):
                    total = (total * 31 + i) % 65521
                return total
            """
        )
    )
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import cpverify_target
        from crystalperf.models import verify_workloads as w
        cpverify_target.write_file = w._wrap(cpverify_target.write_file, "cpverify_target.write_file")
        cpverify_target.checksum = w._wrap(cpverify_target.checksum, "cpverify_target.checksum")
        cpverify_target.write_file({str(tmp_path / "out.bin")!r})
        cpverify_target.checksum(300000)
        """
    )
    log = tmp_path / "strace.log"
    subprocess.run(
        ["strace", "-f", "-ttt", "-T", "-yy", "-s", "120", "-o", str(log), sys.executable, "-c", script],
        check=True,
        timeout=120,
    )
    measured = parse_strace(log.read_text().splitlines())
    assert measured["cpverify_target.checksum"].label() == "cpu"
    assert measured["cpverify_target.write_file"].disk > 0
    assert (
        measured["cpverify_target.write_file"].shares()["disk"]
        > measured["cpverify_target.checksum"].shares()["disk"]
    )
