"""Stage 1, the trace: the versioned schema every hook writes (``schema``), reading and writing trace files
within the analyser's limits (``load``, over ``text`` and ``tasks``), the exported JSON Schema (``spec``) and
synthetic traces for tests and benchmarks (``synthetic``).

``from crystalperf.core import trace as tr`` gives the schema's models and constants and the file functions."""

from crystalperf.core.trace.load import load_document as load_document
from crystalperf.core.trace.load import load_trace as load_trace
from crystalperf.core.trace.load import parse_trace as parse_trace
from crystalperf.core.trace.load import save_trace as save_trace
from crystalperf.core.trace.schema import *  # noqa: F403  (the models and constants, as one namespace)
