"""python -m bench.cluster [RATE_MBIT]: whether this machine can build the harness's networks, and the rate one
host reaches sending to another over links of RATE_MBIT (default 50)."""

from __future__ import annotations

import sys
import textwrap
import time

from .netns import Link, Network, leftovers, netem_available, unavailable

RECEIVER = textwrap.dedent('''
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], 5001))
    s.listen(); c, _ = s.accept()
    while c.recv(1 << 20):
        pass
''')
SENDER = textwrap.dedent('''
    import socket, sys, time
    for _ in range(100):
        try:
            s = socket.create_connection((sys.argv[1], 5001)); break
        except OSError:
            time.sleep(0.1)
    s.sendall(bytes(int(sys.argv[2]))); s.close()
''')


def main() -> int:
    reason = unavailable()
    if reason:
        print(f"unavailable: {reason}")
        return 1
    rate = float(sys.argv[1]) if len(sys.argv) > 1 else 50.0
    print(f"netem (delay/jitter): {'available' if netem_available() else 'missing (sch_netem)'}")
    size = int(rate * 1e6 / 8 * 3)  # about 3 s at the rate
    with Network(["a", "b"], link=Link(rate_mbit=rate)) as net:
        receiver = net.popen([sys.executable, "-c", RECEIVER, net.hosts[1].address], host=net.hosts[1])
        started = time.perf_counter()
        sender = net.popen([sys.executable, "-c", SENDER, net.hosts[1].address, str(size)], host=net.hosts[0])
        sender.wait(timeout=120)
        receiver.wait(timeout=30)
        elapsed = time.perf_counter() - started
        print(f"{net.links()}: {size * 8 / elapsed / 1e6:.1f} Mbit/s from {net.hosts[0].address} to "
              f"{net.hosts[1].address}")
        prefix = net.prefix
    left = leftovers(prefix)
    print("left after exit:", left or "nothing")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
