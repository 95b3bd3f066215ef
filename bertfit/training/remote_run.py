"""A run directory at a URL (`gs://`, `s3://`, `ram://`, ...: `bertfit.storage`).

Training writes checkpoints, TensorBoard events and the run's files into a local staging
copy, exactly as into a local run directory (`TrainingRunDir`); `RemoteRun.push` then uploads what
changed and deletes what the staging copy no longer holds. An object store has no rename, so
the rules of a local run directory hold this way:

- Whole files: each file is one upload, which the store shows whole or not at all.
- Whole checkpoints: a checkpoint is one file (`bertfit.runs.checkpoint_files`), so one
  upload, and the checkpoint it replaces is deleted only after it. A reader takes each
  folder's newest checkpoint, so a push killed half-way leaves a whole checkpoint as the one
  that loads: the new one, or the previous one; the one left over is removed when the run
  resumes.
- One run: `RUN/.lock` is an object created only if none is there (GCS `ifGenerationMatch=0`,
  S3 `If-None-Match`), holding the host and pid of the run. A lock whose process on this host
  is gone is taken over, and said; one held from another host is refused, with the object to
  delete when that run is known to be dead (a store cannot tell whether a far process lives).

What a kill costs: the run as of its last push (each checkpoint save, each metrics.json
write: at least once an epoch, and at the end).

Reading a run at a URL (`bertfit.runs.run_dir.open_run`): its files are downloaded into a
temporary folder, removed at exit; each checkpoint folder's newest checkpoint is the one used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bertfit import storage
from bertfit.atomic import leftover_of
from bertfit.errors import ConfigError
from bertfit.runs.run_dir import LOCK_FILE, RUN_ENTRIES
from bertfit.training.run_dir import RunBusy, TrainingRunDir, _alive


class RemoteRun:
    """The run directory at `url`, mirrored by a local staging folder.

    Args:
        url: the run directory (`--output-dir gs://bucket/runs/a`).
    """

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.lock_url = storage.join(self.url, LOCK_FILE)
        self.staging = Path(tempfile.mkdtemp(prefix="bertfit-run-"))
        self._holder = f"{socket.gethostname()} {os.getpid()} {time.time():.0f}\n"
        self._pushed: dict[str, tuple[int, int]] = {}  # file -> (size, mtime) as uploaded
        self._remote: set[str] = set()  # files at the URL

    def acquire(self) -> str | None:
        """Takes `RUN/.lock`; returns a note when a dead process's lock was taken over.

        Raises:
            RunBusy: another process holds it.
        """
        # A store without preconditions (an emulator) still refuses a lock that is there.
        if not storage.exists(self.lock_url) and storage.create_exclusive(
            self.lock_url, self._holder.encode()
        ):
            return None
        try:
            held = storage.read_bytes(self.lock_url).decode("utf-8", "replace").split()
        except FileNotFoundError:  # released between our two calls: try once more
            held = []
        host, pid = (held + ["?", "?"])[:2]
        if held and host == socket.gethostname() and pid.isdigit() and not _alive(int(pid)):
            storage.write_bytes(self.lock_url, self._holder.encode())
            return f"took over the lock of {self.url} from pid {pid}, which is no longer running"
        if not held and storage.create_exclusive(self.lock_url, self._holder.encode()):
            return None
        raise RunBusy(
            f"--output-dir {self.url} is in use by another bertfit train (pid {pid} on "
            f"{host}); two runs in one directory would mix their files. Wait for it to finish, "
            f"or choose another --output-dir. If that run is dead (killed on another machine), "
            f"delete {self.lock_url} and run again."
        )

    def release(self) -> None:
        """Removes the lock if it is still this process's; removes the staging folder."""
        try:
            if storage.read_bytes(self.lock_url).decode("utf-8", "replace") == self._holder:
                storage.remove(self.lock_url)
        except FileNotFoundError:
            pass
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)

    def pull(self) -> None:
        """Downloads the run at the URL (if any) into the staging folder.

        Raises:
            ConfigError: the URL holds objects that are not a run's; nothing is downloaded.
        """
        names = storage.list_files(self.url)
        strangers = sorted(
            {n.split("/")[0] for n in names}
            - RUN_ENTRIES
            - {LOCK_FILE}
            - {n for n in names if leftover_of(n) is not None}
        )
        if strangers:
            shown = ", ".join(strangers[:5]) + (", ..." if len(strangers) > 5 else "")
            raise ConfigError(
                f"--output-dir {self.url} holds objects that are not a bertfit run ({shown}); "
                "bertfit will not write into it or clear it. Choose a new or empty --output-dir."
            )
        self._remote = set(
            storage.download_tree(self.url, self.staging, skip=lambda name: name == LOCK_FILE)
        )
        self._pushed = {name: _stamp(self.staging / name) for name in self._remote}

    def push(self) -> None:
        """Uploads the staging files that changed since the last push (config.yaml after
        the others), then deletes the files at the URL that staging no longer holds."""
        files = _run_files(self.staging)
        changed = [name for name, stamp in files.items() if self._pushed.get(name) != stamp]
        for name in sorted(changed, key=_upload_order):
            storage.upload_file(self.staging / name, storage.join(self.url, name))
            self._pushed[name] = files[name]
            self._remote.add(name)
        for name in sorted(self._remote - files.keys()):
            with contextlib.suppress(FileNotFoundError):
                storage.remove(storage.join(self.url, name))
            self._remote.discard(name)
            self._pushed.pop(name, None)

    def push_said(self) -> None:
        """`push`, a store's refusal (permissions revoked, the network) in one line."""
        with storage.writes_said(self.url):
            self.push()


def _stamp(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns


def _run_files(folder: Path) -> dict[str, tuple[int, int]]:
    """The run's files under `folder` (relative names), without the lock and the temporary
    files of writes in progress."""
    files = {}
    for path in folder.rglob("*"):
        if path.is_file() and path.name != LOCK_FILE and leftover_of(path.name) is None:
            files[path.relative_to(folder).as_posix()] = _stamp(path)
    return files


def _upload_order(name: str) -> tuple[bool, str]:
    """The run's files first, then config.yaml (it marks a run directory)."""
    return name == "config.yaml", name


@contextlib.contextmanager
def claimed(url: str) -> Iterator[TrainingRunDir]:
    """The run directory at `url`, locked, pulled into a staging folder and pushed after
    every save (`TrainingRunDir.sync`) and at the end, however the run ends."""
    remote = RemoteRun(url)
    try:
        with storage.writes_said(remote.url):  # a missing bucket, no permission: one line
            note = remote.acquire()
    except BaseException:
        shutil.rmtree(remote.staging, ignore_errors=True)
        raise
    try:
        if note:
            print(f"bertfit: {note}", file=sys.stderr)
        with storage.writes_said(remote.url):
            remote.pull()
        yield TrainingRunDir(remote.staging, shown_as=remote.url, sync=remote.push_said)
    finally:
        try:
            remote.push_said()  # however the run ended: a stop's checkpoint, an error in metrics
        finally:
            remote.release()
