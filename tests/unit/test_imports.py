"""The core must load without any framework or torch, and must not load them itself."""

import subprocess
import sys

FORBIDDEN = ("pyspark", "tensorflow", "pyflink", "torch", "flair", "keras", "py4j", "pyarrow")


def test_core_imports_no_framework():
    code = (
        "import sys, crystalperf.core, crystalperf.core.cli, crystalperf.core.analysis, "
        "crystalperf.core.report, crystalperf.core.predict, crystalperf.core.attribution.sources;"
        "crystalperf.core.cli.build_parser();"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
