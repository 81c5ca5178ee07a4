"""Former name of ``bench/tf_overhead.py`` (the name issue 4 gives it); runs that script."""

import runpy
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).with_name("tf_overhead.py")), run_name="__main__")
