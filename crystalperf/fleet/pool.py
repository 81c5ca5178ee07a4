"""The local engine: the fleet's logs analysed by a pool of workers (:mod:`.worker`) on this machine.

The pool has one worker per CPU this process may use, fewer where the memory available would not hold that many
analyses at their bound (``--max-memory``): peak memory is the workers' bound times their number, whatever the
size of the fleet. The largest logs go first, so that the last minutes are not one big log alone. A worker that
dies (killed from outside) costs the log it had, whose row says so and is tried again next run, and is replaced.

Engines share one signature, :data:`Engine`: the logs to analyse and the :class:`Options`, and an iterator of
results in the order they finish. Other engines are entry points ``crystalperf.fleet_engines`` (``spark``:
:mod:`crystalperf.integrations.spark.fleet`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import selectors
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from crystalperf.core import limits
from crystalperf.fleet.cache import Result
from crystalperf.fleet.row import Source, error_row
from crystalperf.fleet.worker import ENVIRONMENT

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_RSS = 2 << 30


@dataclass
class Options:
    """How each log is analysed, whatever the engine."""

    classifier: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_rss: int = DEFAULT_MAX_RSS
    jobs: int | None = None  # workers (local engine); None: sized to the machine
    limits: dict[str, str] = field(default_factory=dict)  # the CLI's limits in force, by variable
    log: Path | None = None  # where the workers' own messages go (None: nowhere)
    engine: dict[str, Any] = field(default_factory=dict)  # what an engine takes besides (Spark: master, conf)

    def worker_command(self) -> list[str]:
        command = [sys.executable, "-m", "crystalperf.fleet.worker", "--timeout", repr(self.timeout_s),
                   "--max-rss", str(self.max_rss)]
        return command + (["--classifier", self.classifier] if self.classifier else [])

    def worker_environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        return {**(dict(os.environ) if base is None else base), **self.limits, **ENVIRONMENT}

    def to_json(self) -> str:
        return json.dumps({"classifier": self.classifier, "timeout_s": self.timeout_s, "max_rss": self.max_rss,
                           "limits": self.limits})

    @classmethod
    def from_json(cls, text: str) -> Options:
        return cls(**json.loads(text))


Engine = Callable[[Sequence[Source], Options], Iterator[Result]]


def limits_in_force() -> dict[str, str]:
    """Every limit's value now (``docs/limits.md``), to hand to the workers as they are here."""
    return {limit.env: str(limit.get()) for limit in limits.LIMITS}


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_jobs(max_rss: int) -> int:
    """Workers for this machine: one per CPU, no more than the available memory holds at ``max_rss`` each."""
    jobs = _available_cpus()
    memory = _available_memory()
    if memory is not None:
        jobs = min(jobs, memory // max(1, max_rss))
    return max(1, jobs)


class _Worker:
    def __init__(self, options: Options, log: IO[bytes] | None) -> None:
        self.process = subprocess.Popen(
            options.worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=log if log is not None else subprocess.DEVNULL, env=options.worker_environment(), text=True,
            bufsize=1)
        self.source: Source | None = None

    def give(self, source: Source) -> None:
        assert self.process.stdin is not None
        self.source = source
        self.process.stdin.write(json.dumps(source.__dict__) + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.source is not None:  # stopped in the middle of a log (the run was interrupted): now
            self.process.kill()
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def analyse(sources: Sequence[Source], options: Options) -> Iterator[Result]:
    """The local engine (:data:`Engine`)."""
    pending = collections.deque(sorted(sources, key=lambda s: (-s.size, s.path)))
    if not pending:
        return
    jobs = min(options.jobs or default_jobs(options.max_rss), len(pending))
    log = open(options.log, "ab") if options.log is not None else None  # noqa: SIM115 - closed below
    selector = selectors.DefaultSelector()
    workers: list[_Worker] = []

    def start() -> _Worker:
        worker = _Worker(options, log)
        assert worker.process.stdout is not None
        selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
        workers.append(worker)
        return worker

    def retire(worker: _Worker) -> None:
        assert worker.process.stdout is not None
        selector.unregister(worker.process.stdout)
        workers.remove(worker)
        worker.stop()

    try:
        for _ in range(jobs):
            start().give(pending.popleft())
        while any(w.source is not None for w in workers):
            for key, _ in selector.select(timeout=1.0):
                worker: _Worker = key.data
                source = worker.source
                assert source is not None and worker.process.stdout is not None
                line = worker.process.stdout.readline()
                worker.source = None
                if line:
                    yield Result.from_json(line)
                else:  # the worker itself ended (killed from outside): its log's row says so
                    code = worker.process.poll()
                    retire(worker)
                    yield Result(source, error_row(source, f"the worker process ended (status {code}) while "
                                                           "analysing it"), retry=True)
                    if pending:
                        worker = start()
                if pending:
                    worker.give(pending.popleft())
    finally:
        for worker in list(workers):
            retire(worker)
        selector.close()
        if log is not None:
            log.close()
