"""``python -m crystalperf``: the command line, for environments where the console script is not on PATH
(the Flink reporter starts the analysis this way with the interpreter it was configured with)."""

from crystalperf.core.cli import main

raise SystemExit(main())
