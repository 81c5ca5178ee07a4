"""The list scheduler every replay uses (paper Algorithm 1): tasks run in their original order, each on the
slot that frees first, with the first-wave warm-up factor. Used by the skew rule and by every prediction."""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Sequence

# A stage of more tasks than this is replayed exactly only in its last tasks (at least REPLAY_TAIL_TASKS, at
# least four waves): before them, every slot is taken to have been busy for the same time (the head's work
# over the slots). The error is at most about one task's duration, against a makespan of thousands of them.
REPLAY_EXACT_TASKS = 1024
REPLAY_TAIL_TASKS = 512
# More slots than this (and more tasks than slots) are replayed as this many groups of slots, each group
# running a group of tasks in a row, as a sampled task stands for the tasks it was drawn from.
REPLAY_MAX_SLOTS = 1024


def replay(
    durations: Sequence[float],
    slots: int,
    *,
    original_slots: int | None = None,
    warmup: float = 1.0,
    weight: float = 1.0,
) -> float:
    """Makespan of tasks run in their original order by a list scheduler on ``slots`` slots.

    Each task goes to the slot that frees first (Algorithm 1). A task that was in the first wave of
    the traced run (one of its first ``original_slots``) but is not in the new first wave ran slower
    than it needs to (JIT, caches, connections warming up): it is sped up by ``warmup``; a task moved
    into the new first wave is slowed down by it.

    ``weight``: each duration stands for that many tasks in a row (a uniform sample of the operation's tasks,
    in start order). Time and memory are bounded by the durations given, whatever the slots and the tasks
    they stand for: never more than ``min(slots, tasks)`` slots, and a bounded number of them.
    """
    if not durations:
        return 0.0
    n_old = original_slots or slots
    slots = max(1, slots)
    n = len(durations)
    if weight == 1.0 and n <= slots and (n_old >= n or warmup == 1.0):
        return max(durations)  # one wave, as traced

    def factor(was_first: bool, is_first: bool) -> float:
        if was_first and not is_first:
            return 1.0 / warmup
        if is_first and not was_first:
            return warmup
        return 1.0

    if weight == 1.0 and slots < n <= REPLAY_EXACT_TASKS:
        free = [0.0] * slots
        makespan = 0.0
        for i, d in enumerate(durations):
            end = free[0] + d * factor(i < n_old, i < slots)
            heapq.heapreplace(free, end)
            if end > makespan:
                makespan = end
        return makespan
    counts = _run_lengths(n, weight)
    total = sum(counts)
    if slots >= total:
        # Every task has a slot of its own from the start: the longest, with its first-wave factor.
        makespan, position = 0.0, 0
        for d, c in zip(durations, counts, strict=True):
            if c:
                makespan = max(makespan, d * factor(position < n_old, True),
                               d * factor(position + c - 1 < n_old, True))
            position += c
        return makespan
    if slots > REPLAY_MAX_SLOTS and weight * REPLAY_MAX_SLOTS / slots >= 1.0:
        group = slots / REPLAY_MAX_SLOTS
        return replay(durations, REPLAY_MAX_SLOTS, original_slots=max(1, round(n_old / group)), warmup=warmup,
                      weight=weight / group)
    tail = total if total <= REPLAY_EXACT_TASKS else min(total, max(REPLAY_TAIL_TASKS, 4 * slots))
    cut = total - tail
    # The head: the work of its tasks, each run of a recorded duration cut where the first-wave factors change.
    head_work = 0.0
    position = 0
    plain_from = max(n_old, slots)  # no task from here on moves into or out of a first wave
    for d, c in zip(durations, counts, strict=True):
        low, high = position, min(position + c, cut)
        position += c
        if low >= high:
            if position > cut:
                break
            continue
        if low >= plain_from:
            head_work += d * (high - low)
            continue
        edges = sorted({low, high, *(x for x in (n_old, slots) if low < x < high)})
        for a, b in itertools.pairwise(edges):
            head_work += d * (b - a) * factor(a < n_old, a < slots)
    free = [head_work / slots] * min(slots, tail)
    makespan = free[0]
    position = 0
    for d, c in zip(durations, counts, strict=True):
        if position + c <= cut:
            position += c
            continue
        for p in range(max(position, cut), position + c):
            end = free[0] + (d if p >= plain_from else d * factor(p < n_old, p < slots))
            heapq.heapreplace(free, end)
            if end > makespan:
                makespan = end
        position += c
    return makespan


@functools.lru_cache(maxsize=1024)
def _run_lengths(n: int, weight: float) -> tuple[int, ...]:
    """How many tasks each of ``n`` recorded tasks stands for, when each stands for ``weight`` of them."""
    if weight == 1.0:
        return (1,) * n
    return tuple(round((i + 1) * weight) - round(i * weight) for i in range(n))
