"""Real flink jobs: every test here needs pyflink (the `flink` extra); without it the folder is skipped with that reason."""

import pytest

pytest.importorskip("pyflink")
