"""core.collector.paused: no collection inside, the collector as it was after, a process's own freeze kept."""

from __future__ import annotations

import gc

from crystalperf.core import collector


def test_no_collection_runs_inside_and_the_collector_is_back_after():
    assert gc.isenabled()
    collections_before = sum(s["collections"] for s in gc.get_stats())
    with collector.paused():
        assert not gc.isenabled()
        kept = [[i] for i in range(200_000)]  # far past the young generation's threshold
        with collector.paused():  # nested: nothing to do
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert sum(s["collections"] for s in gc.get_stats()) == collections_before
    assert gc.isenabled() and gc.get_freeze_count() == 0  # the interpreter's own frozen objects unfrozen too
    # what was built joined the oldest generation instead of waiting in the young one
    assert gc.get_count()[0] < 1000
    del kept


def test_cyclic_garbage_made_inside_is_collected_after():
    class Node:
        pass

    with collector.paused():
        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        del a, b
    assert gc.collect() >= 2


def test_a_process_that_froze_objects_keeps_them_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector.paused():
            assert not gc.isenabled()
            [object() for _ in range(10)]
        assert gc.isenabled() and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_a_process_that_turned_the_collector_off_keeps_it_off():
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
