"""Advice in settings: the framework configuration keys a user types, mapped to what-if changes and back, and a
bounded search over them for the setting with the best predicted runtime and the cheapest one within a few
percent of it.

What is searched is what the predictor models, nothing more:

- Spark on a cluster: ``spark.executor.instances`` (``executors``), ``spark.executor.cores`` (``cores``) and
  ``spark.executor.memory`` (``memory``, through Spark's unified-memory formula). In local mode there are no
  executors to add: the executor's cores are the N of ``local[N]`` and its memory the driver's
  (``spark.driver.memory``).
- Flink: ``parallelism.default`` (``parallelism``, every operator's) and, where a TaskManager's old collections of
  a heap whose live data the trace has took its CPU, ``taskmanager.memory.task.heap.size`` (``memory``: the heap).
- TensorFlow: ``intra_op_parallelism_threads`` (``cores``: the threads model splits each kernel over them).

``spark.sql.shuffle.partitions``, Flink's per-operator parallelism, TF's inter-op threads and the input
pipeline's ``prefetch`` / ``num_parallel_calls`` have no what-if key: the search leaves them out and the
report says why (``settings_search.not_searched``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from crystalperf.core.predict.base import Changes
from crystalperf.core.predict.ceilings import NOTED_SHARE
from crystalperf.core.predict.knobs import MAX_STEPS, SettingsMap, settings_map
from crystalperf.core.predict.predictor import Prediction, Predictor
from crystalperf.core.predict.simulation import REPRESENTATIVE_TASKS
from crystalperf.core.profile.dag import unit_profiles
from crystalperf.core.units import format_seconds

# A setting predicted within this of the fastest found is as good: the cheapest of those is the advice.
NEAR_BEST = 0.05
# A doubling that gains less than this over the previous value ends the climb (diminishing returns).
MIN_STEP_GAIN = 0.01
# Predictions the search may make: points while it searches, then one band per suggestion (at most two). A
# point prediction re-traverses the job and replays its tasks (the operations, and up to 512 tasks of each):
# about 5 ms on the bundled Spark demo, 0.2-0.4 s on 20,000 operations of 2 tasks (docs/whatif.md). A large
# job gets fewer points, SEARCH_WORK operations + tasks replayed in all, and never fewer than MIN_POINTS.
DEFAULT_BUDGET = 24
MAX_SUGGESTIONS = 2
SEARCH_WORK = 300_000
MIN_POINTS = 4


@dataclass
class Candidate:
    values: dict[str, int]
    changes: Changes
    runtime_s: float
    cost: tuple[float, ...]
    prediction: Prediction | None = None  # None: the traced run itself
    typed: list[str] = field(default_factory=list)  # the setting as a user types it

    @property
    def is_baseline(self) -> bool:
        return self.prediction is None


@dataclass
class Suggestion:
    kind: str  # "cheapest": within NEAR_BEST of the fastest with the least resources; "fastest"
    candidate: Candidate
    prediction: Prediction  # with its band
    typed: list[str]
    settings: dict[str, str]
    notes: list[str]

    def as_dict(self) -> dict[str, Any]:
        estimate = self.prediction.crystalperf
        entry: dict[str, Any] = {
            "kind": self.kind,
            "settings": self.settings,
            "typed": self.typed,
            "changes": dict(self.prediction.changes.values),
            "description": self.prediction.changes.describe(),
            "runtime_s": round(estimate.runtime_s, 6),
            "baseline_runtime_s": round(self.prediction.baseline_runtime_s, 6),
            "speedup": round(self.prediction.speedup, 4),
            "notes": self.notes,
        }
        if estimate.low_s is not None:
            entry["low_s"] = round(estimate.low_s, 6)
            entry["high_s"] = round(estimate.high_s if estimate.high_s is not None else estimate.runtime_s, 6)
        return entry


@dataclass
class Blocked:
    """A setting whose gain a ceiling took: which resource it would need, how much more, and the prediction with
    both the setting and that resource."""

    candidate: Candidate
    kind: str  # the ceiling: cores, device, link
    factor: float  # times the traced run's resource
    prediction: Prediction  # the setting with that much more of the resource

    def as_dict(self) -> dict[str, Any]:
        return {"typed": self.candidate.typed, "ceiling": self.kind, "needs_factor": round(self.factor, 4),
                "with": self.prediction.changes.describe(), "runtime_s": round(self.prediction.crystalperf.runtime_s, 6),
                "speedup": round(self.prediction.speedup, 4)}

    def advice(self) -> str:
        what = {"cores": "cores", "device": "storage device bandwidth", "link": "network bandwidth"}[self.kind]
        p = self.prediction
        return (f"Settings: {' '.join(self.candidate.typed)} is held back by the {self.kind} ceiling "
                f"(predicted {format_seconds(self.candidate.runtime_s)}); it needs {self.factor:.2g}x the "
                f"{what} of the traced run: with {p.changes.describe()} the job is predicted to take "
                f"{format_seconds(p.crystalperf.runtime_s)} ({p.speedup:.2f}x).")


@dataclass
class SettingsSearch:
    framework: str
    suggestions: list[Suggestion] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)  # every setting predicted, the traced one first
    searched: list[str] = field(default_factory=list)
    not_searched: list[str] = field(default_factory=list)
    budget: int = DEFAULT_BUDGET
    predictions: int = 0  # predictions made, bands included
    near: float = NEAR_BEST
    blocked: Blocked | None = None  # the setting a ceiling held back most, with the resource it needs
    # settings predicted faster with more resources whose band reaches the traced runtime: not advised
    unsure: list[tuple[Candidate, Prediction]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "framework": self.framework,
            "searched": self.searched,
            "not_searched": self.not_searched,
            "budget": self.budget,
            "tried": max(0, len(self.candidates) - 1),  # settings other than the traced ones, predicted or reused
            "predictions": self.predictions,  # new predictions made for them (reused ones cost none)
            "near_best": self.near,
            **({"blocked": self.blocked.as_dict()} if self.blocked is not None else {}),
            **({"not_advised": [{"typed": c.typed, "runtime_s": round(p.crystalperf.runtime_s, 6),
                                 "high_s": round(p.crystalperf.slow_end_s, 6),
                                 "reason": "more resources for a gain within the band"}
                                for c, p in self.unsure]} if self.unsure else {}),
            "candidates": [{"changes": dict(c.changes.values), "typed": c.typed, "runtime_s": round(c.runtime_s, 6)}
                           for c in self.candidates],
        }

    def advice(self) -> list[str]:
        """The best suggestion as a line of the report's advice (none when nothing was searched), and the setting
        a ceiling held back, with what it needs."""
        lines = self._advice()
        if self.blocked is not None:
            lines.append(self.blocked.advice())
        return lines

    def _advice(self) -> list[str]:
        if not self.searched:
            return []
        if not self.suggestions and self.unsure:
            candidate, p = self.unsure[0]
            return [f"Settings: {' '.join(candidate.typed)} is predicted to take "
                    f"{format_seconds(p.crystalperf.runtime_s)}, but its band reaches "
                    f"{format_seconds(p.crystalperf.slow_end_s)} against the traced "
                    f"{format_seconds(self.candidates[0].runtime_s)}: more resources for a gain the prediction "
                    "cannot tell from none, so no setting is advised."]
        if not self.suggestions:
            tried = sorted(self.candidates[1:], key=lambda c: c.runtime_s)[:3]
            shown = "; ".join(f"{' '.join(c.typed)}: {format_seconds(c.runtime_s)}" for c in tried)
            return [f"Settings: none of the {len(self.candidates) - 1} settings tried ({', '.join(self.searched)}) "
                    f"is predicted more than {self.near:.0%} faster than the traced ones "
                    f"({format_seconds(self.candidates[0].runtime_s)}) at no more resources"
                    + (f" (fastest tried: {shown})." if shown else ".")]
        first = self.suggestions[0]
        p = first.prediction
        band = (f" ({format_seconds(p.crystalperf.low_s)} – {format_seconds(p.crystalperf.slow_end_s)})"
                if p.crystalperf.low_s is not None else "")
        line = (f"Settings: {' '.join(first.typed)} is predicted to take {format_seconds(p.crystalperf.runtime_s)}"
                f"{band} instead of {format_seconds(p.baseline_runtime_s)} ({p.speedup:.2f}x)")
        fastest = next((s for s in self.suggestions if s.kind == "fastest"), None)
        if fastest is not None and fastest is not first:
            line += (f", within {self.near:.0%} of the fastest found ({' '.join(fastest.typed)}: "
                     f"{format_seconds(fastest.prediction.crystalperf.runtime_s)}) with fewer resources")
        elif first.candidate.cost < self.candidates[0].cost:
            line += ", with fewer resources than the traced run"
        return [line + "." + (f" Note: {'; '.join(first.notes)}." if first.notes else "")]


NO_OPERATION = "nothing is searched: the run traced no operation, whose time a setting could change"


def search_budget(predictor: Predictor) -> int:
    """DEFAULT_BUDGET, less on a job whose every prediction replays many operations and tasks."""
    work = sum(min(len(p.op.tasks), REPRESENTATIVE_TASKS) + 1 for p in unit_profiles(predictor.profile))
    return MAX_SUGGESTIONS + max(MIN_POINTS, min(DEFAULT_BUDGET - MAX_SUGGESTIONS, SEARCH_WORK // max(1, work)))


def search_settings(predictor: Predictor, *, budget: int | None = None, near: float = NEAR_BEST,
                    known: Sequence[Prediction] = ()) -> SettingsSearch:
    """Search the settings of the traced job's framework for the fastest predicted runtime and the cheapest
    setting within ``near`` of it, in at most ``budget`` predictions (bands of the suggestions included;
    default: search_budget). ``known`` are predictions already made with this predictor (the report's
    scenarios): a setting that makes the same changes takes its prediction from them, at no cost.

    Each setting first climbs alone, doubling from its traced value while a doubling still gains
    MIN_STEP_GAIN, and descends, halving while the job is predicted no slower than traced (breadth first, so
    a small budget still tries every setting); then the settings' best and cheapest values are combined.
    A suggestion is never predicted slower than the traced run."""
    smap = settings_map(predictor.profile.trace, predictor.baseline)
    budget = search_budget(predictor) if budget is None else budget
    if smap is None:
        return SettingsSearch(predictor.profile.trace.application.framework, budget=budget)
    if next(unit_profiles(predictor.profile), None) is None:
        # a run that traced no operation (it failed before its first job): every setting would tie with it
        return SettingsSearch(smap.framework, not_searched=[*smap.not_searched, NO_OPERATION], budget=budget,
                              near=near)
    search = SettingsSearch(smap.framework, searched=[k.setting for k in smap.knobs],
                            not_searched=list(smap.not_searched), budget=budget, near=near)
    if not smap.knobs:  # nothing the search could write (the not_searched notes say why)
        return search
    base = Candidate(smap.current, Changes(), predictor.runtime, smap.cost(smap.current))
    search.candidates.append(base)
    seen: dict[tuple[tuple[str, str], ...], Candidate] = {(): base}
    reuse = {_key(p.changes): p for p in known if not p.changes.baselines}
    # the bands of the suggestions come out of the same budget
    point_budget = max(0, budget - MAX_SUGGESTIONS)

    def evaluate(values: dict[str, int]) -> Candidate | None:
        changes = smap.changes(values)
        key = _key(changes)
        if key in seen:
            return seen[key]
        prediction = reuse.get(key)
        if prediction is None:
            if search.predictions >= point_budget:
                return None
            prediction = predictor.predict(changes, band=False)
            search.predictions += 1
        found = seen[key] = Candidate(dict(values), changes, prediction.crystalperf.runtime_s, smap.cost(values),
                                      prediction)
        search.candidates.append(found)
        return found

    # 1. each setting alone, breadth first: step r of every setting still moving before step r + 1 of any.
    walks = [(knob, up, knob.steps(up)) for knob in smap.knobs for up in (True, False)]
    last = {(knob.setting, up): base.runtime_s for knob, up, _ in walks}
    moving = {(knob.setting, up) for knob, up, _ in walks}
    for step in range(MAX_STEPS):
        for knob, up, steps in walks:
            if (knob.setting, up) not in moving or step >= len(steps):
                continue
            found = evaluate({**smap.current, knob.setting: steps[step]})
            if found is None:
                moving.clear()
                break
            previous = last[(knob.setting, up)]
            if (up and found.runtime_s > previous * (1 - MIN_STEP_GAIN)) or (not up and found.runtime_s > base.runtime_s):
                moving.discard((knob.setting, up))
            last[(knob.setting, up)] = found.runtime_s

    # 2. combinations of each setting's fastest and cheapest near-fastest values (the traced one included).
    if len(smap.knobs) > 1:
        # around the traced setting: at most 2**MAX_STEPS times its cores (executors x cores multiply)
        most = base.cost[0] * 2 ** MAX_STEPS
        for combination in _combinations(smap, search.candidates, near):
            if smap.cost(combination)[0] <= most and evaluate(combination) is None:
                break

    # 3. the fastest, and the cheapest within `near` of it; never one predicted slower than the traced run.
    best = min(search.candidates, key=lambda c: (c.runtime_s, c.cost))
    close = [c for c in search.candidates
             if c.runtime_s <= best.runtime_s * (1 + near) and c.runtime_s <= base.runtime_s]
    cheapest = min(close, key=lambda c: (c.cost, c.runtime_s))
    chosen: list[tuple[str, Candidate]] = []
    if not cheapest.is_baseline:
        chosen.append(("cheapest", cheapest))
    if all(c is not base for c in close) and best is not cheapest:
        chosen.append(("fastest", best))
    for kind, candidate in chosen:
        assert candidate.prediction is not None
        prediction = candidate.prediction
        if prediction.crystalperf.low_s is None and search.predictions < budget:
            prediction = predictor.predict(candidate.changes, band=True)
            search.predictions += 1
        if candidate.cost > base.cost and _may_gain_nothing(prediction, base.runtime_s):
            # more resources for a gain the band cannot tell from none: said, not advised
            search.unsure.append((candidate, prediction))
            continue
        search.suggestions.append(Suggestion(kind, candidate, prediction, smap.typed(candidate.values),
                                             {k: smap.shown(k, v) for k, v in candidate.values.items()
                                              if v != smap.current[k]},
                                             smap.requirements(candidate.values)))
    # A suggestion labelled cheapest that is also the fastest says so once; one that only ties with the traced run
    # (the same time for fewer resources) stays the cheapest.
    if len(search.suggestions) == 1 and search.suggestions[0].candidate is best and best.runtime_s < base.runtime_s:
        search.suggestions[0].kind = "fastest"
    for candidate in search.candidates:
        candidate.typed = smap.typed(candidate.values)
    search.blocked = _blocked(predictor, search)
    return search


def _may_gain_nothing(prediction: Prediction, runtime_s: float) -> bool:
    """Whether the band's slow end, from the model's inputs (a rerun's spread would spread the traced run alike),
    comes within MIN_STEP_GAIN of the traced runtime."""
    estimate = prediction.crystalperf
    high = estimate.model_high_s if estimate.model_high_s is not None else estimate.high_s
    return high is not None and high >= runtime_s * (1 - MIN_STEP_GAIN)


def _blocked(predictor: Predictor, search: SettingsSearch) -> Blocked | None:
    """The setting whose gain a ceiling took most (at least ``NOTED_SHARE`` of the run), predicted again with as much
    more of that resource as its most bound operation needs; None when no ceiling held a setting back."""
    runtime = search.candidates[0].runtime_s
    held = [(c.prediction.ceilings[kind], kind, c) for c in search.candidates[1:] if c.prediction is not None
            for kind in c.prediction.ceilings]
    held = [h for h in held if h[0][0] >= NOTED_SHARE * runtime]
    if not held:
        return None
    (_added, factor), kind, candidate = max(held, key=lambda h: h[0][0])
    assert candidate.prediction is not None
    changes = predictor.ceilings.more(kind, factor, candidate.changes, predictor.baseline.stated(candidate.changes))
    prediction = predictor.predict(changes, band=False)
    search.predictions += 1
    return Blocked(candidate, kind, factor, prediction)


def _combinations(smap: SettingsMap, candidates: list[Candidate], near: float) -> Iterator[dict[str, int]]:
    """Every setting's traced, fastest and cheapest near-fastest value (from its walk alone), combined: the
    all-fastest combination first, then the all-cheapest, then the rest."""
    current = smap.current
    options: list[list[int]] = []
    for knob in smap.knobs:
        alone = [c for c in candidates
                 if all(v == current[k] for k, v in c.values.items() if k != knob.setting)]
        fastest = min(alone, key=lambda c: c.runtime_s)
        close = [c for c in alone if c.runtime_s <= fastest.runtime_s * (1 + near)]
        cheapest = min(close, key=lambda c: (c.values[knob.setting], c.runtime_s))
        options.append(list(dict.fromkeys([fastest.values[knob.setting], cheapest.values[knob.setting],
                                           knob.current])))
    names = [k.setting for k in smap.knobs]
    ordered = [tuple(o[0] for o in options), tuple(o[min(1, len(o) - 1)] for o in options),
               *itertools.product(*options)]
    for combo in dict.fromkeys(ordered):
        yield dict(zip(names, combo, strict=True))


def _key(changes: Changes) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in changes.values.items()))
