"""Vector aggregation (paper §4.1), critical path on a DAG with parallel branches, bottleneck."""

import pytest

from crystalperf.core import trace as tr
from crystalperf.core.attribution.classify import FixedClassifier
from crystalperf.core.attribution.sources import FrameResolver, LocateContext
from crystalperf.core.predict import Changes, Predictor
from crystalperf.core.predict.io import DISK_BUFFER_BYTES, DISK_BUFFER_OVERHEAD_S
from crystalperf.core.profile.bottleneck import find_bottleneck, level_critical_path
from crystalperf.core.profile.dag import build_profile
from crystalperf.core.resources import ResourceVector

from .helpers import make_trace, op, task

NET = ResourceVector(0.0, 0.0, 1.0)
CPU = ResourceVector(1.0, 0.0, 0.0)
DISK = ResourceVector(0.0, 1.0, 0.0)


def _samples(rows):
    frames = [tr.Frame(name="net.send", language="java"), tr.Frame(name="cpu.hash", language="java"),
              tr.Frame(name="<native>", language="native")]
    return tr.StackSamples(
        origin=0, frames=frames, stacks=[[2, 0], [1]], keys=[tr.SampleKey(operation="a"), tr.SampleKey(operation="b")],
        key=[r[0] for r in rows], bucket=[r[1] for r in rows], stack=[r[2] for r in rows], count=[r[3] for r in rows],
    )


CLASSIFIER = FixedClassifier({"net.": NET, "cpu.": CPU})


def test_interval_means_then_time_weighted_mean():
    # Operation a: bucket 0 has 3 network + 1 CPU samples -> (0.25, 0, 0.75); bucket 1 has 2 CPU samples.
    # Time-weighted (4 and 2 samples): cpu = (4*0.25 + 2*1)/6 = 0.5, network = 0.5.
    samples = _samples([(0, 0, 0, 3), (0, 0, 1, 1), (0, 1, 1, 2)])
    trace = make_trace([op("a", 0, 2), op("b", 0, 2)], samples=samples)
    profile = build_profile(trace, CLASSIFIER, locators=[])
    a = profile.top.nodes["a"].vector
    assert a.source == "samples" and a.samples == 6
    assert a.vector.cpu == pytest.approx(0.5) and a.vector.network == pytest.approx(0.5)
    assert [f.function.qualified_name for f in a.functions] == ["net.send", "cpu.hash"]
    # b has no samples and no metrics: the default (CPU) and it says so.
    assert profile.top.nodes["b"].vector.source == "default"


def test_native_frames_are_skipped_when_scanning_down():
    class Locator:
        name = "test"

        def locate(self, frame, context):
            from crystalperf.core.attribution.classify import FunctionSource
            return FunctionSource(frame.name, "java", "code")

    frames = [tr.Frame(name="libc.so!read", language="native"), tr.Frame(name="a.B.c", language="java")]
    resolver = FrameResolver([Locator()], LocateContext())
    index, found = resolver.resolve_stack([0, 1], frames)
    assert index == 1 and found.qualified_name == "a.B.c"


def test_locator_errors_are_reported_per_frame_not_raised():
    class Broken:
        name = "broken"

        def locate(self, frame, context):
            raise OSError("corrupt jar")

    context = LocateContext()
    resolver = FrameResolver([Broken()], context)
    assert resolver.resolve_stack([0], [tr.Frame(name="a.B.c", language="java")]) is None
    assert "corrupt jar" in context.problems[0]


def test_metrics_fallback():
    # 10 s run: 6 s CPU, 1 s fetch wait, the rest (3 s) split by bytes: 2/3 disk, 1/3 network.
    t = task("t", 0, 10, run_time_s=10, cpu_time_s=6, network_wait_s=1, input_bytes=200, shuffle_remote_read_bytes=100)
    profile = build_profile(make_trace([op("s", 0, 10, tasks=[t])]), CLASSIFIER, locators=[])
    vec = profile.top.nodes["s"].vector
    assert vec.source == "metrics"
    assert vec.vector.cpu == pytest.approx(0.6)
    assert vec.vector.disk == pytest.approx(0.2)
    assert vec.vector.network == pytest.approx(0.2)


def _diamond():
    # A(0-2) -> B(2-10) -> D(10-12); A -> C(2-5) -> D. The long branch is A, B, D.
    ops = [
        op("A", 0, 2, tasks=[task("a", 0, 2, run_time_s=2, cpu_time_s=2)]),
        op("B", 2, 10, ["A"], tasks=[task("b", 2, 10, run_time_s=8, cpu_time_s=2, disk_time_s=6)]),
        op("C", 2, 5, ["A"], tasks=[task("c", 2, 5, run_time_s=3, cpu_time_s=0, network_wait_s=3)]),
        op("D", 10, 12, ["B", "C"], tasks=[task("d", 10, 12, run_time_s=2, cpu_time_s=2)]),
    ]
    return make_trace(ops, end=13, total_slots=1)


def test_critical_path_takes_the_long_branch():
    profile = build_profile(_diamond(), CLASSIFIER, locators=[])
    assert level_critical_path(profile.top) == ["A", "B", "D"]
    b = find_bottleneck(profile)
    # A: 2 s CPU; B: 2 s CPU + 6 s disk; D: 2 s CPU. C (network) is off the path.
    assert b.seconds == pytest.approx({"cpu": 6.0, "disk": 6.0, "network": 0.0, "waiting": 0.0})
    assert b.unattributed_s == pytest.approx(1.0)
    assert b.operation_share(profile.top.nodes["B"]) == pytest.approx(8 / 12)


def test_disk_bound_when_disk_dominates():
    trace = _diamond()
    trace.operations[1].tasks[0].metrics.update(cpu_time_s=1, disk_time_s=7)
    b = find_bottleneck(build_profile(trace, CLASSIFIER, locators=[]))
    assert b.resource == "disk" and "disk-bound" in b.sentence()


def test_retraversal_moves_successors_and_keeps_parallel_branches():
    predictor = Predictor(build_profile(_diamond(), CLASSIFIER, locators=[]))
    assert predictor.simulate(Changes({})) == pytest.approx(13)
    # Disk 2x faster than the assumed 500 MB/s: B's 6 s of disk moved 3 GB in 22,888 read-ahead
    # buffers of 128 KiB whose per-buffer time stays; the rest halves. C still ends first.
    t_p = 3e9 / DISK_BUFFER_BYTES * DISK_BUFFER_OVERHEAD_S
    new_b = 2 + t_p + (6 - t_p) / 2
    assert predictor.simulate(Changes({"disk": 1e9})) == pytest.approx(2 + new_b + 2 + 1)


def test_hierarchy_and_implicit_job_order():
    # Two jobs one after the other (no declared parents), each with stages.
    job0 = op("j0", 0, 4, children=[op("s0", 0, 1), op("s1", 1, 4, ["s0"])])
    job1 = op("j1", 5, 7, children=[op("s2", 5, 7)])
    profile = build_profile(make_trace([job0, job1], end=8), CLASSIFIER, locators=[])
    assert list(profile.top.graph.edges) == [("j0", "j1")]
    b = find_bottleneck(profile)
    assert [p.path for p in b.path] == ["j0/s0", "j0/s1", "j1/s2"]
    assert b.unattributed_s == pytest.approx(2.0)


def test_pipelined_operators_count_their_busy_time_not_their_span():
    # A streaming pipeline: all three operators run for the whole 10 s; the map is busy 8 s of it.
    def operator(id, parents, start, busy, cpu):
        t = task(f"{id}-0", start, 10, run_time_s=busy, cpu_time_s=cpu)
        return op(id, start, 10, parents, tasks=[t], parallelism=1)

    ops = [operator("src", [], 0.0, 2, 2), operator("map", ["src"], 0.1, 8, 8), operator("sink", ["map"], 0.2, 1, 1)]
    profile = build_profile(make_trace(ops, end=10), CLASSIFIER, locators=[])
    assert profile.top.pipelined
    b = find_bottleneck(profile)
    assert b.seconds["cpu"] == pytest.approx(11.0)
    assert "most of it in map (8.00 s)" in b.sentence()


def test_empty_job_has_no_bottleneck_to_name():
    b = find_bottleneck(build_profile(make_trace([op("x", 0, 0)], end=0), CLASSIFIER, locators=[]))
    assert b.sentence().startswith("No operation time was recorded")


def test_a_failing_classifier_degrades_to_the_keyword_classifier_and_says_so():
    from crystalperf.core.analysis import analyze

    class Broken:
        version = "broken-1"

        def classify(self, functions):
            raise ValueError("unsupported language 'unknown'")

    samples = _samples([(0, 0, 0, 3), (1, 0, 1, 2)])
    trace = make_trace([op("a", 0, 2), op("b", 0, 2)], samples=samples)
    report = analyze(trace, classifier=Broken(), scenarios=[]).report
    # The keyword classifier reads "send" as network and knows nothing of "hash" (CPU).
    vectors = {o["id"]: o["vector"] for o in report["operations"]}
    assert vectors["a"]["network"] >= 0.5 > vectors["b"]["network"] and vectors["b"]["cpu"] >= 0.5
    assert any("broken-1 failed" in w and "keyword" in w for w in report["warnings"])


def test_a_hook_can_rule_out_resources_and_the_rest_is_renormalised():
    # a's samples give (0.5, 0, 0.5) as in the test above; the hook says a cannot use the network
    # (one process, no collectives), so its vector becomes pure CPU. b keeps its default.
    samples = _samples([(0, 0, 0, 3), (0, 0, 1, 1), (0, 1, 1, 2)])
    trace = make_trace([op("a", 0, 2, attributes={"resources": "cpu,disk"}), op("b", 0, 2)], samples=samples)
    a = build_profile(trace, CLASSIFIER, locators=[]).top.nodes["a"].vector
    assert tuple(a.vector) == pytest.approx((1.0, 0.0, 0.0, 0.0))
    assert a.source == "samples" and a.samples == 6  # still from the samples, which still name the functions
    assert [f.function.qualified_name for f in a.functions] == ["net.send", "cpu.hash"]


def test_a_hook_measured_split_wins_over_classified_samples():
    # b's samples (2 CPU) would say pure CPU; the hook measured 1 s CPU and 3 s disk of its 4 s, and
    # asked for its metrics: (0.25, 0.75, 0).
    samples = _samples([(1, 0, 1, 2)])
    measured = op("b", 0, 4, metrics={"run_time_s": 4.0, "cpu_time_s": 1.0, "disk_time_s": 3.0},
                  attributes={"vector_source": "metrics"})
    b = build_profile(make_trace([op("a", 0, 2), measured], samples=samples), CLASSIFIER, locators=[]).top.nodes["b"].vector
    assert tuple(b.vector) == pytest.approx((0.25, 0.75, 0.0, 0.0))
    assert b.source == "metrics" and [f.function.qualified_name for f in b.functions] == ["cpu.hash"]


def test_a_job_that_mostly_waited_is_not_called_bound() -> None:
    from crystalperf.core.profile.bottleneck import Bottleneck

    idle = Bottleneck("cpu", {"cpu": 0.12, "disk": 0.0, "network": 0.0, "waiting": 0.0}, unattributed_s=30.6,
                      total_runtime_s=30.72, path=[], top_path=[])
    assert idle.sentence().startswith("Most of the run (30.60 s of 30.72 s) was outside")
    busy = Bottleneck("cpu", {"cpu": 9.0, "disk": 1.0, "network": 0.0, "waiting": 0.0}, unattributed_s=2.0,
                      total_runtime_s=12.0, path=[], top_path=[])
    assert busy.sentence().startswith("The job is cpu-bound: 9.00 s of the 10.00 s")


def test_a_run_mostly_outside_its_operations_says_where_that_time_lay() -> None:
    # 6 s of start-up before the first job, 2 s of the driver's own work between the two, 1 s of stopping.
    jobs = [op("a", 6, 7, tasks=[task("a1", 6, 7, cpu_time_s=1.0)]),
            op("b", 9, 10, tasks=[task("b1", 9, 10, cpu_time_s=1.0)])]
    bottleneck = find_bottleneck(build_profile(make_trace(jobs, end=11.0), CLASSIFIER, locators=[]))
    assert bottleneck.sentence().startswith(
        "Most of the run (9.00 s of 11.00 s) was outside the operations' busy time (6.00 s before the first "
        "(start-up), 2.00 s between them (the program's or driver's own work, scheduling), 1.00 s after the last "
        "(stopping)); of the rest, "), bottleneck.sentence()


def _steps(count: int) -> tr.Trace:
    """``count`` training steps of 5 ms, one after another: 'dense' computes 1 ms, then 'adam' 4 ms."""
    steps = []
    for i in range(count):
        t = i * 0.005
        children = [tr.Operation(id=f"s{i}-dense", name="dense", kind="op", start=t, end=t + 0.001,
                                 tasks=[task(f"s{i}-d", t, t + 0.001, cpu_time_s=0.001)]),
                    tr.Operation(id=f"s{i}-adam", name="adam", kind="op", start=t + 0.001, end=t + 0.005,
                                 parents=[f"s{i}-dense"], tasks=[task(f"s{i}-a", t + 0.001, t + 0.005, cpu_time_s=0.004)])]
        steps.append(tr.Operation(id=f"s{i}", name=f"step {i}", kind="step", start=t, end=t + 0.005,
                                  parents=[f"s{i - 1}"] if i else [], children=children))
    return make_trace(steps)


def test_an_operation_repeated_in_every_step_is_named_once_with_all_its_seconds():
    b = find_bottleneck(build_profile(_steps(10), CLASSIFIER, locators=[]))
    assert b.heaviest("cpu") is not None and b.heaviest("cpu")[:2] == ("adam", pytest.approx(0.04))
    # seconds under a tenth of a second in milliseconds, not "0.00 s"
    assert "most of it in adam (40 ms over 10 runs)" in b.sentence()
    assert "50 ms of the 50 ms on its critical path" in b.sentence()
    single = find_bottleneck(build_profile(_steps(1), CLASSIFIER, locators=[]))
    assert "most of it in adam (4 ms)" in single.sentence()


def test_a_stage_that_never_ran_after_its_parent_makes_no_cycle():
    """A job cancelled while its first stage ran (a streaming query stopped): the stage after it never ran and
    carries the job's start, before the parent it declares; time alone would put it first."""
    ran = op("stage-8", 0.2, 1.0, tasks=[task("t", 0.2, 1.0, cpu_time_s=0.8)])
    never = op("stage-9-skipped-in-job-4", 0.0, 0.0, parents=["stage-8"], status="skipped")
    job = tr.Operation(id="job-4", name="job 4", kind="job", start=0.0, end=1.0, children=[ran, never])
    profile = build_profile(make_trace([job]), CLASSIFIER, locators=[])
    level = profile.top.nodes["job-4"].children
    assert list(level.graph.edges) == [("stage-8", "stage-9-skipped-in-job-4")]
    assert find_bottleneck(profile).seconds["cpu"] == pytest.approx(0.8)
