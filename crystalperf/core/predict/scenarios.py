"""Which what-ifs a report shows (``default_scenarios``) and which resource models predict them
(``installed_models``: the built-in ones and those registered under ``crystalperf.predictors``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from importlib import metadata

from crystalperf.core.predict.base import Baseline, Changes, ResourceModel
from crystalperf.core.predict.compute import ComputeModel, SharedHostModel
from crystalperf.core.predict.io import IOModel
from crystalperf.core.predict.memory import MemoryModel
from crystalperf.core.profile.dag import ExecutionProfile
from crystalperf.core.profile.machine import scaling_keys

log = logging.getLogger(__name__)


def installed_models() -> list[ResourceModel]:
    """The built-in models plus any registered under ``crystalperf.predictors``."""
    models: list[ResourceModel] = []
    seen: set[str] = set()
    try:
        eps = sorted(metadata.entry_points(group="crystalperf.predictors"), key=lambda e: e.name)
    except Exception:  # a broken distribution's metadata must not stop predictions
        eps = []
    for ep in eps:
        try:
            models.append(ep.load()())
            seen.add(ep.name)
        except Exception as exc:
            log.warning("predictor %s could not be loaded: %s", ep.name, exc)
    for name, cls in (("compute", ComputeModel), ("memory", MemoryModel), ("io", IOModel),
                      ("contention", SharedHostModel)):
        if name not in seen:
            models.append(cls())
    return models


def default_scenarios(profile: ExecutionProfile, baseline: Baseline,
                      models: Sequence[ResourceModel] | None = None) -> list[Changes]:
    """The what-ifs a report shows by default: resizing by the keys the trace declares, the generic resource
    changes the trace gives figures for, then what the resource models propose."""
    keys = scaling_keys(profile.trace)
    scenarios: list[dict[str, float | str] | Changes] = []
    if "parallelism" in keys:
        scenarios += [{"parallelism": baseline.slots * 2}]
        if baseline.slots > 1:
            scenarios += [{"parallelism": max(1, baseline.slots // 2)}]
    if "cores" in keys:
        scenarios += [{"cores": baseline.cores_per_executor * 2}]
        if baseline.cores_per_executor > 1:
            scenarios += [{"cores": max(1, baseline.cores_per_executor // 2)}]
    if "executors" in keys:
        scenarios += [{"executors": baseline.executors * 2}]
    scenarios += [{"cpu_speed": 2.0}, {"cpu_share": 0.5}]
    if baseline.origins.get("network") in ("declared", "observed") and not baseline.network_idle:
        # the job's own link, as it was declared or seen: what a faster one would buy is a question users ask
        scenarios += [{"network": baseline.network_bandwidth * 10}]
    scenarios += [{"network": baseline.network_bandwidth / 10}, {"disk": baseline.disk_bandwidth * 2},
                  {"disk": baseline.disk_bandwidth / 2}]
    if len({t.host for op in profile.trace.iter_operations() for t in op.tasks if t.host}) > 1:
        # tasks on several hosts: what moving them apart (another zone, another site) would cost
        scenarios += [Changes.parse(["rtt=+10ms"])]
    if baseline.memory_bytes and baseline.data_bytes:
        scenarios += [{"memory": baseline.memory_bytes * 2}, {"memory": baseline.memory_bytes / 2}]
    for model in models if models is not None else installed_models():
        propose = getattr(model, "scenarios", None)
        if callable(propose):
            try:
                scenarios += list(propose(profile, baseline))
            except Exception as exc:  # a plug-in's failure costs its scenarios, not the report
                log.warning("predictor %s could not propose scenarios: %s", model.name, exc)
    return [s if isinstance(s, Changes) else Changes(s) for s in scenarios]
