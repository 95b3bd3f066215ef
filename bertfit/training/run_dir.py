"""A run directory, written: how `bertfit train` starts, locks and fills one (the layout and
its readers: `bertfit.runs.run_dir`).

One directory holds one run: `bertfit train` holds an exclusive lock on `RUN/.lock` (flock, with
its pid inside) while it writes, so a second run started on the same directory is refused (and
one started with the default output directory takes the next name). The lock dies with its
process; a lock file left by a dead process is taken over, and said.

Every file is written whole or not at all (a temporary file `.<name>.<pid>.tmp` renamed into
place); the temporary files a kill left are recognised and removed when the next run takes the
directory. A checkpoint is one file written the same way (`bertfit.runs.checkpoint_files`), and
what a killed save left behind is removed when the run resumes.

Starting a run is decided before anything is loaded or written (`TrainingRunDir.plan_start`):
a new or empty directory starts afresh, an unfinished run of the same config resumes, a run of
another config that failed before its first checkpoint (nothing trained to lose) is replaced,
with a note, and anything else (a finished run, another config's unfinished run, files that are
not a run) is refused with the flag that resolves it.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Collection
from pathlib import Path

import numpy as np

from bertfit.atomic import leftover_of, write_bytes_atomic, write_text_atomic
from bertfit.config import RunConfig, config_differences
from bertfit.data.buckets import fixed_buckets, saved_buckets
from bertfit.data.tasks import Task
from bertfit.errors import BertfitError, ConfigError
from bertfit.model.config import BertConfig
from bertfit.runs.calibration import Calibration
from bertfit.runs.checkpoint_files import remove_leftovers
from bertfit.runs.records import DIVERGED, FAILED, FINISHED, RUNNING, RunSummary
from bertfit.runs.run_dir import LOCK_FILE, RUN_ENTRIES, RunDir, leftovers

RUNS_ROOT = Path("runs")
LATEST_LINK = "latest"


class RunBusy(ConfigError):
    """Another live `bertfit train` holds the run directory."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """An exclusive lock on a run directory for one training process (see the module
    docstring). `acquire` creates the directory when needed; `release` removes what `acquire`
    created when the run never wrote anything into it."""

    def __init__(self, path: Path):
        self.path = path
        self.file = path / LOCK_FILE
        self._fd: int | None = None
        self._created: list[Path] = []

    def acquire(self) -> str | None:
        """Takes the lock; returns a note when a dead process's lock was taken over.

        Raises:
            RunBusy: a live process holds it.
        """
        missing, existing = [], self.path.absolute()
        while not existing.exists():
            missing.append(existing)
            existing = existing.parent
        self.path.mkdir(parents=True, exist_ok=True)
        self._created = missing  # deepest first
        while True:
            fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                self._remove_created()
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise RunBusy(
                    f"--output-dir {self.path} is in use by another bertfit train (pid "
                    f"{holder}); two runs in one directory would mix their files. Wait for it "
                    "to finish, or choose another --output-dir."
                ) from None
            try:  # the holder may have removed the file between our open and our flock
                same = os.fstat(fd).st_ino == os.stat(self.file).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        previous = os.read(fd, 64).decode("ascii", "replace").strip()
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        if previous.isdigit() and int(previous) != os.getpid():
            state = "no longer running" if not _alive(int(previous)) else "no longer holding it"
            return f"took over the lock {self.file} left by pid {previous} ({state})"
        return None

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.file.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None
        self._remove_created()

    def _remove_created(self) -> None:
        """Removes the folders `acquire` made, while nothing else was written into them."""
        for folder in self._created:
            try:
                folder.rmdir()
            except OSError:
                break
        self._created = []


def new_run_path(root: Path = RUNS_ROOT) -> Path:
    """`runs/<date>-<time>`, with a suffix when a run started in the same second."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, n = root / stamp, 1
    while path.exists():
        n += 1
        path = root / f"{stamp}-{n}"
    return path


def unfinished_run_of(
    config: RunConfig, root: Path = RUNS_ROOT
) -> tuple[TrainingRunDir, RunLock] | None:
    """The newest unfinished run under `root` (runs/<date>-<time>) of this config that no live
    process holds, locked: what the same command, rerun after a preemption or a crash without
    `--output-dir`, continues (as it does with one). None when there is none."""
    if not root.is_dir():
        return None
    for path in sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.is_symlink()), reverse=True
    ):
        run_dir = TrainingRunDir(path)
        if not run_dir.holds_unfinished(config):
            continue
        try:
            lock = run_dir.lock()
        except RunBusy:
            continue
        if run_dir.holds_unfinished(config):  # decided again under the lock
            return run_dir, lock
        lock.release()
    return None


def with_saved_decisions(saved: RunConfig, config: RunConfig) -> RunConfig:
    """`config` with what the saved run decided where `config` leaves it to the run: the
    pooling (no `--pooling`), unit features (no `--normalize-features`), the batch size and
    epochs (no `--batch-size`, `--epochs`). A resumed run pools, classifies and steps as it
    started (`training.setup.assemble` decides them for a new run)."""
    m, t = config.model, config.train
    normalize = m.normalize_features
    if normalize is None:
        normalize = saved.model.normalize_features
    return dataclasses.replace(
        config,
        model=dataclasses.replace(
            m, pooling=m.pooling or saved.model.pooling, normalize_features=normalize
        ),
        train=dataclasses.replace(
            t,
            batch_size=t.batch_size or saved.train.batch_size,
            epochs=t.epochs or saved.train.epochs,
        ),
    )


def _decided(saved: RunConfig, config: RunConfig) -> tuple[RunConfig, RunConfig]:
    """Both configs with what a run decides filled in: their buckets as lists of lengths,
    "auto" taking the saved run's choice, and what else the saved run decided where `config`
    leaves it (`with_saved_decisions`), so a rerun of the same command (or `--buckets none`
    against [max]) compares equal."""
    saved_lengths = saved_buckets(saved.data.buckets, saved.model.max_seq_length)
    wanted = fixed_buckets(config.data.buckets, config.model.max_seq_length) or saved_lengths

    def with_buckets(c: RunConfig, lengths: tuple[int, ...]) -> RunConfig:
        return dataclasses.replace(c, data=dataclasses.replace(c.data, buckets=list(lengths)))

    return with_buckets(saved, saved_lengths), with_buckets(
        with_saved_decisions(saved, config), wanted
    )


class TrainingRunDir(RunDir):
    """The run directory `bertfit train` writes: its start policy, its lock and its writers,
    on top of the readers every command uses.

    Args:
        path: the directory (a non-chief worker's is a scratch directory: see `train`).
        shown_as: how messages name it: the URL of a run at a URL, whose files are in the
            local staging folder `path` (`bertfit.training.remote_run`).
        sync: called after each save (metrics, checkpoints) to upload what changed.
    """

    def __init__(self, path: str | Path, *, shown_as: str | None = None, sync=None):
        super().__init__(path, shown_as=shown_as)
        self._sync = sync
        self._replaced: str | None = None  # the run `plan_start` decided to replace

    def sync(self) -> None:
        """Uploads what changed, for a run at a URL (nothing to do for a local one)."""
        if self._sync is not None:
            self._sync()

    # ---- starting a run ----

    def plan_start(self, config: RunConfig, *, resume: bool | None, overwrite: bool) -> bool:
        """Decides, before anything is loaded or written, whether training starts afresh
        (False) or resumes the unfinished run here (True); refuses to mix two runs.

        Args:
            config: the run about to start.
            resume: True: resume or fail; False: never resume; None: resume an unfinished run
                of the same config, refuse anything else.
            overwrite: clear a previous run here first (done by `create`).
        """
        self._check_writable()
        status = self.status()
        if resume and overwrite:
            raise ConfigError("--resume and --overwrite contradict each other; pass one.")
        if status == "foreign":
            raise ConfigError(
                f"--output-dir {self.shown} holds files that are not a bertfit run "
                f"({self._foreign_description()}); bertfit will not write into it or clear it. "
                "Choose a new or empty --output-dir."
            )
        if overwrite or status == "new":
            if resume:
                raise ConfigError(f"--resume: {self.shown} holds no run to resume.")
            return False
        where = f"--output-dir {self.shown}"
        if status == FINISHED:
            raise ConfigError(
                f"{where} holds a finished run (--resume continues only unfinished ones). Pass "
                "--overwrite to replace it, or choose another --output-dir (leave it out for a "
                "new runs/<date>-<time>)."
            )
        saved = self.load_config()
        differences = config_differences(*_decided(saved, config))
        failed = self.metrics_status() == FAILED  # not a run still going (on another host)
        if differences and failed and not resume and not self.saved_checkpoint():
            # nothing trained to lose: the corrected command needs no --overwrite
            self._replaced = (
                f"a run of other settings ({'; '.join(differences)}) that failed before its "
                "first checkpoint"
            )
            return False
        if differences:
            raise ConfigError(
                f"{where} holds an unfinished run with other settings ({'; '.join(differences)})."
                f" To continue it: bertfit train --config {self._shown(self.config_file)} "
                "--resume. To replace it: --overwrite. Or choose another --output-dir."
            )
        if resume is False:
            raise ConfigError(
                f"{where} holds an unfinished run of this config. Pass --resume "
                "to continue it or --overwrite to start again."
            )
        return True

    def holds_unfinished(self, config: RunConfig) -> bool:
        """Whether this directory holds an unfinished run of `config` (the output directory
        and how it executes aside) that a rerun should continue: not one that diverged (its
        message says to change a setting and start again)."""
        if self.status() != RUNNING or self.metrics_status() == DIVERGED:
            return False
        try:
            saved = self.load_config()
        except BertfitError:
            return False
        return not config_differences(*_decided(saved, config))

    def _foreign_description(self) -> str:
        entries = sorted(p.name for p in self.path.iterdir())
        if not self.config_file.exists():
            return "no config.yaml"
        skipped = {LOCK_FILE, *leftovers(entries)}
        strangers = [name for name in entries if name not in RUN_ENTRIES | skipped]
        shown = ", ".join(strangers[:5]) + (", ..." if len(strangers) > 5 else "")
        return f"{shown} is not a run's file" if len(strangers) == 1 else f"{shown} are not"

    def lock(self) -> RunLock:
        """Takes the run's lock (see `RunLock`) and removes the temporary files a killed
        run left; says when a dead process's lock was taken over."""
        lock = RunLock(self.path)
        note = lock.acquire()
        if note:
            print(f"bertfit: {note}", file=sys.stderr)
        for name in leftovers(p.name for p in self.path.iterdir()):
            if leftover_of(name)[1] != os.getpid():  # a folder: a killed distill's set
                leftover = self.path / name
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink(missing_ok=True)
        return lock

    def _check_writable(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(
                f"--output-dir {self.shown} is a file, not a directory; choose a directory path."
            )
        existing = self.path.absolute()
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir():
            raise ConfigError(f"--output-dir {self.shown}: {existing} is a file, not a directory.")
        try:  # a real write: permissions, read-only file systems and quotas all show here
            os.rmdir(tempfile.mkdtemp(prefix=".bertfit-write-test-", dir=existing))
        except OSError as e:
            raise ConfigError(
                f"--output-dir {self.shown}: cannot create files in {existing} "
                f"({e.strerror}); choose a directory you can write to."
            ) from None

    def create(self, *, overwrite: bool = False, keep: Collection[str] = ()) -> None:
        """Makes the directory (clearing a previous run first with `overwrite`, or the run
        without a checkpoint that `plan_start` decided to replace; all but the entries named
        in `keep`)."""
        if self._replaced:
            print(f"bertfit: {self.shown} held {self._replaced}: replacing it", file=sys.stderr)
        if (overwrite or self._replaced) and self.path.exists():
            for entry in self.path.iterdir():
                if entry.name == LOCK_FILE or entry.name in keep:  # the lock: this run's own
                    continue
                shutil.rmtree(
                    entry
                ) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        self.path.mkdir(parents=True, exist_ok=True)

    def link_as_latest(self) -> None:
        """Points `<parent>/latest` at this run (a symlink), unless `latest` is a real
        directory (an older run's), which is left alone."""
        link = self.path.parent / LATEST_LINK
        if link.exists() and not link.is_symlink():
            return
        temporary = self.path.parent / f".{LATEST_LINK}.{os.getpid()}"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(self.path.name, target_is_directory=True)
        os.replace(temporary, link)

    def save_setup(
        self,
        config: RunConfig,
        task: Task,
        bert: BertConfig,
        tokenizer,
    ) -> None:
        self.encoder_dir.mkdir(exist_ok=True)
        write_text_atomic(self.encoder_dir / "config.json", json.dumps(bert.to_dict(), indent=2))
        tokenizer.save(self.tokenizer_dir)
        task.save(self.labels_file)
        config.save(self.config_file)  # last: its presence marks a run directory

    def save_task(self, task: Task) -> None:
        """Rewrites labels.json (a tuned multi-label threshold at the end of a run)."""
        task.save(self.labels_file)

    # ---- during a run ----

    def log(self, message: str) -> None:
        with self.log_file.open("a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")

    def append_steps(self, rows: list[dict]) -> None:
        """One JSON line per optimizer step (epoch, step in epoch, global step, loss, ...)."""
        if rows:
            with self.steps_file.open("a", encoding="utf-8") as f:
                f.writelines(json.dumps(row) + "\n" for row in rows)

    def keep_steps(self, global_step: int) -> None:
        """Drops the step lines after `global_step` (written after the checkpoint a resumed
        run restarts from, or cut off by a kill)."""
        if not self.steps_file.exists():
            return
        kept = [row for row in self.read_steps() if row.get("global_step", 0) <= global_step]
        write_text_atomic(self.steps_file, "".join(json.dumps(row) + "\n" for row in kept))

    def save_eval_outputs(self, targets: np.ndarray, outputs: np.ndarray) -> None:
        _save_outputs(self.eval_outputs_file, targets, outputs)

    def save_best_eval_outputs(self, targets: np.ndarray, outputs: np.ndarray) -> None:
        """The best checkpoint's eval outputs, which the end of the run calibrates on."""
        _save_outputs(self.best_eval_outputs_file, targets, outputs)

    def save_calibration(self, calibration: Calibration) -> None:
        calibration.save(self.calibration_file)
        self.sync()

    def save_metrics(self, summary: RunSummary) -> None:
        write_text_atomic(self.metrics_file, json.dumps(summary.to_dict(), indent=2))
        self.sync()

    def remove_checkpoint_leftovers(self) -> None:
        """Deletes what a killed save left: a temporary file, the checkpoint a save replaced
        (`checkpoint_files.remove_leftovers`)."""
        for directory in (self.latest_dir, self.best_dir, self.adapter_dir):
            remove_leftovers(directory)


def _save_outputs(file: Path, targets: np.ndarray, outputs: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, targets=targets, outputs=outputs)
    write_bytes_atomic(file, buffer.getvalue())
