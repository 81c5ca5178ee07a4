"""current_stacks: every thread's stack as codes and module globals (never frame objects), walked with the
collector paused, while other threads call, yield, await, raise, start and end (a collection inside f_back
made a sampler's walk read freed memory on CPython 3.11)."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from types import CodeType

from crystalperf.core import trace as tr
from crystalperf.core.record.sampling import PythonStackSampler, current_stacks, stack_frames


def _parked_inner(release: threading.Event) -> None:
    release.wait()


def _parked_outer(release: threading.Event) -> None:
    _parked_inner(release)


def test_a_parked_thread_is_captured_innermost_first_with_its_modules() -> None:
    release = threading.Event()
    worker = threading.Thread(target=_parked_outer, args=(release,))
    worker.start()
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            names = [code.co_name for code, _ in stack_frames(current_stacks(64).get(worker.ident or 0, []))]
            if "_parked_inner" in names:
                break
            time.sleep(0.01)
        frames = list(stack_frames(current_stacks(64)[worker.ident or 0]))
        names = [code.co_name for code, _ in frames]
        inner = names.index("_parked_inner")
        assert names[inner + 1] == "_parked_outer"
        assert names[-1] == "_bootstrap"  # the outermost frame: threading's
        assert frames[inner][1]["__name__"] == __name__
        assert all(isinstance(code, CodeType) and isinstance(g, dict) for code, g in frames)
        # the innermost frames are the ones kept
        assert [code.co_name for code, _ in stack_frames(current_stacks(2)[worker.ident or 0])] == names[:2]
        assert [code.co_name for code, _ in stack_frames(current_stacks(64)[worker.ident or 0], 3)] == names[:3]
    finally:
        release.set()
        worker.join()


def test_the_capture_leaves_the_collector_as_it_found_it() -> None:
    assert current_stacks(0) == {}
    was_enabled = gc.isenabled()
    try:
        gc.enable()
        current_stacks(8)
        assert gc.isenabled()
        gc.disable()
        current_stacks(8)
        assert not gc.isenabled()
    finally:
        (gc.enable if was_enabled else gc.disable)()


def _recurse(n: int) -> int:
    return 0 if n == 0 else _recurse(n - 1) + 1


def _generate(n: int):  # type: ignore[no-untyped-def]
    for i in range(n):
        yield _recurse(i % 9)


async def _chain(n: int) -> int:
    if n:
        await asyncio.sleep(0)
        return await _chain(n - 1)
    return _recurse(4)


def _churn(stop: threading.Event, kind: str) -> None:
    if kind == "async":
        async def main() -> None:
            while not stop.is_set():
                await asyncio.gather(*(_chain(5) for _ in range(8)))
        asyncio.run(main())
        return
    while not stop.is_set():
        if kind == "calls":
            sum(_generate(20))
            sorted(range(100), key=lambda x: -x)
            try:
                json.loads("{not json")
            except ValueError:
                pass
        else:  # threads that start and end all the time
            short = [threading.Thread(target=_recurse, args=(30,)) for _ in range(4)]
            for thread in short:
                thread.start()
            for thread in short:
                thread.join()


def _caught_recursing(sampler: PythonStackSampler) -> bool:
    return any(frame.name.endswith("._recurse") for frame in sampler.table.to_samples().frames)


def test_sampling_threads_that_never_stop_changing_their_stacks() -> None:
    stop = threading.Event()
    workers = [threading.Thread(target=_churn, args=(stop, kind), name=f"churn-{kind}")
               for kind in ("calls", "async", "threads")]
    sampler = PythonStackSampler(lambda ident, name: tr.SampleKey(operation="op", thread=name or "other"),
                                 interval_s=0.001)
    for worker in workers:
        worker.start()
    try:
        # At least 1.5 s of churn; on a loaded machine the GIL may hand the sampler only moments when no
        # thread is inside `_recurse`, so it goes on (up to 20 s) until one sample caught it.
        start = time.monotonic()
        while time.monotonic() < start + 1.5 or (time.monotonic() < start + 20 and not _caught_recursing(sampler)):
            for _ in range(50):
                stacks = current_stacks(256)
                assert all(isinstance(code, CodeType) and isinstance(g, dict)
                           for stack in stacks.values() for code, g in stack_frames(stack))
                sampler.sample_once()
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    samples = sampler.table.to_samples()
    threads = {samples.keys[k].thread for k in samples.key}
    assert {"churn-calls", "churn-async", "churn-threads"} <= threads
    names = {frame.name for frame in samples.frames}
    assert any(n.endswith("._recurse") for n in names)
    assert sampler.captured == {}  # the stacks are not kept past the sample
