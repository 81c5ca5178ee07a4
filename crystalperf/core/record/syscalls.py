"""What a blocked thread is blocked in, as the kernel tells it: ``/proc/<pid>/task/<tid>/syscall``.

A Python stack sampler sees only Python frames: a generator blocked in ``time.sleep`` and one blocked in a
socket read both show the generator's own line on top, and nothing in the stack says which. Linux shows the
system call a sleeping thread is in, with its arguments; the file descriptor of a read says whether it reads
a file, a socket to another host, or a pipe or local socket from another process of this host. The sampler
puts that on top of the stack as a ``kernel.*`` frame, which :mod:`crystalperf.core.attribution.waiting` maps without a
classifier: a sleep or a lock wait is waiting, a file read is disk, a socket to another host is network, a
pipe or loopback socket is waiting for another local process (a Python worker reading its input from the JVM).
"""

from __future__ import annotations

import ipaddress
import os
import platform
import socket

# The frames, innermost on the stack (language "unknown", module "kernel").
KERNEL_MODULE = "kernel"
SLEEP = "kernel.sleep"  # a timer: waits for nothing
WAIT = "kernel.wait"  # a lock, a condition, poll/select/epoll, a child process
LOCAL = "kernel.local"  # a pipe, a unix or loopback socket: another process of this host
FILE_READ = "kernel.file.read"
FILE_WRITE = "kernel.file.write"
SOCKET_RECV = "kernel.socket.recv"
SOCKET_SEND = "kernel.socket.send"
SOCKET_CONNECT = "kernel.socket.connect"

_SLEEP, _WAIT, _POLL, _READ, _WRITE, _CONNECT, _SYNC = "sleep", "wait", "poll", "read", "write", "connect", "sync"

# System call numbers by machine: x86_64's own table, and the generic one arm64 and riscv64 use.
_X86_64 = {
    0: _READ, 17: _READ, 19: _READ, 295: _READ, 327: _READ, 45: _READ, 47: _READ, 299: _READ,
    1: _WRITE, 18: _WRITE, 20: _WRITE, 296: _WRITE, 328: _WRITE, 44: _WRITE, 46: _WRITE, 307: _WRITE,
    40: _WRITE, 42: _CONNECT, 43: _CONNECT, 288: _CONNECT, 74: _SYNC, 75: _SYNC,
    35: _SLEEP, 230: _SLEEP, 34: _SLEEP, 130: _SLEEP,
    202: _WAIT, 449: _WAIT, 7: _POLL, 271: _POLL, 23: _POLL, 270: _POLL, 232: _WAIT, 281: _WAIT, 441: _WAIT,
    61: _WAIT, 247: _WAIT, 128: _WAIT,
}
_GENERIC = {
    63: _READ, 65: _READ, 67: _READ, 69: _READ, 286: _READ, 207: _READ, 212: _READ, 243: _READ,
    64: _WRITE, 66: _WRITE, 68: _WRITE, 70: _WRITE, 287: _WRITE, 206: _WRITE, 211: _WRITE, 269: _WRITE,
    71: _WRITE, 203: _CONNECT, 202: _CONNECT, 242: _CONNECT, 82: _SYNC, 83: _SYNC,
    101: _SLEEP, 115: _SLEEP, 133: _SLEEP,
    98: _WAIT, 449: _WAIT, 73: _POLL, 72: _POLL, 22: _WAIT, 441: _WAIT, 260: _WAIT, 95: _WAIT, 137: _WAIT,
}
_TABLES = {"x86_64": _X86_64, "amd64": _X86_64, "aarch64": _GENERIC, "arm64": _GENERIC, "riscv64": _GENERIC}

_FILE, _SOCKET, _LOCAL_PEER = "file", "socket", "local"
_LOOPBACK_V4 = "7F"  # the last byte of /proc/net/tcp's little-endian hex address: 127.x.x.x
_CACHE_LIMIT = 4096


class BlockedCalls:
    """Reads, for a thread found not running, the call it is blocked in, as one of the frame names above.

    ``proc`` is the process's /proc directory (``/proc/self`` for the sampler's own process). Descriptor
    kinds are cached by the descriptor's link (``socket:[inode]`` names the socket itself), bounded."""

    def __init__(self, proc: str = "/proc/self", machine: str | None = None) -> None:
        self.proc = proc
        self.table = _TABLES.get((machine or platform.machine()).lower(), {})
        self.available = bool(self.table) and os.path.isdir(f"{proc}/task")
        self._kinds: dict[str, str] = {}
        self._inet: dict[str, bool] | None = None  # socket inode -> its peer is on this host
        # The sampler's own process: a socket's peer is asked of the socket itself (a duplicate of its descriptor).
        # Another's: /proc/<pid>/net/tcp, whose every read walks the kernel's whole socket table (about 10 ms,
        # whatever the sockets), once per new connection the process is found blocked on.
        self._own = os.path.realpath(proc) == os.path.realpath(f"/proc/{os.getpid()}")

    def frame(self, native_id: int) -> str | None:
        """The frame name for the call the thread is blocked in; None when unknown or not blocked in one."""
        if not self.available:
            return None
        text = _read_text(f"{self.proc}/task/{native_id}/syscall")
        if not text or text.startswith("running"):
            return None
        parts = text.split()
        try:
            call = self.table.get(int(parts[0]))
        except ValueError:
            return None
        if call == _POLL:
            # select/poll on no descriptor at all is a timer: Python before 3.11 sleeps with select(0, ...).
            return SLEEP if len(parts) > 1 and parts[1] in ("0x0", "0") else WAIT
        if call in (_SLEEP, _WAIT):
            return SLEEP if call == _SLEEP else WAIT
        if call is None or len(parts) < 2:
            return None
        try:
            fd = int(parts[1], 16)
        except ValueError:
            return None
        kind = self._fd_kind(fd)
        if kind == _FILE:
            return FILE_READ if call == _READ else FILE_WRITE
        if kind == _SOCKET:
            return {_READ: SOCKET_RECV, _CONNECT: SOCKET_CONNECT}.get(call, SOCKET_SEND)
        if kind == _LOCAL_PEER:
            return LOCAL
        return None

    def _fd_kind(self, fd: int) -> str | None:
        try:
            target = os.readlink(f"{self.proc}/fd/{fd}")
        except OSError:
            return None
        kind = self._kinds.get(target)
        if kind is None:
            kind = self._classify(target, fd)
            if len(self._kinds) >= _CACHE_LIMIT:
                self._kinds.clear()
                self._inet = None
            self._kinds[target] = kind
        return kind

    def _classify(self, target: str, fd: int) -> str:
        if target.startswith("socket:["):
            local = _peer_is_local(fd) if self._own else None
            if local is None:
                local = self._inet_peers(target[len("socket:["):-1])
            # Not an internet socket (unix, netlink): another process of this host.
            return _LOCAL_PEER if local is None or local else _SOCKET
        if target.startswith("/dev/") or not target.startswith("/"):
            return _LOCAL_PEER  # a pipe, a terminal, an event fd: another process, or the user
        return _FILE

    def _inet_peers(self, inode: str) -> bool | None:
        """Whether the TCP/UDP socket with this inode talks to this host (loopback); None if not found."""
        if self._inet is None or inode not in self._inet:
            self._inet = {}
            for table in ("tcp", "tcp6", "udp", "udp6"):
                text = _read_text(f"{self.proc}/net/{table}", limit=1 << 22) or ""
                for line in text.splitlines()[1:]:
                    fields = line.split()
                    if len(fields) > 9:
                        self._inet[fields[9]] = _is_loopback(fields[2])
        return self._inet.get(inode)


def _peer_is_local(fd: int) -> bool | None:
    """Whether the socket on this process's descriptor talks to this host (a unix socket, a loopback or unconnected
    internet one); None when the descriptor is no socket any more."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return None
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return True
        try:
            host = sock.getpeername()[0]
        except OSError:
            return True  # not connected: no peer anywhere (a listening socket)
        address = ipaddress.ip_address(host.split("%")[0])
        address = getattr(address, "ipv4_mapped", None) or address  # ::ffff:127.0.0.1 is IPv4's loopback
        return bool(address.is_loopback or address.is_unspecified)
    except (OSError, ValueError):
        return None
    finally:
        sock.close()  # the duplicate only: the job's own descriptor stays open


def _is_loopback(address: str) -> bool:
    """``rem_address`` of /proc/net/tcp ("0100007F:1F90", or 32 hex digits for IPv6): 127/8, ::1, ::ffff:127/8,
    or unconnected (a listening socket has no peer)."""
    host = address.split(":")[0]
    if len(host) == 8:
        return host[-2:].upper() == _LOOPBACK_V4 or host == "00000000"
    if len(host) == 32:
        if host == "0" * 32 or host == "0" * 24 + "01000000":
            return True
        return host[:24].upper() == "0000000000000000FFFF0000" and host[-2:].upper() == _LOOPBACK_V4
    return False


def _read_text(path: str, limit: int = 4096) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            chunk = os.read(fd, min(65536, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
