"""Runs ``python -m crystalperf`` command lines as forks of one process that has already imported the CLI and
the analysis: a fresh interpreter spends about a second importing them, which several hundred hostile inputs
would pay each (minutes on every Python of the unit tier).

A forked child is the same program as a fresh ``python -m crystalperf``: it gets its own session, working
directory, environment and standard streams, calls the same ``main()`` that ``crystalperf/__main__.py`` does,
and exits the way an interpreter would (SystemExit codes, an uncaught exception's traceback and status 1,
atexit handlers, the flush of stdout). What it cannot test, the interpreter's start and ``-m`` resolution, the
suite still runs as real processes for a share of its cases.

Protocol, one JSON object a line: the parent writes ``{"args", "env", "cwd", "stdout", "stderr",
"timeout_s"}``; this process runs it and answers ``{"status", "rss_bytes", "seconds"}`` (status null: killed
after timeout_s, a hang)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

# Import what the subcommands import lazily, so that every fork finds it loaded.
import crystalperf.core.analysis  # noqa: F401
import crystalperf.core.cli
import crystalperf.core.compare  # noqa: F401
import crystalperf.core.report.diff  # noqa: F401
import crystalperf.core.report.html  # noqa: F401
import crystalperf.core.report.terminal  # noqa: F401
import crystalperf.integrations.spark.reader  # noqa: F401


def _child(request: dict, answers: int) -> None:
    """In the forked child: become the command line and never return."""
    code = 1
    try:
        os.close(answers)
        os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        sys.argv = ["crystalperf", *request["args"]]
        try:
            result = crystalperf.core.cli.main(request["args"])
        except SystemExit as exc:  # argparse's usage errors, like a real interpreter's SystemExit
            result = exc.code
        if result is None:
            code = 0
        elif isinstance(result, int):
            code = result
        else:
            sys.stderr.write(f"{result}\n")
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit
            import logging

            logging.shutdown()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # an interpreter that cannot flush stdout at exit exits 120
            code = 120
        os._exit(code)


def _run(request: dict, answers: int) -> dict:
    sys.stdout.flush()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(request, answers)
    while True:
        done, wait_status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            status: int | None = os.waitstatus_to_exitcode(wait_status)
            break
        if time.monotonic() - started > request["timeout_s"]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:  # killed before its setsid(): no group yet
                os.kill(pid, signal.SIGKILL)
            _, _, usage = os.wait4(pid, 0)
            status = None
            break
        time.sleep(0.01)
    return {"status": status, "rss_bytes": usage.ru_maxrss * 1024, "seconds": time.monotonic() - started}


def serve() -> None:
    # The answers go to a copy of stdout: every child points fd 1 at its own file.
    answers = os.dup(1)
    for line in sys.stdin:
        answer = _run(json.loads(line), answers)
        os.write(answers, (json.dumps(answer) + "\n").encode())


if __name__ == "__main__":
    serve()
