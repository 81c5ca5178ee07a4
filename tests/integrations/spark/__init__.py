"""Real spark jobs: every test here needs pyspark (the `spark` extra); without it the folder is skipped with that reason."""

import pytest

pytest.importorskip("pyspark")
