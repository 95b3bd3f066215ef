"""Safe extraction of `.tar`, `.tar.gz`/`.tgz` and `.zip` checkpoints.

A member whose path is absolute, climbs out with `..`, or is a link pointing outside the target
folder is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from bertfit.errors import CheckpointError

SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(SUFFIXES)


def cache_dir() -> Path:
    return Path(os.environ.get("BERTFIT_CACHE", Path.home() / ".cache" / "bertfit"))


def _refuse(archive: Path, member: str, why: str) -> CheckpointError:
    return CheckpointError(
        f"{archive}: refusing to extract member {member!r}: {why}. An archive member must stay "
        "inside the folder it is extracted to; this archive is malformed or malicious. Re-create "
        "it with relative paths (e.g. `tar -czf model.tar.gz -C parent model`).")


def _check_name(archive: Path, name: str) -> None:
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise _refuse(archive, name, "it has an absolute path")
    if ".." in pure.parts:
        raise _refuse(archive, name, "its path climbs out with '..'")


def _inside(target: Path, candidate: Path) -> bool:
    return os.path.commonpath([target.resolve(), candidate.resolve()]) == str(target.resolve())


def check_members(archive: Path, target: Path) -> None:
    """Raises `CheckpointError` for the first member that would land outside `target`."""
    if archive.name.lower().endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                _check_name(archive, info.filename)
        return
    with tarfile.open(archive) as t:
        for member in t.getmembers():
            _check_name(archive, member.name)
            if member.issym() or member.islnk():
                base = target / PurePosixPath(member.name).parent if member.issym() else target
                if PurePosixPath(member.linkname).is_absolute() or not _inside(
                        target, base / member.linkname):
                    raise _refuse(archive, member.name,
                                  f"it links to {member.linkname!r}, outside the archive")
            elif not (member.isfile() or member.isdir()):
                raise _refuse(archive, member.name, "it is a device or fifo, not a file")


def extract(archive: Path, target: Path | None = None) -> Path:
    """Extracts `archive` (once; later calls reuse it) and returns the extracted folder."""
    if target is None:
        stat = archive.stat()
        key = hashlib.sha1(f"{archive.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        target = cache_dir() / "archives" / key.hexdigest()[:16]
    done = target / ".extracted"
    if done.is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    try:
        check_members(archive, target)
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as z:
                z.extractall(target)
        else:
            with tarfile.open(archive) as t:
                t.extractall(target, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise CheckpointError(
            f"{archive}: cannot extract ({e}). The archive is truncated or corrupt; download "
            "it again.") from e
    done.write_text(str(archive))
    return target


def content_root(folder: Path) -> Path:
    """An archive usually holds one top folder; descend into it."""
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else folder
