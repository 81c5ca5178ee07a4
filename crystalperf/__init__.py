"""crystalperf: where the time of a dataflow job went, and what other resources would do."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Loaded on first use: ``import crystalperf`` (every hook does) must not pull in the analysis.
    if name == "load_report":
        from crystalperf.core.notebook import load_report

        return load_report
    raise AttributeError(f"module 'crystalperf' has no attribute {name!r}")


__all__ = ["__version__", "load_report"]
