"""``crystalperf fleet --engine spark``: the fleet's analyses as a PySpark job, on whatever master is configured
(``--master``, ``--conf``, or Spark's own configuration: ``spark-defaults.conf``, ``PYSPARK_SUBMIT_ARGS``).

The driver is the ``crystalperf fleet`` process: it finds the logs and keeps the cache as the local engine does,
and hands the executors the logs to analyse by path. Each task runs the local engine's worker (one at a time,
:mod:`crystalperf.fleet.worker`) on its partition, with the driver's classifier, time and memory bounds and
limits, so a row is the same whichever engine made it; the rows come back to the driver, which writes the table.
The logs must be readable at the same paths on the executors (a shared file system), and crystalperf installed in
the executors' Python.

The logs go out in waves of at most :data:`WAVE`, each spread over ``defaultParallelism x 4`` partitions (the
largest logs first, dealt round the partitions), so that the driver holds one wave's rows at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from functools import partial

from crystalperf.core.errors import FrameworkNotInstalledError
from crystalperf.fleet.cache import Result
from crystalperf.fleet.pool import Options
from crystalperf.fleet.row import Source

WAVE = 1024
PARTITIONS_PER_CORE = 4
APP_NAME = "crystalperf-fleet"


def _partition(options_json: str, lines: Iterable[str]) -> Iterator[str]:
    """On an executor: analyse the partition's logs with one worker; their results as JSON lines."""
    from crystalperf.fleet import pool

    options = Options.from_json(options_json)
    options.jobs = 1
    sources = [Source(**json.loads(line)) for line in lines]
    for result in pool.analyse(sources, options):
        yield result.to_json()


def dealt(sources: Sequence[Source], partitions: int) -> list[Source]:
    """The sources, largest first, ordered so that cutting the list into ``partitions`` contiguous slices as
    ``parallelize`` does (slice ``i`` from ``i * n // partitions``) deals them round the partitions."""
    ordered = sorted(sources, key=lambda s: (-s.size, s.path))
    n = len(ordered)
    room = [((p + 1) * n) // partitions - (p * n) // partitions for p in range(partitions)]
    slices: list[list[Source]] = [[] for _ in range(partitions)]
    p = 0
    for source in ordered:
        while len(slices[p]) >= room[p]:
            p = (p + 1) % partitions
        slices[p].append(source)
        p = (p + 1) % partitions
    return [source for part in slices for source in part]


def analyse(sources: Sequence[Source], options: Options) -> Iterator[Result]:
    """The Spark engine (:data:`crystalperf.fleet.pool.Engine`)."""
    if not sources:
        return
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise FrameworkNotInstalledError("pyspark", "spark", "the fleet's spark engine runs on it") from None
    builder = SparkSession.builder.appName(APP_NAME)
    if options.engine.get("master"):
        builder = builder.master(options.engine["master"])
    for key, value in (options.engine.get("conf") or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        context = spark.sparkContext
        cores = max(1, context.defaultParallelism)
        payload = options.to_json()
        ordered = sorted(sources, key=lambda s: (-s.size, s.path))
        for start in range(0, len(ordered), WAVE):
            wave = ordered[start:start + WAVE]
            partitions = min(len(wave), cores * PARTITIONS_PER_CORE)
            lines = [json.dumps(s.__dict__) for s in dealt(wave, partitions)]
            context.setJobDescription(f"crystalperf fleet: logs {start + 1}-{start + len(wave)} of {len(ordered)}")
            analysed = context.parallelize(lines, partitions).mapPartitions(partial(_partition, payload)).collect()
            for line in analysed:
                yield Result.from_json(line)
    finally:
        spark.stop()
