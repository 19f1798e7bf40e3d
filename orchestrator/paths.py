"""Where orchestrator keeps per-user state (response cache, converted model)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The user cache dir for orchestrator, honouring ``XDG_CACHE_HOME``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "orchestrator"
