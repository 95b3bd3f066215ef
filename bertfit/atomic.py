"""Files that are either whole or absent: a reader never sees half of one, even after a kill."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Writes `text` (UTF-8) to a temporary file beside `path`, then renames it over `path`.

    Examples:
    >>> write_text_atomic("labels.json", '{"labels": ["neg", "pos"]}')
    >>> Path("labels.json").read_text()
    '{"labels": ["neg", "pos"]}'
    """
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """`write_text_atomic` for bytes."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
