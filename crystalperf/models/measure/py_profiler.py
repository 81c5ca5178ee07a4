"""An in-process deterministic profiler that splits each Python function's inclusive time into
CPU, disk, network and waiting, by what the C calls made under it did.

It is loaded into the measured interpreter by path (``sitecustomize`` or ``-c``), so it imports nothing
from crystalperf and runs on any CPython 3.11. ``sys.setprofile`` gives every Python call/return and every
C call/return; a C call that does I/O is classified when it starts:

- disk: path calls (``os.stat``, ``open``, ``listdir``, ``unlink`` ...), fd calls and ``io`` file-object
  methods whose fd is a regular file (``os.fstat`` at call time), mmap methods, the off-CPU part of
  sqlite calls;
- network: socket send/recv/connect/accept, ``ssl`` reads/writes on a real socket, ``io`` methods and
  selects/polls over socket fds;
- waiting: lock acquires, ``time.sleep``, ``SimpleQueue.get``, process waits, and reads/writes/polls on
  pipes, ttys and devices.

Wall time inside an I/O C call goes to its class; CPU is the thread's CPU time (``time.thread_time``)
minus what those calls consumed. The profiler's own time is measured at every event and taken out of
both clocks. Each interval counts once for every *distinct* function on the thread's stack (inclusive;
a recursive function counts its outermost activation only).
"""

from __future__ import annotations

import _io
import _socket
import _thread
import atexit
import json
import os
import stat
import sys
import threading
import time
from types import CodeType, FrameType
from typing import Any

ENV_OUT_DIR = "CRYSTALPERF_PYPROFILE_DIR"
DISK, NETWORK, WAITING, DISK_OFFCPU = 0, 1, 2, 3
KIND_NAMES = ("disk", "network", "waiting")
IMPORT_SYSTEM_FILES = ("<frozen importlib", "<frozen zipimport")
MAX_FUNCTIONS = 200_000  # distinct code objects kept per process: bounds memory on huge suites

_thread_time = time.thread_time
_wall = time.perf_counter
_get_ident = threading.get_ident
_fstat = os.fstat
_S_ISREG = stat.S_ISREG
_S_ISSOCK = stat.S_ISSOCK
_FILE_TYPES = (_io.FileIO, _io.BufferedReader, _io.BufferedWriter, _io.BufferedRandom, _io.BufferedRWPair,
               _io.TextIOWrapper)  # fmt: skip
_LOCK_TYPES = (_thread.LockType, _thread.RLock)
_THIS_FILE = os.path.normcase(os.path.abspath(__file__)).removesuffix("c")

PATH_CALLS = frozenset(
    "stat lstat open listdir scandir unlink remove rename replace mkdir rmdir chmod lchmod chown lchown utime "
    "access link symlink readlink truncate statvfs mkfifo mknod chdir chroot getxattr setxattr listxattr "
    "removexattr".split()
)
FD_CALLS = frozenset(
    "read write pread pwrite readv writev preadv pwritev fsync fdatasync ftruncate sendfile copy_file_range "
    "splice posix_fallocate posix_fadvise".split()
)
PROCESS_WAITS = frozenset("wait waitpid wait3 wait4 waitid".split())
FILE_METHODS = frozenset(
    "read read1 readinto readinto1 readline readlines readall write writelines flush seek truncate peek "
    "__exit__ close".split()
)
SOCKET_METHODS = frozenset(
    "send sendall sendto sendmsg sendfile recv recv_into recvfrom recvfrom_into recvmsg recvmsg_into connect "
    "connect_ex _accept accept".split()
)
SSL_METHODS = frozenset({"read", "write", "do_handshake", "shutdown"})
LOCK_METHODS = frozenset({"acquire", "acquire_lock", "_acquire_restore"})
POLL_METHODS = frozenset({"poll", "select", "control"})
MMAP_METHODS = frozenset({"read", "read_byte", "readline", "write", "write_byte", "flush", "move", "madvise"})
SQLITE_METHODS = frozenset(
    {"execute", "executemany", "executescript", "commit", "fetchone", "fetchmany", "fetchall", "backup",
     "close", "rollback"}
)  # fmt: skip


def fd_kind(fd: object) -> int | None:
    """DISK for a regular file, NETWORK for a socket, WAITING for pipes, ttys and devices; None when the
    fd is not open (the call will fail at once)."""
    if not isinstance(fd, int):
        return None
    try:
        mode = _fstat(fd).st_mode
    except (OSError, ValueError, OverflowError):
        return None
    if _S_ISREG(mode):
        return DISK
    if _S_ISSOCK(mode):
        return NETWORK
    return WAITING


def _fds_kind(fds: list[int]) -> int:
    kinds = {fd_kind(fd) for fd in fds}
    if NETWORK in kinds:
        return NETWORK
    if DISK in kinds and len(kinds - {None}) == 1:
        return DISK
    return WAITING


def _fileno_of(obj: Any) -> int | None:
    if isinstance(obj, int):
        return obj
    try:
        return int(obj.fileno())
    except Exception:
        return None


def _selector_kind(frame: FrameType) -> int:
    """A poll/epoll called by a ``selectors`` selector: what its registered fds are. asyncio's self-pipe
    (a socketpair that only wakes the loop) is left out, or every idle event loop would look like network."""
    selector = frame.f_locals.get("self")
    get_map = getattr(selector, "get_map", None)
    if get_map is None:
        return WAITING
    fds = []
    try:
        for key in list(get_map().values()):
            data = key.data
            handle = data[0] if isinstance(data, tuple) and data else None
            callback = getattr(getattr(handle, "_callback", None), "__name__", "")
            if callback != "_read_from_self":
                fds.append(key.fd)
    except Exception:
        return WAITING
    return _fds_kind(fds)


class _Thread:
    __slots__ = ("stack", "active", "io", "acc", "io_cpu", "io_events", "over_cpu", "over_wall", "seg_wall",
                 "seg_cpu", "fd_hint")  # fmt: skip

    def __init__(self) -> None:
        # (frame, code, wall_in, cpu_in, disk_in, network_in, waiting_in, io_cpu_in, io_events_in)
        self.stack: list[tuple[Any, ...]] = []
        self.active: dict[CodeType, int] = {}
        self.io: list[tuple[Any, int, int]] = []  # open I/O C calls: (function, kind, python depth)
        self.acc = [0.0, 0.0, 0.0]  # disk, network, waiting wall seconds so far on this thread
        self.io_cpu = 0.0
        self.io_events = 0
        self.over_cpu = 0.0
        self.over_wall = 0.0
        self.seg_wall = 0.0
        self.seg_cpu = 0.0
        self.fd_hint: object = None


class Profiler:
    """Collects per-function totals: calls, wall, cpu, disk, network, waiting seconds and I/O events."""

    def __init__(self) -> None:
        self.threads: dict[int, _Thread] = {}
        # code -> [calls, wall, cpu, disk, network, waiting, events]
        self.totals: dict[CodeType, list[float]] = {}
        self.modules: dict[CodeType, str] = {}
        self._skip_files = {_THIS_FILE}
        self._import_codes: set[CodeType] = set()
        self._originals: list[tuple[Any, str, Any]] = []
        self.installed = False
        self.pid = os.getpid()

    # -- installation -------------------------------------------------------------------------------

    def install(self) -> None:
        if self.installed:
            return
        self.installed = True
        self.pid = os.getpid()
        self._wrap_fd_functions()
        threading.setprofile(self._thread_start)
        self.threads[_get_ident()] = self._fresh()
        sys.setprofile(self._event)

    def uninstall(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()
        self.installed = False

    def skip_file(self, path: str) -> None:
        """Frames of ``path`` (a bootstrap) are never pushed: they are not the measured code."""
        self._skip_files.add(os.path.normcase(os.path.abspath(path)))

    def _fresh(self) -> _Thread:
        state = _Thread()
        state.seg_wall = _wall()
        state.seg_cpu = _thread_time()
        return state

    def _thread_start(self, frame: FrameType, event: str, arg: Any) -> None:
        # A thread's ident may be reused: a new thread must not inherit a dead one's stack.
        self.threads[_get_ident()] = self._fresh()
        sys.setprofile(self._event)
        self._event(frame, event, arg)

    def _wrap_fd_functions(self) -> None:
        """``os.read(fd, n)`` and ``select.select(r, w, x)`` take their fds as arguments, which a profile
        hook cannot see: thin wrappers note them for the C call that follows."""
        import select

        for name in FD_CALLS:
            original = getattr(os, name, None)
            if original is not None:
                self._replace(os, name, staticmethod(self._fd_wrapper(original)))
        original_select = select.select
        profiler = self

        def select_select(rlist: Any, wlist: Any, xlist: Any, *rest: Any) -> Any:
            state = profiler.threads.get(_get_ident())
            if state is not None:
                try:
                    fds = [_fileno_of(f) for f in (*rlist, *wlist, *xlist)]
                    state.fd_hint = _fds_kind([fd for fd in fds if fd is not None])
                except Exception:
                    state.fd_hint = WAITING
            return original_select(rlist, wlist, xlist, *rest)

        self._replace(select, "select", staticmethod(select_select))

    def _fd_wrapper(self, original: Any) -> Any:
        profiler = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            state = profiler.threads.get(_get_ident())
            if state is not None and args:
                state.fd_hint = fd_kind(args[0])
            return original(*args, **kwargs)

        wrapper.__name__ = original.__name__
        wrapper.__doc__ = original.__doc__
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        return wrapper

    def _replace(self, owner: Any, name: str, value: Any) -> None:
        # ``value`` is a staticmethod: code that keeps the builtin as a class attribute (selectors'
        # ``_select = select.select``) must not get a bound method in its place.
        self._originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    # -- the hook -----------------------------------------------------------------------------------

    def _event(self, frame: FrameType, event: str, arg: Any) -> None:
        cpu_now = _thread_time()
        wall_now = _wall()
        state = self.threads.get(_get_ident())
        if state is None:
            state = self.threads[_get_ident()] = self._fresh()
        wall = wall_now - state.over_wall
        cpu = cpu_now - state.over_cpu
        # The time since the previous event belongs to the innermost open I/O call, if the thread has been
        # inside it (and not in Python code it called back) all along.
        io = state.io
        if io and io[-1][2] == len(state.stack):
            kind = io[-1][1]
            spent_cpu = cpu - state.seg_cpu
            if kind == DISK_OFFCPU:
                state.acc[DISK] += max(0.0, (wall - state.seg_wall) - spent_cpu)
            else:
                state.acc[kind] += wall - state.seg_wall
                state.io_cpu += spent_cpu
        try:
            if event == "call":
                code = frame.f_code
                if code.co_filename not in self._skip_files:
                    state.stack.append((frame, code, wall, cpu, *state.acc, state.io_cpu, state.io_events))
                    active = state.active
                    active[code] = active.get(code, 0) + 1
                    if code not in self.modules and len(self.modules) < MAX_FUNCTIONS:
                        self.modules[code] = str(frame.f_globals.get("__name__", ""))
                        if code.co_filename.startswith(IMPORT_SYSTEM_FILES):
                            self._import_codes.add(code)
            elif event == "return":
                self._return(state, frame, wall, cpu)
            elif event == "c_call":
                io_kind = self._classify(arg, frame, state)
                state.fd_hint = None
                if io_kind is not None:
                    io.append((arg, io_kind, len(state.stack)))
                    state.io_events += 1
            elif io:  # c_return / c_exception
                for i in range(len(io) - 1, -1, -1):
                    if io[i][0] is arg:
                        del io[i:]
                        break
        except Exception:  # a measurement bug must not break the measured program
            pass
        state.seg_wall = wall
        state.seg_cpu = cpu
        state.over_cpu += _thread_time() - cpu_now
        state.over_wall += _wall() - wall_now

    def _return(self, state: _Thread, frame: FrameType, wall: float, cpu: float) -> None:
        stack = state.stack
        if not stack:
            return
        depth = len(stack) - 1
        if stack[depth][0] is not frame:
            # An unwound frame whose return we missed (e.g. profiling installed mid-stack): find ours.
            while depth >= 0 and stack[depth][0] is not frame:
                depth -= 1
            if depth < 0:
                return
        while len(stack) > depth:
            entry = stack.pop()
            code = entry[1]
            active = state.active
            left = active[code] - 1
            if left:
                active[code] = left
                continue
            del active[code]
            totals = self.totals.get(code)
            if totals is None:
                if len(self.totals) >= MAX_FUNCTIONS:
                    continue
                totals = self.totals[code] = [0.0] * 7
            io_cpu = state.io_cpu - entry[7]
            totals[0] += 1
            totals[1] += wall - entry[2]
            totals[2] += max(0.0, (cpu - entry[3]) - io_cpu)
            totals[3] += state.acc[0] - entry[4]
            totals[4] += state.acc[1] - entry[5]
            totals[5] += state.acc[2] - entry[6]
            totals[6] += 1 + state.io_events - entry[8]
        if state.io and state.io[-1][2] > len(stack):
            state.io = [c for c in state.io if c[2] <= len(stack)]

    def _classify(self, func: Any, frame: FrameType, state: _Thread) -> int | None:
        kind = self._classify_call(func, frame, state)
        if kind is not None and any(code in state.active for code in self._import_codes):
            # Reading .py/.pyc files while importing is the interpreter loading code, not the function's
            # I/O (the strace-verified method leaves it out the same way).
            return None
        return kind

    def _classify_call(self, func: Any, frame: FrameType, state: _Thread) -> int | None:
        name = getattr(func, "__name__", None)
        owner = getattr(func, "__self__", None)
        if name is None or owner is None:
            return None
        owner_type = type(owner).__name__
        if owner_type == "module":
            module = owner.__name__
            if module == "posix":
                if name in FD_CALLS:
                    return state.fd_hint if isinstance(state.fd_hint, int) else None
                if name in PATH_CALLS:
                    return DISK
                if name in PROCESS_WAITS:
                    return WAITING
                return None
            if module in ("io", "_io", "builtins") and name == "open":
                return DISK
            if module == "time" and name == "sleep":
                return WAITING
            if module == "select" and name == "select":
                return state.fd_hint if isinstance(state.fd_hint, int) else WAITING
            return None
        if name in SOCKET_METHODS and isinstance(owner, _socket.socket):
            return NETWORK
        if name in FILE_METHODS and isinstance(owner, _FILE_TYPES):
            return fd_kind(_fileno_of(owner))
        if name in LOCK_METHODS and isinstance(owner, _LOCK_TYPES):
            return WAITING
        if owner_type == "SimpleQueue" and name == "get":
            return WAITING
        if owner_type == "_SSLSocket" and name in SSL_METHODS:
            # Memory-BIO TLS (asyncio's) only encrypts: its network I/O is the transport's own socket call.
            return NETWORK if type(getattr(owner, "owner", None)).__name__ == "SSLSocket" else None
        if owner_type in ("poll", "epoll", "devpoll", "kqueue") and name in POLL_METHODS:
            return _selector_kind(frame)
        if owner_type == "mmap" and name in MMAP_METHODS:
            return DISK
        if owner_type in ("Connection", "Cursor") and name in SQLITE_METHODS:
            # sqlite reads and writes inside the C call: its off-CPU part is the file I/O it blocked on (an
            # in-memory database has none). Asking the connection which it is would run SQL the program sees.
            return DISK_OFFCPU
        return None

    # -- results ------------------------------------------------------------------------------------

    def results(self) -> list[dict[str, Any]]:
        """One row per measured Python function (file, first line, module, qualified name, totals)."""
        rows = []
        for code, t in list(self.totals.items()):
            rows.append(
                {"file": code.co_filename, "line": code.co_firstlineno, "module": self.modules.get(code, ""),
                 "qualname": getattr(code, "co_qualname", code.co_name), "calls": int(t[0]), "wall": t[1],
                 "cpu": t[2], "disk": t[3], "network": t[4], "waiting": t[5], "events": int(t[6]),
                 "flags": code.co_flags}
            )  # fmt: skip
        return rows


def distributions_of(modules: set[str]) -> dict[str, dict[str, str]]:
    """Top-level module -> {"distribution", "licence"} for the installed (non-stdlib) modules."""
    from importlib import metadata

    try:
        by_top = metadata.packages_distributions()
    except Exception:
        return {}
    out = {}
    for top in sorted(modules):
        dists = by_top.get(top)
        if not dists:
            continue
        licence = ""
        try:
            meta: Any = metadata.metadata(dists[0])  # an email.message.Message: it has .get
            licence = meta.get("License-Expression") or ""
            if not licence:
                classifiers = [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
                licence = (
                    classifiers[0].split("::")[-1].strip() if classifiers else (meta.get("License") or "")
                )
        except Exception:
            pass
        out[top] = {"distribution": dists[0], "licence": licence.strip().splitlines()[0] if licence else ""}
    return out


def dump(profiler: Profiler, out_dir: str) -> str | None:
    """Write this process's totals to ``out_dir/raw-<pid>-<n>.json`` (atomically); returns the path."""
    import sysconfig

    profiler.uninstall()
    if os.getpid() != profiler.pid:
        return None  # a forked child: its totals still hold the parent's, which the parent writes itself
    rows = profiler.results()
    if not rows:
        return None
    tops = {str(r["module"]).split(".")[0] for r in rows if r["module"]}
    document = {
        "pid": os.getpid(),
        "argv": sys.argv,
        "python": sys.version.split()[0],
        "stdlib": os.path.realpath(sysconfig.get_paths()["stdlib"]),
        "distributions": distributions_of(tops),
        "functions": rows,
    }
    os.makedirs(out_dir, exist_ok=True)
    n = 0
    while True:
        path = os.path.join(out_dir, f"raw-{os.getpid()}-{n}.json")
        if not os.path.exists(path):
            break
        n += 1
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(document, fh)
    os.replace(tmp, path)
    return path


_PROFILER: Profiler | None = None


def start_from_environment(bootstrap_file: str | None = None) -> Profiler | None:
    """Install the profiler when ``CRYSTALPERF_PYPROFILE_DIR`` is set, dumping at interpreter exit
    (child Python processes inherit the variable and are measured too)."""
    global _PROFILER
    out_dir = os.environ.get(ENV_OUT_DIR)
    if not out_dir or _PROFILER is not None:
        return _PROFILER
    _PROFILER = Profiler()
    if bootstrap_file:
        _PROFILER.skip_file(bootstrap_file)
    profiler = _PROFILER
    atexit.register(lambda: dump(profiler, out_dir))
    _PROFILER.install()
    return _PROFILER
