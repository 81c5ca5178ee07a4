"""Synthetic Spark-shaped traces with realistic numbers, for benchmarks, fuzzing and examples.

Real traces recorded by the hooks live in ``tests/data/``; this generator exists so the analysis can
be measured at sizes no test job reaches (10k tasks, a million samples) and so tests can build
traces with known answers.
"""

from __future__ import annotations

import random

from crystalperf.core import trace as tr

# Stacks as a Spark task thread shows them, top frame first, with the resource a reader would expect.
_STACKS: dict[str, list[tuple[str, str, int]]] = {
    "cpu": [
        ("java.util.zip.Inflater.inflateBytesBytes", "Inflater.java", 0),
        ("java.util.zip.Inflater.inflate", "Inflater.java", 378),
        ("java.util.zip.GZIPInputStream.read", "GZIPInputStream.java", 117),
        ("org.apache.spark.sql.execution.datasources.text.TextFileFormat.readFile", "TextFileFormat.scala", 120),
        ("org.apache.spark.executor.Executor$TaskRunner.run", "Executor.scala", 620),
    ],
    "cpu2": [
        ("org.apache.spark.sql.catalyst.expressions.GeneratedClass$SpecificUnsafeProjection.apply", "", 0),
        ("scala.collection.Iterator$$anon$10.next", "Iterator.scala", 594),
        ("org.apache.spark.sql.execution.aggregate.HashAggregateExec.doConsume", "HashAggregateExec.scala", 201),
        ("org.apache.spark.executor.Executor$TaskRunner.run", "Executor.scala", 620),
    ],
    "disk": [
        ("java.io.FileOutputStream.writeBytes", "FileOutputStream.java", 0),
        ("java.io.FileOutputStream.write", "FileOutputStream.java", 349),
        ("org.apache.spark.storage.DiskBlockObjectWriter.write", "DiskBlockObjectWriter.scala", 310),
        ("org.apache.spark.shuffle.sort.UnsafeShuffleWriter.writeSortedFile", "UnsafeShuffleWriter.java", 240),
        ("org.apache.spark.executor.Executor$TaskRunner.run", "Executor.scala", 620),
    ],
    "network": [
        ("sun.nio.ch.SocketDispatcher.read0", "SocketDispatcher.java", 0),
        ("sun.nio.ch.SocketChannelImpl.read", "SocketChannelImpl.java", 389),
        ("org.apache.spark.network.client.TransportClient.fetchChunk", "TransportClient.java", 140),
        ("org.apache.spark.storage.ShuffleBlockFetcherIterator.next", "ShuffleBlockFetcherIterator.scala", 700),
        ("org.apache.spark.executor.Executor$TaskRunner.run", "Executor.scala", 620),
    ],
}


def spark_like_trace(
    *,
    jobs: int = 2,
    stages_per_job: int = 2,
    tasks_per_stage: int = 8,
    slots: int = 4,
    samples_per_second: float = 10.0,
    seed: int = 0,
    start: float = 1_700_000_000.0,
    keep_tasks: int | None = None,
) -> tr.Trace:
    """A Spark-shaped trace: sequential jobs of chained stages; map stages read gzip (CPU), write
    shuffle files (disk); reduce stages fetch over the network and aggregate (CPU).

    ``keep_tasks``: record only a uniform sample of that many tasks per stage, as a hook bounding its memory
    does (schema 1.4): the stage then carries ``task_count`` and the exact totals of its tasks' metrics, and
    its samples are keyed by the stage alone."""
    rng = random.Random(seed)
    frames: list[tr.Frame] = []
    frame_index: dict[str, int] = {}
    stacks: list[list[int]] = []
    stack_index: dict[str, int] = {}
    for kind, stack in _STACKS.items():
        ids = []
        for name, file, line in stack:
            if name not in frame_index:
                frame_index[name] = len(frames)
                lang = "scala" if file.endswith(".scala") else "java"
                frames.append(tr.Frame(name=name, file=file or None, line=line or None, language=lang))
            ids.append(frame_index[name])
        stack_index[kind] = len(stacks)
        stacks.append(ids)

    keys: list[tr.SampleKey] = []
    key_col: list[int] = []
    bucket_col: list[int] = []
    stack_col: list[int] = []
    count_col: list[int] = []
    bucket_s = 1.0
    stage_rows: dict[tuple[int, int, int], int] = {}  # a sampled stage's rows, to add to

    operations: list[tr.Operation] = []
    clock = start + 0.8  # driver start-up before the first job
    stage_no = 0
    task_no = 0
    for j in range(jobs):
        job_start = clock
        stages: list[tr.Operation] = []
        for s in range(stages_per_job):
            stage_id = f"stage-{stage_no}"
            stage_no += 1
            is_map = s % 2 == 0
            mix = {"cpu": 0.55, "disk": 0.35, "network": 0.0, "cpu2": 0.10} if is_map else \
                  {"cpu": 0.0, "disk": 0.05, "network": 0.45, "cpu2": 0.50}
            stage_start = clock + 0.02
            free = [stage_start] * slots
            tasks: list[tr.Task] = []
            sampled = keep_tasks is not None and keep_tasks < tasks_per_stage
            kept = set(rng.sample(range(tasks_per_stage), keep_tasks)) if sampled and keep_tasks else set()
            totals: dict[str, float] = {}
            stage_key = -1
            last_end = stage_start
            for i in range(tasks_per_stage):
                slot = min(range(slots), key=lambda k: free[k])
                t_start = free[slot] + 0.003
                first_wave = i < slots
                duration = rng.uniform(0.8, 1.2) * (1.0 if is_map else 0.7) * (1.25 if first_wave else 1.0)
                t_end = t_start + duration
                free[slot] = t_end
                task_id = f"{task_no}"
                task_no += 1
                run = duration * 0.97
                metrics = {
                    tr.METRIC_RUN_TIME: run,
                    tr.METRIC_CPU_TIME: run * (mix["cpu"] + mix["cpu2"]),
                    tr.METRIC_NETWORK_WAIT: run * mix["network"],
                    tr.METRIC_DISK_TIME: run * mix["disk"],
                    tr.METRIC_INPUT_BYTES: 64e6 if is_map else 0.0,
                    tr.METRIC_SHUFFLE_WRITE_BYTES: 20e6 if is_map else 0.0,
                    tr.METRIC_SHUFFLE_READ_BYTES: 0.0 if is_map else 20e6,
                    tr.METRIC_SHUFFLE_REMOTE_READ_BYTES: 0.0 if is_map else 15e6,
                    tr.METRIC_SPILL_DISK_BYTES: 8e6 if (is_map and i % 3 == 0) else 0.0,
                    tr.METRIC_SPILL_MEMORY_BYTES: 24e6 if (is_map and i % 3 == 0) else 0.0,
                }
                last_end = max(last_end, t_end)
                if sampled:
                    for name, value in metrics.items():
                        totals[name] = totals.get(name, 0.0) + value
                if not sampled or i in kept:
                    tasks.append(tr.Task(id=task_id, index=i, executor="driver", host="localhost", slot=slot,
                                         start=t_start, end=t_end, metrics=metrics))
                if samples_per_second > 0:
                    if sampled and stage_key >= 0:
                        key = stage_key
                    else:
                        key = len(keys)
                        keys.append(tr.SampleKey(operation=stage_id, task=None if sampled else task_id))
                        stage_key = key if sampled else -1
                    n = max(1, round(duration * samples_per_second))
                    per_bucket: dict[tuple[int, int], int] = {}
                    for k in range(n):
                        t = t_start + (k + 0.5) * duration / n
                        kind = rng.choices(list(mix), weights=list(mix.values()))[0]
                        b = int((t - start) / bucket_s)
                        per_bucket[(b, stack_index[kind])] = per_bucket.get((b, stack_index[kind]), 0) + 1
                    for (b, st), c in per_bucket.items():
                        row = stage_rows.get((key, b, st)) if sampled else None
                        if row is not None:
                            count_col[row] += c
                            continue
                        if sampled:
                            stage_rows[(key, b, st)] = len(count_col)
                        key_col.append(key)
                        bucket_col.append(b)
                        stack_col.append(st)
                        count_col.append(c)
            stage_end = last_end + 0.01
            parents = [stages[-1].id] if stages else []
            stages.append(tr.Operation(id=stage_id, name=f"{'map' if is_map else 'reduce'} stage {stage_no - 1}",
                                       kind="stage", parents=parents, start=stage_start, end=stage_end,
                                       tasks=tasks, parallelism=tasks_per_stage,
                                       task_count=tasks_per_stage if sampled else None, metrics=totals,
                                       attributes={"call_site": f"query.py:{10 + s}"}))
            clock = stage_end
        operations.append(tr.Operation(id=f"job-{j}", name=f"job {j}", kind="job", start=job_start,
                                       end=clock + 0.01, children=stages))
        clock += 0.25  # driver work between jobs
    end = clock + 0.3
    samples = tr.StackSamples(
        interval_s=1.0 / samples_per_second if samples_per_second > 0 else 0.1, bucket_s=bucket_s, origin=start,
        frames=frames, stacks=stacks, keys=keys, key=key_col, bucket=bucket_col, stack=stack_col,
        count=count_col,
    ) if samples_per_second > 0 else None
    return tr.Trace(
        producer=tr.Producer(version="synthetic", hook="crystalperf.core.trace.synthetic"),
        application=tr.Application(framework="spark", framework_version="4.3.0", id="app-synthetic-0001",
                                   name="synthetic TPC-H-like", start=start, end=end, status="succeeded"),
        environment=tr.Environment(
            hosts=["localhost"], executors=[tr.Executor(id="driver", host="localhost", cores=slots,
                                                        memory_bytes=1 << 30)],
            cores_per_executor=slots, total_slots=slots, cpu_count=slots, memory_bytes=1 << 30,
        ),
        operations=operations,
        samples=samples,
        metrics={"cached_bytes": 0.0},
    )


def dag_trace(*, operations: int, shape: str = "flat", tasks_per_operation: int = 2, slots: int = 4,
              seed: int = 0, start: float = 1_700_000_000.0) -> tr.Trace:
    """A trace of many small operations on one level: ``flat``, none declaring parents (a driver submitting
    jobs one after another, some overlapping: their order is implicit), or ``deep``, a chain each declaring the
    one before as its parent."""
    if shape not in ("flat", "deep"):
        raise ValueError(f"shape must be flat or deep, not {shape!r}")
    rng = random.Random(seed)
    ops: list[tr.Operation] = []
    clock = start
    for i in range(operations):
        span = rng.uniform(0.1, 1.0)
        tasks = []
        for k in range(tasks_per_operation):
            duration = span * rng.uniform(0.5, 1.0)
            tasks.append(tr.Task(id=f"{i}.{k}", start=clock, end=clock + duration, slot=k % slots, metrics={
                tr.METRIC_RUN_TIME: duration * 0.97, tr.METRIC_CPU_TIME: duration * 0.6,
                tr.METRIC_DISK_TIME: duration * 0.2, tr.METRIC_INPUT_BYTES: 1e6}))
        parents = [ops[-1].id] if shape == "deep" and ops else []
        ops.append(tr.Operation(id=f"op-{i}", name=f"operation {i}", kind="job", parents=parents, start=clock,
                                end=clock + span, tasks=tasks))
        # flat: the next one mostly starts after this one ended, now and then while it still runs
        clock += span + (0.01 if shape == "deep" or rng.random() < 0.8 else -span / 2)
    return tr.Trace(
        producer=tr.Producer(version="synthetic", hook="crystalperf.core.trace.synthetic"),
        application=tr.Application(framework="spark", framework_version="4.3.0", id="app-synthetic-dag",
                                   name=f"synthetic {shape} DAG", start=start, end=clock + 0.5, status="succeeded"),
        environment=tr.Environment(hosts=["localhost"], cores_per_executor=slots, total_slots=slots, cpu_count=slots),
        operations=ops,
    )
