"""The learned resource classifiers (paper §3.2-§3.4): a labelled corpus, a recursive-autoencoder code
classifier, a Flair doc classifier and their combination behind the core's ``ResourceClassifier`` seam.

Needs the ``models`` extra (torch, flair, tree-sitter); the core never imports this package itself.
"""

from __future__ import annotations

from pathlib import Path

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
LABELS = ("cpu", "disk", "network")
