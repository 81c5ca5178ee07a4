"""bench.cluster's relayed links: two TAP devices joined by bench/cluster/taprelay.c, for a delay where the kernel
has no netem. Real namespaces and devices: root, iproute2, /dev/net/tun and a C compiler, else skipped with the
reason. The checks are behaviour (bytes intact, a round trip at least the delay asked, nothing left), never a
rate or an upper bound on a time."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from bench.cluster import Link, Network, leftovers, relay_available, unavailable

ECHO = textwrap.dedent('''
    import hashlib, socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], 5003))
    s.listen()
    while True:
        c, _ = s.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        digest, got = hashlib.sha256(), b""
        while (data := c.recv(1 << 16)):
            got = (got + data)[-1:]
            if data.endswith(b"?"):
                c.sendall(b"!")
            elif data.endswith(b"#"):
                digest.update(data[:-1]); c.sendall(digest.hexdigest().encode()); digest = hashlib.sha256()
            else:
                digest.update(data)
''')
CLIENT = textwrap.dedent('''
    import hashlib, os, socket, sys, time
    for _ in range(100):
        try:
            s = socket.create_connection((sys.argv[1], 5003)); break
        except OSError:
            time.sleep(0.1)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(5):
        t = time.perf_counter(); s.sendall(b"?"); s.recv(1); rtts.append(time.perf_counter() - t)
    payload = os.urandom(2_000_000).replace(b"?", b"x").replace(b"#", b"y")
    s.sendall(payload + b"#")
    answer = b""
    while len(answer) < 64:
        answer += s.recv(64)
    print(min(rtts), answer.decode() == hashlib.sha256(payload).hexdigest())
''')


@pytest.fixture(scope="module")
def can_relay() -> None:
    reason = unavailable() or relay_available()
    if reason:
        pytest.skip(f"no relayed links on this machine: {reason}")


def _round_trip(net: Network) -> tuple[float, bool]:
    a, b = net.hosts
    assert a.namespace is not None
    done = subprocess.run(["ip", "netns", "exec", a.namespace, sys.executable, "-c", CLIENT, b.address],
                          capture_output=True, text=True, timeout=120, check=True)
    rtt, intact = done.stdout.split()
    return float(rtt), intact == "True"


def test_a_relayed_link_delays_what_a_host_receives_and_leaves_nothing(can_relay: None) -> None:
    with Network(["a", "b"], link=Link(rate_mbit=200, delay_ms=5), relay=True) as net:
        net.popen([sys.executable, "-c", ECHO, net.hosts[1].address], host=net.hosts[1])
        rtt, intact = _round_trip(net)
        # a round trip between two hosts crosses both links, each holding back what its host receives
        assert rtt >= 0.010 and intact, rtt
        net.set_delay(25)
        assert [h.link for h in net.hosts] == [Link(200, 25.0)] * 2
        rtt, intact = _round_trip(net)
        assert rtt >= 0.050 and intact, rtt
        relays = dict(net._relays)
        prefix = net.prefix
        assert any(p.startswith("process") for p in leftovers(prefix))  # the relays are counted as the network's
        assert net.processes() and all("taprelay" not in cmd for cmd in net.processes().values())
    assert leftovers(prefix) == []
    assert all(proc.poll() is not None for proc in relays.values())


def test_jitter_and_unrelayed_delay_changes_are_refused_in_one_line(can_relay: None) -> None:
    with pytest.raises(ValueError, match="not jitter"):
        Network(["a"], link=Link(delay_ms=5, jitter_ms=1), relay=True)
    with Network(["a"], link=Link(rate_mbit=100), relay=False) as net:
        with pytest.raises(RuntimeError, match="relayed links"):
            net.set_delay(5)
