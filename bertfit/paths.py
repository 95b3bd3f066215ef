"""Where a command may write: every output path is checked here before anything is computed.

A file output (`predict --output`, `report --output`) must be a regular file or a new name in an
existing folder bertfit can write to; `-` means standard output. A folder output (`export OUT`,
`convert DST`, `train --output-dir`) must be a folder, or a new name under a folder bertfit can
write to. Neither may be a device, a FIFO or a socket (bertfit would replace `/dev/null` with a
regular file), an input of the same command, or inside a directory bertfit owns: a run's (`RUN`,
known by its setup files) or a sweep's (`SWEEP`, by its spec and runs), whose files bertfit reads
back and checks; only the command's own files there (a run's report.html, the sweep's audit/) are
written. Files are then written whole or not at all (`bertfit.atomic`).
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from bertfit import storage
from bertfit.atomic import write_text_atomic
from bertfit.errors import ConfigError

STDOUT = "-"


def _kind(mode: int) -> str | None:
    """What a non-regular, non-directory file is, in words (None for files and folders)."""
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def _same(a: Path, b: str | os.PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _inside(path: Path, folder: str | os.PathLike) -> bool:
    """Whether `path` (existing or not) is `folder` or lies under it."""
    try:
        folder = Path(folder).resolve()
        return path.resolve() == folder or folder in path.resolve().parents
    except (OSError, RuntimeError):
        return False


# What marks a folder as a run directory (the setup `bertfit.runs.run_dir` writes before its
# first step) or a sweep directory (`bertfit.sweeps.sweep_dir`); a test keeps them in step.
OWNED_DIRECTORIES = {
    "the run directory": ("config.yaml", "labels.json", "encoder"),
    "the sweep directory": ("sweep.json", "runs"),
}


def owned_directory(path: str | os.PathLike) -> tuple[str, Path] | None:
    """The run or sweep directory that `path` (existing or not) is or lies inside, nearest
    first, with what it is ("the run directory"); None outside any."""
    absolute = Path(path).absolute()
    for folder in (absolute, *absolute.parents):
        for what, marks in OWNED_DIRECTORIES.items():
            if all((folder / mark).exists() for mark in marks):
                return what, folder
    return None


def _check_not_owned(
    path: Path, flag: str, output: str, allowed: Iterable[str | os.PathLike] = ()
) -> None:
    """Refuses an output in a run or sweep directory, unless it is one of the `allowed` paths
    (the command's own output there)."""
    if any(path.resolve() == Path(place).resolve() for place in allowed):
        return
    found = owned_directory(path)
    if found is not None:
        what, folder = found
        where = "is" if path.absolute() == folder else "is inside"
        raise ConfigError(
            f"{flag} {output} {where} {what} {folder}, whose files are bertfit's; writing "
            "there would change what it holds. Choose a path outside it."
        )


def _check_creatable_in(folder: Path, flag: str, path: str | os.PathLike) -> None:
    """A real write test: permissions, read-only file systems and quotas all show here."""
    try:
        os.remove(tempfile.mkstemp(prefix=".bertfit-write-test-", dir=folder)[1])
    except OSError as e:
        raise ConfigError(
            f"{flag} {path}: cannot create files in {folder} ({e.strerror}); choose a place "
            "you can write to."
        ) from None


def check_output_file(
    output: str | os.PathLike,
    flag: str,
    *,
    inputs: Iterable[str | os.PathLike] = (),
    run_dir: str | os.PathLike | None = None,
    allowed_in_run: Iterable[str] = (),
    stdout: bool = True,
) -> None:
    """Refuses, before any work, a file output that cannot or must not be written.

    Args:
        output: the path, or "-" for standard output.
        flag: how the user named it, for messages ("--output").
        inputs: files the command reads; writing over one would destroy it.
        run_dir: a run directory the command reads; its files are the run's own.
        allowed_in_run: names inside `run_dir` the command may write (report.html).
        stdout: whether "-" (standard output) is allowed.
    """
    output = os.fspath(output)
    if output == STDOUT:
        if not stdout:
            raise ConfigError(f"{flag} -: this output cannot go to standard output; name a file.")
        return
    path = Path(output)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise ConfigError(f"{flag} {output}: cannot use this path ({e.strerror}).") from None
    if mode is not None:
        kind = _kind(mode)
        if kind:
            raise ConfigError(
                f"{flag} {output} is {kind}, not a regular file; bertfit writes whole files "
                "and would replace it. Name a file, or pass - for standard output."
            )
        if stat.S_ISDIR(mode):
            raise ConfigError(
                f"{flag} {output} is a directory; give a file name inside it instead."
            )
    for source in inputs:
        if source != STDOUT and (_same(path, source) or path.resolve() == Path(source).resolve()):
            raise ConfigError(
                f"{flag} {output} is the input file {source}; writing there would destroy "
                f"the input. Choose another {flag}."
            )
    if run_dir is not None and _inside(path, run_dir):
        if not (path.resolve().parent == Path(run_dir).resolve() and path.name in allowed_in_run):
            raise ConfigError(
                f"{flag} {output} is inside the run directory {run_dir}, whose files belong to "
                f"the run; bertfit will not write over them. Choose a path outside it."
            )
    own = [Path(run_dir) / name for name in allowed_in_run] if run_dir is not None else []
    _check_not_owned(path, flag, output, own)
    parent = path.absolute().parent
    if not parent.is_dir():
        raise ConfigError(
            f"{flag} {output}: the folder {parent} does not exist; create it first or choose "
            "another path."
        )
    if mode is not None and not os.access(path, os.W_OK):
        raise ConfigError(f"{flag} {output} is read-only; choose another path.")
    _check_creatable_in(parent, flag, output)


def check_output_dir(
    output: str | os.PathLike,
    flag: str,
    *,
    inputs: Iterable[str | os.PathLike] = (),
    run_dir: str | os.PathLike | None = None,
    own: Iterable[str | os.PathLike] = (),
) -> None:
    """Refuses, before any work, a folder output that cannot or must not be written: not a
    folder, inside (or holding) an input, in a run or sweep directory (but the command's
    `own` folders there), or not writable. A folder that does not exist yet is created with
    its parents."""
    output = os.fspath(output)
    if output == STDOUT:
        raise ConfigError(f"{flag} -: this output is a folder and cannot go to standard output.")
    if storage.is_url(output):  # a bucket: what the store refuses is said when writing
        inside = run_dir is not None and f"{output.rstrip('/')}/".startswith(
            f"{os.fspath(run_dir).rstrip('/')}/"
        )
        if inside:
            raise ConfigError(
                f"{flag} {output} is inside the run directory {run_dir}, whose files belong to "
                "the run; choose a folder outside it."
            )
        return
    path = Path(output)
    if path.exists() and not path.is_dir():
        mode = os.stat(path).st_mode
        raise ConfigError(
            f"{flag} {output} is {_kind(mode) or 'a file'}, not a folder; choose a folder path."
        )
    for source in inputs:
        if _inside(path, source) or _inside(Path(source), path):
            raise ConfigError(
                f"{flag} {output} overlaps the input {source}; writing there could destroy "
                f"it. Choose another {flag}."
            )
    if run_dir is not None and _inside(path, run_dir):
        raise ConfigError(
            f"{flag} {output} is inside the run directory {run_dir}, whose files belong to the "
            f"run; choose a folder outside it."
        )
    _check_not_owned(path, flag, output, own)
    existing = path.absolute()
    while not existing.exists() and not existing.is_symlink():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{flag} {output}: {existing} is a file, not a folder.")
    _check_creatable_in(existing, flag, output)


def check_not_nested(output: str | os.PathLike | None, flag: str) -> None:
    """Refuses a run's or a sweep's new `--output-dir` inside a run or sweep directory (its
    folder would make that one hold files that are not its own). A folder there that already
    holds something (a sweep's run, resumed by hand) is the command's own to judge."""
    if output is None or storage.is_url(os.fspath(output)):
        return
    path = Path(output)
    if not (path.is_dir() and any(path.iterdir())):
        _check_not_owned(path, flag, os.fspath(output))


def write_output(output: str | os.PathLike, text: str) -> None:
    """Writes `text` to `output` whole ("-": standard output), after `check_output_file`."""
    if os.fspath(output) == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_text_atomic(output, text)
