"""crystalperf: where the time of a dataflow job went, and what other resources would do."""

__version__ = "0.1.0"
