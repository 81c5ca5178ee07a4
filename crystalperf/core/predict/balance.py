"""What balancing a skewed operation would save the job: the predictor's re-traversal of the DAG with that
operation's tasks balanced as the skew rule balances them (``crystalperf.core.profile.skew``) and every other
operation as traced: nothing when the operation was off the critical path."""

from __future__ import annotations

from crystalperf.core.predict.base import Baseline, Changes, OpContext, TaskParts
from crystalperf.core.predict.predictor import Predictor
from crystalperf.core.profile.dag import ExecutionProfile
from crystalperf.core.profile.skew import CAUSE_STRAGGLER, Skew, SkewFindings


class _Balance:
    """A resource model for the predictor that changes one operation only: its tasks balanced as ``assess``
    balances them (every other operation, and every resource, as traced)."""

    name = "skew-balance"
    keys: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.target: Skew | None = None
        self.unchanged = True

    def prepare(self, profile: ExecutionProfile, baseline: Baseline, changes: Changes) -> list[str]:
        self.unchanged = self.target is None
        return []

    def adjust(self, ctx: OpContext, parts: list[TaskParts]) -> list[TaskParts]:
        skew = self.target
        if skew is None or ctx.profile.path != skew.profile.path or not ctx.tasks:
            return parts
        by_mean = skew.cause != CAUSE_STRAGGLER
        out = []
        for task, part in zip(ctx.tasks, parts, strict=True):
            total = part.total
            straggler = task.duration > skew.threshold_s and task.id not in skew.warming_up
            if task.status == "killed":
                # a copy Spark launched beside a slow task and killed when its twin ended (or a task of a job
                # that ended): in a balanced operation no task is slow enough to be copied
                out.append(TaskParts(0.0, 0.0, 0.0, 0.0))
                continue
            if task.status == "failed" or not (by_mean or straggler):
                out.append(part)
                continue
            target = skew.balanced_task_s
            if total > 0:
                f = target / total
                out.append(TaskParts(part.cpu * f, part.disk * f, part.network * f, part.fixed * f,
                                     part.input_wait * f))
            else:
                out.append(TaskParts(0.0, 0.0, 0.0, target))
        return out


def predict_balanced(profile: ExecutionProfile, findings: SkewFindings) -> SkewFindings:
    """The reported skewed operations with the job's runtime predicted with each balanced, ordered by the job's
    gain (then the operation's)."""
    reported = findings.skewed
    if not reported:
        return findings
    runtime = profile.trace.application.duration
    balance = _Balance()
    predictor = Predictor(profile, models=[balance])
    if not predictor.streaming:
        # Against the predictor's own replay of the traced run (not the traced runtime), so that whatever the
        # re-traversal rounds away cancels out; the traced runtime minus the difference is the prediction.
        as_traced = predictor.simulate(Changes())
        for skew in reported:
            balance.target = skew
            balanced = predictor.simulate(Changes())
            skew.job_runtime_s = runtime
            skew.balanced_job_s = max(0.0, runtime - max(0.0, as_traced - balanced))
        balance.target = None
    reported.sort(key=lambda s: (-s.job_saved_s, -s.stage_saved_s))
    return findings
