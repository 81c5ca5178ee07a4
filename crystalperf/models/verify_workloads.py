"""Workloads that exercise labelled library functions, run under ``strace`` by :mod:`.verify`.

Run as ``python -m crystalperf.models.verify_workloads TARGETS.txt``: a profile hook writes a marker
syscall (a failing ``stat`` of ``/crystalperf-mark/...``) when a target function is entered and left,
so the strace log can be cut into per-call intervals. Network peers are local servers that answer
after a delay, standing in for a remote machine's latency.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

MARK = "/crystalperf-mark"
SERVER_DELAY_S = 0.02
MAX_CALLS_PER_TARGET = 8


WORKLOAD_MODULES = (
    "_pydecimal ast base64 calendar copy difflib fractions heapq html.parser ipaddress json json.encoder "
    "json.decoder pickle pprint random re statistics textwrap tokenize xml.dom.minidom mpmath networkx sympy "
    "http.client http.server socket socketserver urllib.request xmlrpc.client requests requests.sessions "
    "requests.adapters urllib3 urllib3.connectionpool urllib3.connection urllib3.response urllib3.poolmanager "
    "httpx httpcore dbm.dumb filecmp fileinput glob logging logging.handlers mailbox shelve shutil tarfile "
    "tempfile zipfile pathlib os posixpath"
).split()


def install_markers(targets: set[str]) -> int:
    """Wrap each target function (module attribute or class attribute) with enter/leave markers.

    Wrapping only the targets keeps the measurement overhead on those calls; a profile hook would add
    Python work to every call and make everything look CPU-bound.
    """
    import importlib
    import inspect

    for module in WORKLOAD_MODULES:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    wrapped = 0
    for name in sorted(targets):
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            found = sys.modules.get(".".join(parts[:cut]))
            if found is not None:
                break
        else:
            continue
        owner: object = found
        try:
            for attr in parts[cut:-1]:
                owner = getattr(owner, attr)
            raw = vars(owner)[parts[-1]]
        except (AttributeError, KeyError, TypeError):
            continue
        if (
            not inspect.isfunction(raw)
            or getattr(raw, "__crystalperf_marked__", False)
            or inspect.isgeneratorfunction(raw)
            or inspect.iscoroutinefunction(raw)
            or raw.__module__ in _UNWRAPPABLE
        ):
            continue
        try:
            setattr(owner, parts[-1], _wrap(raw, name))
            wrapped += 1
        except (AttributeError, TypeError):
            continue
    return wrapped


_UNWRAPPABLE = frozenset(
    {
        "contextlib",
        "functools",
        "threading",
        "collections",
        "os",
        "posixpath",
        "genericpath",
        "inspect",
        "abc",
        "typing",
        "enum",
        "weakref",
        "_weakrefset",
        "copyreg",
        "warnings",
    }
)
_calls: Counter[str] = Counter()
_local = threading.local()


def _wrap(func: Callable[..., object], name: str) -> Callable[..., object]:
    import functools

    @functools.wraps(func)
    def wrapper(*args: object, **kwargs: object) -> object:
        active = getattr(_local, "active", None)
        if active is None:
            active = _local.active = set()
        # Outermost call only (recursion would nest intervals); a few calls per target suffice.
        if name in active or _calls[name] >= MAX_CALLS_PER_TARGET:
            return func(*args, **kwargs)
        _calls[name] += 1
        active.add(name)
        token = id(args) ^ id(kwargs)
        _mark("B", name, token)
        cpu_start = _thread_user_cpu()
        try:
            return func(*args, **kwargs)
        finally:
            _mark("E", name, token, int((_thread_user_cpu() - cpu_start) * 1e6))
            active.discard(name)

    wrapper.__crystalperf_marked__ = True  # type: ignore[attr-defined]
    return wrapper


def _mark(kind: str, name: str, frame_id: int, user_cpu_us: int = 0) -> None:
    # No library code in here: the marker must not call a wrapped function.
    try:
        os.stat(f"{MARK}/{kind}/{frame_id}/{user_cpu_us}/{name}")
    except OSError:
        pass


def _thread_user_cpu() -> float:
    # User-mode CPU of this thread only: not inflated by strace, other threads or a busy machine.
    return resource.getrusage(resource.RUSAGE_THREAD).ru_utime


# --------------------------------------------------------------------------------------------------
# local peers


def slow_http_server() -> tuple[str, Callable[[], None]]:
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            time.sleep(SERVER_DELAY_S)
            body = b"x" * 200_000
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(0, len(body), 16384):
                self.wfile.write(body[i : i + 16384])
                time.sleep(0.001)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(length)
            time.sleep(SERVER_DELAY_S)
            body = b"<?xml version='1.0'?><methodResponse><params><param><value><int>3</int></value></param></params></methodResponse>"
            self.send_response(200)
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server.shutdown


def slow_echo_server() -> tuple[tuple[str, int], Callable[[], None]]:
    import socketserver

    class Echo(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            while True:
                data = self.request.recv(65536)
                if not data:
                    return
                time.sleep(SERVER_DELAY_S / 4)
                self.request.sendall(data)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    return (str(host), int(port)), server.shutdown


# --------------------------------------------------------------------------------------------------
# workloads


def network_workloads() -> None:
    import http.client
    import socket
    import urllib.request
    import xmlrpc.client

    url, stop = slow_http_server()
    (host, port), stop_echo = slow_echo_server()
    try:
        for _ in range(3):
            urllib.request.urlopen(url + "/a").read()
            host_port = url.split("//")[1]
            conn = http.client.HTTPConnection(host_port)
            conn.request("GET", "/b")
            conn.getresponse().read()
            conn.close()
            xmlrpc.client.ServerProxy(url + "/RPC2").add(1, 2)
            with socket.create_connection((host, port)) as sock:
                for _ in range(5):
                    sock.sendall(b"y" * 4096)
                    sock.recv(65536)
        with contextlib.suppress(ImportError):
            import requests

            for _ in range(3):
                _ = requests.get(url + "/c", timeout=5).content
            with requests.Session() as session:
                for _ in range(3):
                    _ = session.get(url + "/d", timeout=5).content
        with contextlib.suppress(ImportError):
            import urllib3

            pool = urllib3.PoolManager()
            for _ in range(3):
                _ = pool.request("GET", url + "/e").data
        with contextlib.suppress(ImportError):
            import httpx

            with httpx.Client() as client:
                for _ in range(3):
                    _ = client.get(url + "/f").content
    finally:
        stop()
        stop_echo()


def disk_workloads(work: Path) -> None:
    import dbm.dumb
    import filecmp
    import fileinput
    import glob
    import logging
    import logging.handlers
    import mailbox
    import shelve
    import shutil
    import tarfile
    import tempfile
    import zipfile

    src = work / "src"
    src.mkdir()
    for i in range(40):
        (src / f"f{i}.txt").write_bytes(os.urandom(64) * 1000)
    for _ in range(2):
        dst = work / "copy"
        shutil.copytree(src, dst)
        filecmp.cmpfiles(src, dst, [f"f{i}.txt" for i in range(40)], shallow=False)
        shutil.copyfile(src / "f1.txt", work / "single.txt")
        shutil.move(str(work / "single.txt"), str(work / "moved.txt"))
        shutil.rmtree(dst)
        with tarfile.open(work / "a.tar", "w") as tar:
            tar.add(src, arcname="src")
        with tarfile.open(work / "a.tar") as tar:
            tar.extractall(work / "untar", filter="data")
        shutil.rmtree(work / "untar")
        with zipfile.ZipFile(work / "a.zip", "w", compression=zipfile.ZIP_STORED) as zf:
            for p in sorted(src.iterdir()):
                zf.write(p, p.name)
        with zipfile.ZipFile(work / "a.zip") as zf:
            zf.extractall(work / "unzip")
        shutil.rmtree(work / "unzip")
        glob.glob(str(src / "*.txt"))
        with fileinput.input(files=[str(p) for p in sorted(src.iterdir())[:10]], mode="rb") as fh:
            for _ in fh:
                pass
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            with tempfile.NamedTemporaryFile(dir=tmp, delete=False) as fh:
                fh.write(os.urandom(1 << 20))
                fh.flush()
                os.fsync(fh.fileno())
        box = mailbox.Maildir(str(work / "maildir"))
        for i in range(20):
            box.add(f"Subject: m{i}\n\n" + "body\n" * 200)
        box.flush()
        for key in list(box.keys()):
            box.remove(key)
        db = dbm.dumb.open(str(work / "db"), "c")
        for i in range(200):
            db[f"k{i}".encode()] = os.urandom(512)
        db.sync()
        db.close()
        with shelve.open(str(work / "shelf")) as shelf:
            for i in range(100):
                shelf[f"k{i}"] = list(range(50))
        handler = logging.handlers.RotatingFileHandler(work / "log.txt", maxBytes=20000, backupCount=3)
        logger = logging.getLogger("crystalperf.verify")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        for i in range(400):
            logger.info("line %d %s", i, "z" * 60)
        logger.removeHandler(handler)
        handler.close()
        p = Path(work / "pathlib.txt")
        for _ in range(20):
            p.write_bytes(os.urandom(1 << 16))
            p.read_bytes()
        shutil.make_archive(str(work / "arch"), "tar", str(src))
        shutil.rmtree(work / "maildir")


def cpu_workloads() -> None:
    import _pydecimal
    import ast
    import base64
    import calendar
    import copy
    import difflib
    import fractions
    import heapq
    import html.parser
    import io
    import ipaddress
    import json
    import pickle
    import pprint
    import random
    import re
    import statistics
    import textwrap
    import tokenize
    import xml.dom.minidom

    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon"] * 400
    text_a = "\n".join(" ".join(rng.sample(words, 8)) for _ in range(300))
    text_b = "\n".join(" ".join(rng.sample(words, 8)) for _ in range(300))
    data = [{"k": i, "v": [rng.random() for _ in range(20)], "s": "x" * 20} for i in range(1500)]
    for _ in range(2):
        list(difflib.unified_diff(text_a.splitlines(), text_b.splitlines()))
        difflib.SequenceMatcher(None, text_a[:3000], text_b[:3000]).ratio()
        json.loads(json.dumps(data))
        json.JSONEncoder(indent=2).encode(data[:300])
        _pydecimal.getcontext().prec = 200
        x = _pydecimal.Decimal(2).sqrt()
        (x * x).ln()
        sum(fractions.Fraction(1, i) for i in range(1, 300))
        values = [rng.random() for _ in range(20000)]
        statistics.stdev(values)
        statistics.median(values)
        statistics.quantiles(values, n=10)
        heapq.nsmallest(10, values)
        heapq.merge(sorted(values[:5000]), sorted(values[5000:10000]))
        textwrap.fill(text_a, width=50)
        textwrap.dedent(text_a)
        pprint.pformat(data[:300])
        base64.b64encode(bytes(range(256)) * 4000)
        base64.b85encode(bytes(range(256)) * 500)
        calendar.TextCalendar().formatyear(2024)
        calendar.HTMLCalendar().formatyear(2024)
        source = Path(ast.__file__).read_text()
        ast.dump(ast.parse(source))
        list(tokenize.generate_tokens(io.StringIO(source).readline))
        pickle._dumps(data[:500])  # type: ignore[attr-defined]  # the pure-Python pickler
        pickle._loads(pickle.dumps(data[:500]))  # type: ignore[attr-defined]
        copy.deepcopy(data[:500])
        re.sub(r"(\w+) (\w+)", r"\2 \1", text_a * 3)
        re.compile(r"(a|b|c)+d{2,5}[x-z]*" + str(rng.random()))
        [ipaddress.ip_network(f"10.{i}.0.0/16").subnets(new_prefix=20) for i in range(200)]
        list(ipaddress.ip_network("10.0.0.0/20").hosts())
        parser = html.parser.HTMLParser()
        parser.feed("<html><body>" + "<p class='a'>text <b>bold</b></p>" * 2000 + "</body></html>")
        xml.dom.minidom.parseString("<r>" + "<e a='1'>t</e>" * 3000 + "</r>").toxml()
        with contextlib.suppress(ImportError):
            import mpmath

            mpmath.mp.dps = 300
            mpmath.zeta(3)
            mpmath.pi * mpmath.e
            mpmath.quad(mpmath.sin, [0, mpmath.pi])
        with contextlib.suppress(ImportError):
            import networkx

            g = networkx.gnm_random_graph(400, 3000, seed=1)
            networkx.shortest_path_length(g, 0)
            networkx.pagerank(g)
            networkx.betweenness_centrality(g, k=30, seed=1)
        with contextlib.suppress(ImportError):
            import sympy

            sympy.factor(sympy.expand((sympy.Symbol("x") + 1) ** 30))


def main(argv: list[str]) -> int:
    import tempfile

    targets = set(Path(argv[0]).read_text().split())
    sys.stderr.write(f"wrapped {install_markers(targets)} target functions\n")
    cpu_workloads()
    with tempfile.TemporaryDirectory() as tmp:
        disk_workloads(Path(tmp))
    network_workloads()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
