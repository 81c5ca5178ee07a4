"""Real tensorflow jobs: every test here needs tensorflow (the `tensorflow` extra); without it the folder is skipped with that reason."""

import pytest

pytest.importorskip("tensorflow")
