"""The classifiers' tier: every test here needs torch (the ``models`` extra); without it the folder is
skipped with that reason, as each framework's folder is without its framework."""

import pytest

pytest.importorskip("torch")
