"""The TensorFlow command of the ``crystalperf`` CLI: ``tensorflow-finish`` (the job end the callback runs,
by hand: e.g. the report of a trace written with ``CrystalPerfCallback(analyze=False)``)."""

from __future__ import annotations

import argparse

from crystalperf.integrations.base import register_finish_command
from crystalperf.integrations.tensorflow.config import INTEGRATION


def register_tensorflow_finish(subparsers: argparse._SubParsersAction) -> None:
    register_finish_command(subparsers, INTEGRATION, "write a Keras callback's trace and its report")
