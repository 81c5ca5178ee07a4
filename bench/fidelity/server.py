"""The data server of the network-bound jobs, run inside their network namespace (stdlib only).

``GET /bytes/<n>`` answers ``n`` bytes; ``GET /lines/<n>`` answers ``n`` text lines of 100 characters.
Content comes from memory: the server itself neither reads the disk nor spends much CPU.
"""

from __future__ import annotations

import random
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

rng = random.Random(0)
BLOCK = bytes(rng.getrandbits(8) for _ in range(1 << 20))
LINES = "".join(f"{i:08d} " + "".join(rng.choice("abcdefghij") for _ in range(90)) + "\n"
                for i in range(1 << 13)).encode()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        kind, _, count = self.path.strip("/").partition("/")
        n = int(count or 0)
        source, size = (BLOCK, n) if kind == "bytes" else (LINES, n * 100)
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        sent = 0
        while sent < size:
            chunk = source[: min(len(source), size - sent)]
            self.wfile.write(chunk)
            sent += len(chunk)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


if __name__ == "__main__":
    ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
