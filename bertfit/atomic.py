"""Files that are either whole or absent: a reader never sees half of one, even after a kill.

A write goes to `.<name>.<pid>.tmp` beside the file, then is renamed over it; a kill between the
two leaves that temporary file, which `leftover_of` recognises so that the directory's owner can
remove it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from bertfit.errors import BertfitError

_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.tmp")


def temporary_path(path: Path) -> Path:
    """Where `write_bytes_atomic` writes `path` before renaming it into place."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def leftover_of(name: str) -> tuple[str, int] | None:
    """(the file's name, the writer's pid) when `name` is one of our temporary files.

    Examples:
    >>> leftover_of(".metrics.json.4242.tmp")
    ('metrics.json', 4242)
    >>> leftover_of("metrics.json") is None
    True
    """
    match = _TEMPORARY.fullmatch(name)
    return (match["name"], int(match["pid"])) if match else None


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Writes `text` (UTF-8) to a temporary file beside `path`, then renames it over `path`.

    Examples:
    >>> write_text_atomic("labels.json", '{"labels": ["neg", "pos"]}')
    >>> Path("labels.json").read_text()
    '{"labels": ["neg", "pos"]}'
    """
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """`write_text_atomic` for bytes. A write the system refuses (a full disk, a read-only file
    system, no permission) is a `BertfitError` naming the file; the old file stays whole."""
    path = Path(path)
    temporary = temporary_path(path)
    try:
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except OSError as e:
        raise BertfitError(
            f"cannot write {path}: {e.strerror or e}. Free space or choose a writable place; "
            "nothing was replaced."
        ) from None
    finally:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass
