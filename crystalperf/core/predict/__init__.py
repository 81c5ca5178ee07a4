"""Stage 4, what-ifs: the job's runtime predicted under resource changes (paper §5).

``engine`` re-traverses the DAG with new task times, which the resource models give (``compute``, ``memory``,
``io``, ``streaming``; ``base`` holds the changes, the traced baseline and the models' interface) and the replay
gives (``simulation``); ``predictor`` wraps each prediction with its band (``band``), the two baselines and its
notes. ``scenarios`` chooses the report's what-ifs and ``whatifs`` predicts them, ``settings`` searches the
framework's own settings (``knobs``), ``balance`` predicts skewed operations balanced."""

from crystalperf.core.predict.base import KNOWN_KEYS, Baseline, Changes
from crystalperf.core.predict.predictor import Estimate, Prediction, Predictor
from crystalperf.core.predict.scenarios import default_scenarios, installed_models
from crystalperf.core.predict.simulation import REPRESENTATIVE_TASKS
from crystalperf.core.schedule import replay

__all__ = ["KNOWN_KEYS", "REPRESENTATIVE_TASKS", "Baseline", "Changes", "Estimate", "Prediction", "Predictor",
           "default_scenarios", "installed_models", "replay"]
