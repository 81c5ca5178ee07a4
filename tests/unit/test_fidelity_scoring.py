"""The fidelity benchmark's scoring arithmetic (bench/fidelity/scoring.py), on hand-computed cases; no
framework runs here."""

from __future__ import annotations

import pytest

from bench.fidelity.scoring import (
    JobResult,
    Measurement,
    MethodResult,
    OperationTruth,
    dominant,
    jobs_table,
    mean_absolute_error,
    measured_shares,
    normalise,
    report_vector,
    score_operations,
    summarise,
    summary_table,
)


def test_cpu_bound_job_shares_ignore_time_lost_to_other_processes() -> None:
    # 2 slots for 10 s = 20 slot-seconds, 12 CPU-seconds: the rest went to other processes, not to a resource
    shares = measured_shares(Measurement(wall_s=10, slots=2, cpu_s=12))
    assert shares == {"cpu": 1.0, "disk": 0.0, "network": 0.0, "waiting": 0.0}


def test_disk_bound_job_shares_come_from_the_throttle() -> None:
    # 80 MB through an 8 MB/s throttle: the device was busy 10 s of the 10 s window (fraction 1.0);
    # 5 CPU-seconds over 20 slot-seconds = 0.25; normalised: 1/1.25 = 0.8 and 0.25/1.25 = 0.2
    shares = measured_shares(Measurement(wall_s=10, slots=2, cpu_s=5, read_bytes=80e6, read_bps=8e6))
    assert shares["disk"] == pytest.approx(0.8)
    assert shares["cpu"] == pytest.approx(0.2)
    assert shares["network"] == shares["waiting"] == 0.0


def test_network_share_is_capped_at_one_before_normalising() -> None:
    # 30 MB through a 2.5 MB/s link in 10 s is 1.2 of the window (burst above the rate): capped at 1.0;
    # cpu 2/(10*2) = 0.1 -> network 1/1.1, cpu 0.1/1.1
    shares = measured_shares(Measurement(wall_s=10, slots=2, cpu_s=2, rx_bytes=30e6, link_bps=2.5e6))
    assert shares["network"] == pytest.approx(1 / 1.1)
    assert shares["cpu"] == pytest.approx(0.1 / 1.1)


def test_idle_job_waits_for_the_rest_of_the_slots_time() -> None:
    # 1 CPU-second of 20 slot-seconds = 0.05; nothing read or received; the remaining 0.95 is waiting
    shares = measured_shares(Measurement(wall_s=10, slots=2, cpu_s=1, waits=True))
    assert shares["cpu"] == pytest.approx(0.05)
    assert shares["waiting"] == pytest.approx(0.95)


def test_bytes_without_a_limit_are_not_a_share() -> None:
    # reads the job did not throttle (libraries, jars) have no known device time: they count for nothing
    shares = measured_shares(Measurement(wall_s=10, slots=1, cpu_s=10, read_bytes=1e9))
    assert shares["disk"] == 0.0 and shares["cpu"] == 1.0


def test_a_window_needs_wall_time() -> None:
    with pytest.raises(ValueError):
        measured_shares(Measurement(wall_s=0, slots=2))


def test_normalise_fills_missing_waiting_and_keeps_zeros() -> None:
    assert normalise({"cpu": 3, "disk": 1}) == {"cpu": 0.75, "disk": 0.25, "network": 0.0, "waiting": 0.0}
    assert normalise({}) == {"cpu": 0.0, "disk": 0.0, "network": 0.0, "waiting": 0.0}


def test_dominant_breaks_ties_in_resource_order() -> None:
    assert dominant({"cpu": 0.2, "disk": 0.5, "network": 0.3}) == "disk"
    assert dominant({"cpu": 0.5, "waiting": 0.5}) == "cpu"
    assert dominant({"network": 0.4, "waiting": 0.6}) == "waiting"


def test_mean_absolute_error_over_four_components() -> None:
    # |0.7-1| + |0.2-0| + |0.1-0| + |0-0| = 0.6, over 4 = 0.15
    assert mean_absolute_error({"cpu": 0.7, "disk": 0.2, "network": 0.1}, {"cpu": 1.0}) == pytest.approx(0.15)


def test_report_vector_prefers_shares_then_seconds() -> None:
    assert report_vector({"bottleneck": {"share": {"cpu": 0.5, "disk": 0.5}, "seconds": {"cpu": 9}}})["disk"] == 0.5
    assert report_vector({"bottleneck": {"seconds": {"cpu": 3, "network": 1}}})["network"] == 0.25
    assert report_vector({}) == {"cpu": 0.0, "disk": 0.0, "network": 0.0, "waiting": 0.0}


def test_operations_are_scored_against_their_first_matching_truth() -> None:
    operations = [
        {"name": "stage 1: collect at jobs.py:42", "kind": "stage", "vector": {"cpu": 0.2, "disk": 0.8}},
        {"name": "stage 2: count at jobs.py:420", "kind": "stage", "vector": {"cpu": 0.9, "disk": 0.1}},
        {"name": "job 0: collect at jobs.py:42", "kind": "job", "vector": {"cpu": 1.0}},
        {"name": "stage 3: sum at jobs.py:7", "kind": "stage", "vector": {"cpu": 1.0}},
    ]
    truths = [OperationTruth(r"jobs\.py:42(?!\d)", "disk"), OperationTruth(r"jobs\.py:4", "cpu")]
    rows = score_operations(operations, truths, kinds=("stage",))
    assert rows == [
        {"name": "stage 1: collect at jobs.py:42", "predicted": "disk", "truth": "disk"},
        {"name": "stage 2: count at jobs.py:420", "predicted": "cpu", "truth": "cpu"},
    ]


def test_operations_sharing_a_name_are_one_row_weighted_by_runtime() -> None:
    # "dense0" in three steps: 1 s cpu-heavy, 0.5 s + 0.5 s disk-heavy -> cpu 0.9*1 + 0.2*1 = 1.1 against
    # disk 0.1*1 + 0.8*1 = 0.9: cpu
    operations = [
        {"name": "dense0", "kind": "op", "runtime_s": 1.0, "vector": {"cpu": 0.9, "disk": 0.1}},
        {"name": "dense0", "kind": "op", "runtime_s": 0.5, "vector": {"cpu": 0.2, "disk": 0.8}},
        {"name": "dense0", "kind": "op", "runtime_s": 0.5, "vector": {"cpu": 0.2, "disk": 0.8}},
        {"name": "input pipeline (wait)", "kind": "input", "runtime_s": 0.1, "vector": {"waiting": 1.0}},
    ]
    rows = score_operations(operations, [OperationTruth("dense", "cpu"), OperationTruth("input", "disk")])
    assert rows == [{"name": "dense0", "predicted": "cpu", "truth": "cpu"},
                    {"name": "input pipeline (wait)", "predicted": "waiting", "truth": "disk"}]


def _job(framework: str, name: str, intended: str | None, shares: dict[str, float],
         ours: MethodResult, paper: MethodResult) -> JobResult:
    return JobResult(framework, name, name, intended, shares=normalise(shares),
                     methods={"crystalperf": ours, "paper": paper})


def test_summary_counts_confirmed_jobs_only() -> None:
    results = [
        # cpu job, both right; ours MAE: (0.1+0.1+0+0)/4 = 0.05; paper MAE: (0.3+0.3)/4 = 0.15
        _job("spark", "cpu", "cpu", {"cpu": 1.0},
             MethodResult("cpu", normalise({"cpu": 0.9, "disk": 0.1}),
                          [{"name": "s", "predicted": "cpu", "truth": "cpu"}]),
             MethodResult("cpu", normalise({"cpu": 0.7, "disk": 0.3}),
                          [{"name": "s", "predicted": "cpu", "truth": "cpu"}])),
        # idle job: ours says waiting (right), the paper cpu (wrong); ours MAE 0, paper (1+1)/4 = 0.5
        _job("spark", "idle", "waiting", {"waiting": 1.0},
             MethodResult("waiting", normalise({"waiting": 1.0}), [{"name": "s", "predicted": "waiting",
                                                                     "truth": "waiting"}]),
             MethodResult("cpu", normalise({"cpu": 1.0}), [{"name": "s", "predicted": "cpu", "truth": "waiting"}])),
        # a disk job whose counters say cpu: not confirmed, not counted
        _job("flink", "disk", "disk", {"cpu": 0.9, "disk": 0.1},
             MethodResult("cpu", normalise({"cpu": 1.0})), MethodResult("cpu", normalise({"cpu": 1.0}))),
        # mixed: no intended resource, the measurement decides (disk)
        _job("flink", "mixed", None, {"cpu": 0.4, "disk": 0.6},
             MethodResult("disk", normalise({"cpu": 0.4, "disk": 0.6})),
             MethodResult("cpu", normalise({"cpu": 0.6, "disk": 0.4}))),
    ]
    summary = summarise(results)
    spark = summary["spark"]
    assert spark["crystalperf"] == {"jobs": 2, "verdict_accuracy": 1.0, "operations": 2,
                                    "operation_accuracy": 1.0, "mae": pytest.approx(0.025)}
    assert spark["paper"]["verdict_accuracy"] == 0.5
    assert spark["paper"]["operation_accuracy"] == 0.5
    assert spark["paper"]["mae"] == pytest.approx(0.325)
    assert summary["flink"]["crystalperf"]["jobs"] == 1
    assert summary["flink"]["paper"]["verdict_accuracy"] == 0.0
    # paper's flink mixed: (0.2 + 0.2) / 4 = 0.1
    assert summary["flink"]["paper"]["mae"] == pytest.approx(0.1)
    assert summary["overall"]["crystalperf"]["jobs"] == 3
    assert summary["overall"]["crystalperf"]["verdict_accuracy"] == 1.0
    assert summary["overall"]["paper"]["verdict_accuracy"] == pytest.approx(1 / 3)
    table = summary_table(summary)
    assert table.splitlines()[-1].startswith("| overall | 3 | 100 % | 33 % |")
    rows = jobs_table(results)
    assert "| flink/disk | disk | 0.90/0.10/0.00/0.00 | NO |" in rows


def test_a_method_that_failed_is_left_out_of_its_scores() -> None:
    result = _job("tensorflow", "cpu", "cpu", {"cpu": 1.0}, MethodResult("cpu", normalise({"cpu": 1.0})),
                  MethodResult(error="analysis failed"))
    summary = summarise([result])
    assert summary["tensorflow"]["crystalperf"]["jobs"] == 1
    assert summary["tensorflow"]["paper"] == {"jobs": 0, "verdict_accuracy": None, "operations": 0,
                                              "operation_accuracy": None, "mae": None}
    skipped = JobResult("flink", "cpu", "cpu", "cpu", skipped="framework not installed")
    assert summarise([skipped])["overall"]["crystalperf"]["jobs"] == 0
    assert "skipped: framework not installed" in jobs_table([skipped])


def test_a_truth_limited_by_an_attribute_leaves_other_operations_unscored() -> None:
    scan = OperationTruth("spark_jobs.py:74", "disk", ("rdd_lineage", r"FileScanRDD"))
    operations = [
        {"name": "stage 1: collect at spark_jobs.py:74", "vector": {"disk": 0.9, "cpu": 0.1}, "runtime_s": 12,
         "attributes": {"rdd_lineage": "2 FileScanRDD @ collect"}},
        {"name": "stage 2: collect at spark_jobs.py:74", "vector": {"cpu": 0.9, "disk": 0.1}, "runtime_s": 0.2,
         "attributes": {"rdd_lineage": "6 ShuffledRowRDD @ collect"}},
    ]
    assert score_operations(operations, [scan]) == [
        {"name": "stage 1: collect at spark_jobs.py:74", "predicted": "disk", "truth": "disk"}]
