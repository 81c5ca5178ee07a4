import os

# Hooks re-raise their own errors under this switch so that tests see them.
os.environ.setdefault("CRYSTALPERF_TESTING", "1")
