"""The heap a TaskManager's subtasks share (trace 1.11): the reporter's ``heap`` read into the collector's fields, and
the streaming model's old collections under a change of the records per process, by hand-computed figures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crystalperf.core.errors import BadInputError
from crystalperf.core.predict.base import Changes
from crystalperf.core.predict.jvm import MAX_LIVE_SHARE, Heap, heaps
from crystalperf.core.predict.streaming import Chain, StreamingCpu
from crystalperf.core.profile.machine import ClusterSpread
from crystalperf.integrations.flink import read_metrics

DATA = Path(__file__).resolve().parents[1] / "data" / "flink-cluster-groupby"
TM_PART = "crystalperf-flink-2bd6c44ddf7c5638605ebf174ae3563d.29404.json"
MB = 1_000_000


def test_old_collections_follow_the_live_share_of_the_heap() -> None:
    heap = Heap(max_bytes=100 * MB, live_bytes=80 * MB, old_gc_s=8.0)
    assert heap.old_gc_at(1.0) == pytest.approx(8.0)
    # half the records: live 40 % instead of 80 %; 8 * 0.5 * (0.4 / 0.6) / (0.8 / 0.2)
    assert heap.old_gc_at(0.5) == pytest.approx(8 * 0.5 * (0.4 / 0.6) / 4.0)
    # twice the records would need 160 % of the heap: held at MAX_LIVE_SHARE, a lower bound
    capped = MAX_LIVE_SHARE / (1 - MAX_LIVE_SHARE)
    assert heap.old_gc_at(2.0) == pytest.approx(8 * 2 * capped / 4.0)
    # a heap with room: old collections scale with the records, little more
    roomy = Heap(max_bytes=100 * MB, live_bytes=10 * MB, old_gc_s=1.0)
    assert roomy.old_gc_at(0.5) == pytest.approx(0.5 * (0.05 / 0.95) / (0.1 / 0.9))


def _model(with_heap: bool) -> StreamingCpu:
    # one subtask's chain of 6 CPU-s; the process spent 15 CPU-s of work on its one CPU, 8 of them collecting an
    # old generation 80 % live; at parallelism 2 the second one-slot TaskManager brings its CPU and half the records
    return StreamingCpu([Chain([6.0])], process_cpu_s=15.0, cpu_count=1, runtime_s=15.0, work_cpu_s=15.0,
                        spread=ClusterSpread(slots_per_worker=1, workers=2, used=1, cpus=1.0),
                        heaps=[Heap(100 * MB, 80 * MB, 8.0)] if with_heap else [])


def test_a_parallelism_that_halves_the_records_per_process_relieves_the_heap() -> None:
    # each of the two TaskManagers collects its own old generation, 40 % live, with half as much promoted:
    # 8 * 0.5 * (0.4 / 0.6) / 4 CPU-s each, beside its half of the other 7 CPU-s of work, on its own CPU
    each = 8 * 0.5 * (0.4 / 0.6) / 4.0
    changes = Changes({"parallelism": 2})
    assert _model(True).predict(changes) == pytest.approx(7.0 / 2 + each)
    assert _model(False).predict(changes) == pytest.approx(7.5)
    note = _model(True).heap_note(changes)
    assert note is not None and "80 % live" in note and "8.00 CPU-s" in note and "1.33 CPU-s (0.67 per process)" in note
    # the same processes at another CPU share keep their records: no heap note, no relief
    assert _model(True).heap_note(Changes({"cpu_share": 0.5})) is None
    assert _model(True).predict(Changes({"cpu_share": 0.5})) == pytest.approx(30.0)


def _with_heap(tmp_path: Path, heap: object) -> Path:
    target = tmp_path / "parts"
    shutil.copytree(DATA, target)
    doc = json.loads((target / TM_PART).read_text())
    doc["heap"] = heap
    doc["thread_kinds_cpu_s"] = {"task": 3.0, "network": 0.1, "gc": 1.2, "jit": 0.5, "other": 0.2}
    (target / TM_PART).write_text(json.dumps(doc))
    return target


def test_the_reporters_heap_is_kept_with_the_collector(tmp_path: Path) -> None:
    parts = _with_heap(tmp_path, {"max_bytes": 1000, "live_bytes": 800, "live_max_bytes": 900, "old_collections": 10,
                                  "old_collection_s": 2.5, "young_collections": 40, "young_collection_s": 0.5})
    trace = read_metrics(parts / TM_PART)
    (collector,) = [e.garbage_collector for e in trace.environment.executors if e.garbage_collector is not None]
    assert (collector.heap_max_bytes, collector.live_bytes, collector.live_max_bytes) == (1000, 800, 900)
    assert (collector.old_collections, collector.young_collections) == (10, 40)
    # the collector's threads' CPU time, in the old collections' share of the collections' time
    assert heaps(trace) == [Heap(1000, 800, pytest.approx(1.2 * 2.5 / 3.0), pytest.approx(1.2 * 0.5 / 3.0))]


@pytest.mark.parametrize("heap", [[1, 2], {"live_bytes": -5}, {"old_collection_s": "soon"},
                                  {"old_collections": 1.5}, {"max_bytes": 2**70}])
def test_a_malformed_heap_is_one_clear_error(tmp_path: Path, heap: object) -> None:
    parts = _with_heap(tmp_path, heap)
    with pytest.raises(BadInputError, match="malformed garbage collector") as found:
        read_metrics(parts / TM_PART)
    assert TM_PART in str(found.value)


def test_a_larger_heap_relieves_the_old_collections_and_a_smaller_one_adds_to_them() -> None:
    model = _model(True)
    # twice the heap: live 40 % instead of 80 %, and half as much promoted (the young generation fills half as
    # often): 8 * 0.5 * (0.4 / 0.6) / (0.8 / 0.2)
    relieved = 8.0 - 8 * 0.5 * (0.4 / 0.6) / 4.0
    assert model.predict(Changes({"memory": 200 * MB})) == pytest.approx(15.0 - relieved)
    note = model.heap_note(Changes({"memory": 200 * MB}))
    assert note is not None and "a heap of 190.7 MiB" in note and "0.67 CPU-s" in note
    # 90 MB would hold 89 % live data: 8 * (100 / 90) * (0.889 / 0.111) / 4 CPU-s, the machine limit longer than the run
    tight = 8 * (100 / 90) * ((80 / 90) / (10 / 90)) / 4.0
    assert model.predict(Changes({"memory": 90 * MB})) == pytest.approx(15.0 - 8.0 + tight)
    # a heap the live data would overfill: a lower bound, and the note says why
    note = model.heap_note(Changes({"memory": 50 * MB}))
    assert note is not None and "OutOfMemoryError" in note
    # without the heaps' live data the streaming model leaves memory to the other models
    assert _model(False).predict(Changes({"memory": 200 * MB})) is None


def test_a_larger_heap_makes_the_young_collections_rarer_and_more_records_do_not() -> None:
    """The young collections come as often as the young generation, a share of the heap, fills: twice the heap, half
    their CPU time; half the records per process, half in each of twice the processes, none saved in all."""
    heap = Heap(100 * MB, 10 * MB, old_gc_s=0.0, young_gc_s=2.0)
    assert heap.savings(1.0, 2.0) == pytest.approx(1.0)
    assert heap.savings(1.0, 0.5) == pytest.approx(-2.0)
    assert heap.savings(0.5) == pytest.approx(0.0)
    model = StreamingCpu([Chain([6.0])], process_cpu_s=15.0, cpu_count=1, runtime_s=15.0, work_cpu_s=15.0,
                         heaps=[heap])
    assert model.predict(Changes({"memory": 200 * MB})) == pytest.approx(14.0)
    note = model.heap_note(Changes({"memory": 200 * MB}))
    assert note is not None and "the collections took 2.00 CPU-s" in note and "1.00 CPU-s" in note


def test_the_flink_settings_search_the_task_heap_where_the_heap_was_pressed() -> None:
    from crystalperf.core import trace as tr
    from crystalperf.core.predict.base import Baseline
    from crystalperf.core.predict.knobs import FLINK_TASK_HEAP, MIB, FlinkSettings

    from .helpers import make_trace

    def settings(collector: tr.GarbageCollector) -> FlinkSettings:
        trace = make_trace([tr.Operation(id="op", name="op", start=0.0, end=1.0)],
                           executors=[tr.Executor(id="tm", host="h", garbage_collector=collector,
                                                  thread_cpu=tr.ThreadCpu(task=5.0, gc=4.0))])
        trace.application.framework = "flink"
        return FlinkSettings(trace, Baseline.of(trace))

    # a 160 MiB heap (128 MiB of it the framework's default heap), its old generation collected 80 % live
    pressed = settings(tr.GarbageCollector(heap_max_bytes=160 * MIB, live_bytes=128 * MIB, old_collection_s=5.0))
    assert pressed.current[FLINK_TASK_HEAP] == 32 * MIB
    assert pressed.changes({**pressed.current, FLINK_TASK_HEAP: 96 * MIB}).values == {"memory": float(224 * MIB)}
    assert pressed.values(Changes({"memory": float(224 * MIB)}))[FLINK_TASK_HEAP] == 96 * MIB
    grown = {**pressed.current, FLINK_TASK_HEAP: 96 * MIB}
    assert pressed.typed(grown) == ["taskmanager.memory.task.heap.size: 96m"]
    assert pressed.requirements(grown)[0].startswith("needs 64m more heap per TaskManager")
    # no old collections measured: the heap is not searched, and the report says why
    calm = settings(tr.GarbageCollector(heap_max_bytes=160 * MIB, old_collection_s=0.0))
    assert FLINK_TASK_HEAP not in calm.current
    assert any(n.startswith(FLINK_TASK_HEAP) for n in calm.not_searched)
    with pytest.raises(ValueError, match="no Flink setting for memory"):
        calm.values(Changes({"memory": 1e9}))
