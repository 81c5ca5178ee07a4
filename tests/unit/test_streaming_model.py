"""The streaming throughput model: hand-computed limits of a two-chain pipeline."""

from __future__ import annotations

import pytest

from crystalperf.core.predict.base import Changes
from crystalperf.core.predict.streaming import Chain, StreamingCpu


def pipeline(runtime_s: float = 10.0, source: tuple[float, float] = (6.0, 6.0)) -> StreamingCpu:
    # source chain 6 + 6 CPU-s, sink chain 2 + 2, 18 CPU-s for the whole process on 2 CPUs:
    # traced limit T = max(busiest thread 6, machine 18 / 2 = 9) = 9
    return StreamingCpu([Chain(list(source)), Chain([2.0, 2.0])], process_cpu_s=18.0, cpu_count=2,
                        runtime_s=runtime_s)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"parallelism": 1}, 12.0),  # one thread does the source's 12 CPU-s: T' = 12 > D = 10
        ({"cpu_share": 0.5}, 18.0),  # machine limit 18 / (2 * 0.5) = 18
        ({"cpu_share": 0.75}, 12.0),  # 18 / 1.5 = 12
        ({"cpu_speed": 2.0}, 5.5),  # T' = 4.5 saves 4.5 s of the limit: 10 - 4.5
        ({"parallelism": 4}, 10.0),  # threads 3 CPU-s each, the machine still needs 9: unchanged
        ({"parallelism": 1, "cpu_share": 0.75}, 12.0),  # max(12, 12)
    ],
)
def test_limits(changes: dict[str, float], expected: float) -> None:
    assert pipeline().predict(Changes(changes)) == pytest.approx(expected)


def test_a_job_paced_by_its_input_keeps_its_runtime_until_a_limit_passes_it() -> None:
    paced = pipeline(runtime_s=30.0)
    assert paced.predict(Changes({"cpu_share": 0.75})) == pytest.approx(30.0)  # T' = 12 < 30
    assert paced.predict(Changes({"cpu_share": 0.25})) == pytest.approx(36.0)  # 18 / 0.5
    assert "paced by its input" in paced.note()


def test_skewed_chain_keeps_its_hot_subtask_but_one_subtask_does_all() -> None:
    skewed = pipeline(source=(8.0, 4.0))  # T = max(8, 9) = 9
    assert skewed.predict(Changes({"parallelism": 1})) == pytest.approx(12.0)  # min(12, 16)
    assert skewed.predict(Changes({"parallelism": 4, "cpu_share": 0.25})) == pytest.approx(36.0)


def test_other_resources_are_left_to_the_resource_models() -> None:
    assert pipeline().predict(Changes({"network": 1e6})) is None
    assert pipeline().predict(Changes({"parallelism": 1, "disk": 1e6})) is None


def test_the_predictor_uses_it_for_a_flink_trace_with_cpu_times() -> None:
    from crystalperf.core import trace as tr
    from crystalperf.core.predict import Predictor
    from crystalperf.core.profile import build_profile
    from tests.unit.helpers import make_trace, op, task
    from tests.unit.test_io_memory_models import FixedClassifier

    def chain(id: str, parents: list[str], cpu: float) -> tr.Operation:
        tasks = [task(f"{id}#{i}", 0, 10, run_time_s=10, cpu_time_s=cpu) for i in range(2)]
        return op(id, 0, 10, parents, tasks=tasks, parallelism=2)

    trace = make_trace([chain("source", [], 6.0), chain("sink", ["source"], 2.0)], end=10, cpu_count=2)
    trace.application.framework = "flink"
    trace.streaming = tr.Streaming(latency_s=10.0)
    trace.metrics["cpu_utilization"] = 1.8  # 18 CPU-s over the 10 s
    predictor = Predictor(build_profile(trace, FixedClassifier({}), locators=[]))
    prediction = predictor.predict(Changes({"parallelism": 1}))
    assert prediction.crystalperf.runtime_s == pytest.approx(12.0)
    assert any("streaming throughput" in note for note in prediction.notes)
    # the baselines stay what they are: linear scaling and replay without the CPU times
    assert prediction.linear.runtime_s == pytest.approx(20.0)
    assert predictor.predict(Changes({"network": 1e6})).crystalperf.runtime_s > 0
