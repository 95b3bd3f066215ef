"""Safe extraction of `.tar`, `.tar.gz`/`.tgz` and `.zip` checkpoints.

A member whose path is absolute, climbs out with `..`, or is a link pointing outside the target
folder is refused before anything is written. So is an archive that would expand past
`BERTFIT_MAX_EXTRACT` bytes (default 8 GiB, above any BERT-large checkpoint), that expands more
than `MAX_RATIO` times its own size (a zip bomb), or that holds more than `MAX_MEMBERS` entries.
Extraction goes to a temporary folder renamed into place, so a failed or killed extraction
leaves nothing that looks like a finished one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from bertfit.cache import cache_root
from bertfit.errors import CheckpointError

SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")
DEFAULT_MAX_EXTRACT = 8 * 2**30
MAX_RATIO = 200  # model weights compress by ~1.1x; text/vocab files by up to ~10x
MAX_MEMBERS = 10_000


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.lower().endswith(SUFFIXES)


def _refuse(archive: Path, member: str, why: str) -> CheckpointError:
    return CheckpointError(
        f"{archive}: refusing to extract member {member!r}: {why}. An archive member must stay "
        "inside the folder it is extracted to; this archive is malformed or malicious. Re-create "
        "it with relative paths (e.g. `tar -czf model.tar.gz -C parent model`)."
    )


def _check_name(archive: Path, name: str) -> None:
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise _refuse(archive, name, "it has an absolute path")
    if ".." in pure.parts:
        raise _refuse(archive, name, "its path climbs out with '..'")


def _inside(target: Path, candidate: Path) -> bool:
    return os.path.commonpath([target.resolve(), candidate.resolve()]) == str(target.resolve())


def max_extract_bytes() -> int:
    text = os.environ.get("BERTFIT_MAX_EXTRACT", "")
    try:
        return int(text) if text else DEFAULT_MAX_EXTRACT
    except ValueError:
        raise CheckpointError(
            f"BERTFIT_MAX_EXTRACT must be a number of bytes; got {text!r}."
        ) from None


def check_members(archive: Path, target: Path) -> None:
    """Raises `CheckpointError` for the first member that would land outside `target`, and for
    an archive past the size, ratio or member-count limits."""
    if archive.name.lower().endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            infos = z.infolist()
            for info in infos:
                _check_name(archive, info.filename)
            _check_size(archive, len(infos), sum(info.file_size for info in infos))
        return
    with tarfile.open(archive) as t:
        members = t.getmembers()
        for member in members:
            _check_name(archive, member.name)
            if member.issym() or member.islnk():
                base = target / PurePosixPath(member.name).parent if member.issym() else target
                if PurePosixPath(member.linkname).is_absolute() or not _inside(
                    target, base / member.linkname
                ):
                    raise _refuse(
                        archive,
                        member.name,
                        f"it links to {member.linkname!r}, outside the archive",
                    )
            elif not (member.isfile() or member.isdir()):
                raise _refuse(archive, member.name, "it is a device or fifo, not a file")
        _check_size(archive, len(members), sum(m.size for m in members if m.isfile()))


def _check_size(archive: Path, members: int, expanded: int) -> None:
    limit = max_extract_bytes()
    compressed = max(archive.stat().st_size, 1)
    if members > MAX_MEMBERS:
        raise CheckpointError(
            f"{archive}: holds {members:,} entries; a checkpoint has a handful (at most "
            f"{MAX_MEMBERS:,} are extracted). This is not a model archive."
        )
    if expanded > limit:
        raise CheckpointError(
            f"{archive}: would expand to {expanded / 2**30:.2f} GiB, past the "
            f"{limit / 2**30:.2f} GiB limit. If this really is the checkpoint, raise the limit "
            "with BERTFIT_MAX_EXTRACT=<bytes>, or extract it yourself and pass the folder."
        )
    if expanded / compressed > MAX_RATIO:
        raise CheckpointError(
            f"{archive}: would expand {expanded / compressed:,.0f} times its size "
            f"({compressed:,} bytes to {expanded:,}); checkpoints compress far less (the limit "
            f"is {MAX_RATIO}x). This looks like a decompression bomb; extract it yourself if "
            "you trust it."
        )


def extract(archive: Path, target: Path | None = None) -> Path:
    """Extracts `archive` (once; later calls reuse it) and returns the extracted folder."""
    if target is None:
        stat = archive.stat()
        key = hashlib.sha1(f"{archive.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        target = cache_root() / "archives" / key.hexdigest()[:16]
    done = target / ".extracted"
    if done.is_file():
        return target
    try:
        check_members(archive, target)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise CheckpointError(
            f"{archive}: cannot read ({e}). The archive is truncated or corrupt; download it again."
        ) from e
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as z:
                z.extractall(partial)
        else:
            with tarfile.open(archive) as t:
                t.extractall(partial, filter="data")
        (partial / ".extracted").write_text(str(archive))
        shutil.rmtree(target, ignore_errors=True)  # an unfinished extraction of old
        os.replace(partial, target)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise CheckpointError(
            f"{archive}: cannot extract ({e}). If the archive is truncated or corrupt, download "
            "it again; if the disk is full, free space or point BERTFIT_CACHE elsewhere."
        ) from e
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def content_root(folder: Path) -> Path:
    """An archive usually holds one top folder; descend into it."""
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else folder
