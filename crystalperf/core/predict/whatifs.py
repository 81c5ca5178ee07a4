"""The what-ifs a report shows, predicted: the scenarios (the caller's, else ``default_scenarios``), then the
search of the framework's settings, which reuses them where a setting makes the same changes."""

from __future__ import annotations

from collections.abc import Sequence

from crystalperf.core.predict.base import Changes
from crystalperf.core.predict.predictor import Prediction, Predictor
from crystalperf.core.predict.scenarios import default_scenarios
from crystalperf.core.predict.settings import SettingsSearch, search_settings
from crystalperf.core.profile.bottleneck import Bottleneck


def predict_scenarios(predictor: Predictor, scenarios: Sequence[Changes] | None = None, *,
                      band: bool = True) -> tuple[list[Prediction], SettingsSearch]:
    """Every scenario's prediction, and the settings search."""
    chosen = (list(scenarios) if scenarios is not None
              else default_scenarios(predictor.profile, predictor.baseline, predictor.models))
    predictions = [predictor.predict(c, band=band) for c in chosen]
    return predictions, search_settings(predictor, known=predictions)


def take_pace(bottleneck: Bottleneck, predictor: Predictor) -> None:
    """Take the verdict from a pipelined job's streaming limits where one of them set its pace.

    The operators of a pipeline run side by side for the whole job, so the critical path of their own busy time
    (seconds out of a run of minutes, the rest waiting on each other) says what they computed, not what held the
    records back: a slow link leaves the sender backpressured and the receiver idle, and neither's work names
    it."""
    pace = predictor.streaming_pace()
    if pace is None or pace.resource is None:
        return
    bottleneck.pace = pace
    bottleneck.resource = pace.resource
