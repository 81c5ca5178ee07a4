"""Measure the per-buffer overheads of the I/O model (paper Algorithm 2) on this machine.

``o`` is the fixed cost of handling one buffer, apart from moving its bytes: measured with buffers
so small that their bytes cost nothing (a 1-byte ping-pong over a loopback socket pair for the
network, 1-byte preads of a cached file for the disk), as the syscall plus wake-up cost a framework
pays per buffer. Prints the figures (median of 3 runs); asserts nothing.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time

CALLS = 20_000


def network_overhead() -> float:
    """Seconds per buffer: a 1-byte ping-pong over loopback, per send/recv pair and wake-up."""
    a, b = socket.socketpair()

    def echo() -> None:
        for _ in range(CALLS):
            a.sendall(a.recv(1))

    thread = threading.Thread(target=echo)
    thread.start()
    t = time.perf_counter()
    for _ in range(CALLS):
        b.sendall(b"x")
        b.recv(1)
    elapsed = time.perf_counter() - t
    thread.join()
    a.close()
    b.close()
    return elapsed / CALLS / 2  # each round trip carries two buffers


def disk_overhead() -> float:
    """Seconds per read() of a cached file when the bytes cost nothing: 1-byte preads."""
    with tempfile.NamedTemporaryFile() as fh:
        fh.write(os.urandom(1 << 17))
        fh.flush()
        fd = fh.fileno()
        t = time.perf_counter()
        for i in range(CALLS):
            os.pread(fd, 1, i % (1 << 17))
        return (time.perf_counter() - t) / CALLS


def main() -> None:
    net = sorted(network_overhead() for _ in range(3))
    disk = sorted(disk_overhead() for _ in range(3))
    print(json.dumps({
        "network_overhead_us": round(net[1] * 1e6, 2),
        "disk_overhead_us": round(disk[1] * 1e6, 2),
        "runs": 3,
        "calls_per_run": CALLS,
    }, indent=2))


if __name__ == "__main__":
    main()
