"""Where bertfit keeps what it derives once: extracted archives, the embedded data set."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`$BERTFIT_CACHE`, else `~/.cache/bertfit`."""
    root = os.environ.get("BERTFIT_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "bertfit"
