"""The run directory: everything needed to evaluate, predict, resume or export a trained run.

    run/
      config.yaml           the resolved RunConfig (reload with --config)
      labels.json           the task and its label names by output id (`Task`)
      encoder/              config.json (the architecture), tokenizer/ (the tokenizer's files,
                            as `tokenizer.save` writes them)
      checkpoints/latest/   model + optimizer + RNG + data position: resumes the run exactly
      checkpoints/best/     the model weights of the best epoch by `best_metric` (no optimizer)
      metrics.json          per epoch and final: loss, accuracy, macro_f1, num_examples, ...;
                            "status" is "running" until the run finished
      steps.jsonl           every optimizer step: loss, learning rate, gradient norm, examples/s,
                            wall_time (Unix seconds when its host call returned)
      eval_outputs.npz      the targets and outputs of the latest evaluation (for the report)
      best_eval_outputs.npz the same of the best checkpoint's evaluation (calibrated on)
      calibration.json      the temperatures and per-label thresholds fitted on --eval at the
                            end, with ECE, Brier and NLL before and after (`Calibration`)
      tensorboard/          TensorBoard events (`tensorboard --logdir runs/`)
      report.html           plots and tables of the run (`bertfit report`)
      train.log             what happened, readable

One directory holds one run: `bertfit train` holds an exclusive lock on `RUN/.lock` (flock, with
its pid inside) while it writes, so a second run started on the same directory is refused (and
one started with the default output directory takes the next name). The lock dies with its
process; a lock file left by a dead process is taken over, and said.

Every file is written whole or not at all (a temporary file `.<name>.<pid>.tmp` renamed into
place); the temporary files a kill left are recognised and removed when the next run takes the
directory. A checkpoint counts only once TensorFlow's `checkpoint` index names it, and what a
killed save left behind is removed when the run resumes.

A run whose metrics.json does not say "finished" (killed, or still training) can still be
evaluated, exported and served: its best checkpoint, or its latest (mid-epoch) one, is used and
the commands say so in a warning (`RunDir.unfinished_note`).
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
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit.atomic import leftover_of, write_bytes_atomic, write_text_atomic
from bertfit.config import RunConfig, config_differences
from bertfit.data.buckets import fixed_buckets, saved_buckets
from bertfit.data.tasks import Task
from bertfit.errors import BertfitError, ConfigError
from bertfit.model.config import BertConfig
from bertfit.text.loading import load_tokenizer
from bertfit.training.calibration import CALIBRATION_FILE, Calibration
from bertfit.training.checkpointing import remove_unindexed
from bertfit.training.records import DIVERGED, FINISHED, RUNNING, RunSummary

RUNS_ROOT = Path("runs")
LATEST_LINK = "latest"
# What a run directory may hold; anything else means the directory is someone else's.
RUN_ENTRIES = {
    "config.yaml",
    "labels.json",
    "encoder",
    "checkpoints",
    "metrics.json",
    "steps.jsonl",
    "train.log",
    "tensorboard",
    "report.html",
    "eval_outputs.npz",
    "best_eval_outputs.npz",
    "calibration.json",
}
LOCK_FILE = ".lock"


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


def unfinished_run_of(config: RunConfig, root: Path = RUNS_ROOT) -> tuple[RunDir, RunLock] | None:
    """The newest unfinished run under `root` (runs/<date>-<time>) of this config that no live
    process holds, locked: what the same command, rerun after a preemption or a crash without
    `--output-dir`, continues (as it does with one). None when there is none."""
    if not root.is_dir():
        return None
    for path in sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.is_symlink()), reverse=True
    ):
        run_dir = RunDir(path)
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


def _step(checkpoint: str) -> str:
    return checkpoint.rpartition("-")[2]


def _buckets_resolved(saved: RunConfig, config: RunConfig) -> tuple[RunConfig, RunConfig]:
    """Both configs with their buckets as lists of lengths, "auto" taking the saved run's
    choice, so a rerun of the same command (or `--buckets none` against [max]) compares
    equal."""
    saved_lengths = saved_buckets(saved.data.buckets, saved.model.max_seq_length)
    wanted = fixed_buckets(config.data.buckets, config.model.max_seq_length) or saved_lengths

    def with_buckets(c: RunConfig, lengths: tuple[int, ...]) -> RunConfig:
        return dataclasses.replace(c, data=dataclasses.replace(c.data, buckets=list(lengths)))

    return with_buckets(saved, saved_lengths), with_buckets(config, wanted)


class RunDir:
    """Paths and readers/writers of one run directory.

    Args:
        path: the directory (a non-chief worker's is a scratch directory: see `train`).
        shown_as: how messages name it: the URL of a run at a URL, whose files are in the
            local staging folder `path` (`bertfit.training.remote_run`).
        sync: called after each save (metrics, checkpoints) to upload what changed.
    """

    def __init__(self, path: str | Path, *, shown_as: str | None = None, sync=None):
        self.path = Path(path)
        self.shown = shown_as or str(path)
        self._sync = sync

    def _shown(self, file: Path) -> str:
        """How messages name `file` of this run (under the URL for a run at a URL)."""
        if self.shown == str(self.path):
            return str(file)
        return f"{self.shown}/{file.relative_to(self.path).as_posix()}"

    @property
    def config_shown(self) -> str:
        """config.yaml as messages name it (`bertfit train --config ... --resume`)."""
        return self._shown(self.config_file)

    def sync(self) -> None:
        """Uploads what changed, for a run at a URL (nothing to do for a local one)."""
        if self._sync is not None:
            self._sync()

    # paths
    config_file = property(lambda self: self.path / "config.yaml")
    labels_file = property(lambda self: self.path / "labels.json")
    encoder_dir = property(lambda self: self.path / "encoder")
    tokenizer_dir = property(lambda self: self.path / "encoder" / "tokenizer")
    metrics_file = property(lambda self: self.path / "metrics.json")
    log_file = property(lambda self: self.path / "train.log")
    steps_file = property(lambda self: self.path / "steps.jsonl")
    eval_outputs_file = property(lambda self: self.path / "eval_outputs.npz")
    best_eval_outputs_file = property(lambda self: self.path / "best_eval_outputs.npz")
    calibration_file = property(lambda self: self.path / CALIBRATION_FILE)
    report_file = property(lambda self: self.path / "report.html")
    latest_dir = property(lambda self: self.path / "checkpoints" / "latest")
    best_dir = property(lambda self: self.path / "checkpoints" / "best")

    # ---- starting a run ----

    def status(self) -> str:
        """ "new" (absent or empty), "running" (a run that did not finish), "finished", or
        "foreign" (files that are not a bertfit run)."""
        if not self.path.exists():
            return "new"
        entries = {p.name for p in self.path.iterdir()} - {LOCK_FILE}
        entries -= set(self._leftovers(entries))
        if not entries:
            return "new"
        if not self.config_file.exists() or not entries <= RUN_ENTRIES:
            return "foreign"
        return FINISHED if self._metrics_status() == FINISHED else RUNNING

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
        differences = config_differences(*_buckets_resolved(saved, config))
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
        if self.status() != RUNNING or self._metrics_status() == DIVERGED:
            return False
        try:
            saved = self.load_config()
        except BertfitError:
            return False
        return not config_differences(*_buckets_resolved(saved, config))

    def _metrics_status(self) -> str | None:
        """metrics.json's "status", None when it is missing or unreadable."""
        try:
            metrics = json.loads(self.metrics_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return metrics.get("status") if isinstance(metrics, dict) else None

    def saved_buckets(self) -> tuple[int, ...]:
        """The length buckets the run here resolved (a resumed run keeps them)."""
        saved = self.load_config()
        return saved_buckets(saved.data.buckets, saved.model.max_seq_length)

    @staticmethod
    def _leftovers(entries) -> list[str]:
        """The temporary files of bertfit's own atomic writes among `entries` (a kill between
        the write and the rename leaves them)."""
        return [
            name
            for name in entries
            if (found := leftover_of(name)) is not None and found[0] in RUN_ENTRIES
        ]

    def _foreign_description(self) -> str:
        entries = sorted(p.name for p in self.path.iterdir())
        if not self.config_file.exists():
            return "no config.yaml"
        skipped = {LOCK_FILE, *self._leftovers(entries)}
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
        for name in self._leftovers(p.name for p in self.path.iterdir()):
            if leftover_of(name)[1] != os.getpid():
                (self.path / name).unlink(missing_ok=True)
        return lock

    def unfinished_note(self) -> str | None:
        """A warning for commands that use a run that did not finish (killed, or still
        training): which checkpoint they get. None for a finished run or no run."""
        if self.status() != RUNNING:
            return None
        try:
            metrics = json.loads(self.metrics_file.read_text(encoding="utf-8"))
            done = len(metrics.get("epochs", []))
        except (OSError, ValueError, AttributeError, TypeError):
            done = 0
        try:
            train = self.load_config().train
            planned = train.epochs if train.max_steps is None else None
        except BertfitError:
            train, planned = None, "?"
        progress = (
            f"{done} of {planned} epochs finished"
            if planned is not None
            else f"{done} epoch(s) finished of a --max-steps {train.max_steps} run"
        )
        best = tf.train.latest_checkpoint(str(self.best_dir))
        latest = tf.train.latest_checkpoint(str(self.latest_dir))
        if best:
            used = f"its best checkpoint so far ({Path(best).name}, global step {_step(best)})"
        elif latest:
            used = f"its latest, mid-epoch checkpoint (global step {_step(latest)})"
        else:
            used = "no checkpoint (none was saved)"
        return (
            f"{self.shown} is an unfinished run (killed, or still training: {progress}); "
            f"using {used}. Resume it with bertfit train --config "
            f"{self._shown(self.config_file)} --resume to finish it."
        )

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

    def create(self, *, overwrite: bool = False) -> None:
        """Makes the directory (clearing a previous run first with `overwrite`)."""
        if overwrite and self.path.exists():
            for entry in self.path.iterdir():
                if entry.name == LOCK_FILE:  # this run's own lock
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

    def read_steps(self) -> list[dict]:
        """The logged steps in order, up to a line cut off by a kill."""
        if not self.steps_file.exists():
            return []
        rows = []
        text = self.steps_file.read_bytes().decode("utf-8", errors="replace")
        for line in text.splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                break
        return rows

    def save_eval_outputs(self, targets: np.ndarray, outputs: np.ndarray) -> None:
        _save_outputs(self.eval_outputs_file, targets, outputs)

    def load_eval_outputs(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(targets, outputs) of the latest evaluation, if one was saved."""
        return _load_outputs(self.eval_outputs_file)

    def save_best_eval_outputs(self, targets: np.ndarray, outputs: np.ndarray) -> None:
        """The best checkpoint's eval outputs, which the end of the run calibrates on."""
        _save_outputs(self.best_eval_outputs_file, targets, outputs)

    def load_best_eval_outputs(self) -> tuple[np.ndarray, np.ndarray] | None:
        return _load_outputs(self.best_eval_outputs_file)

    def save_calibration(self, calibration: Calibration) -> None:
        calibration.save(self.calibration_file)

    def load_calibration(self) -> Calibration | None:
        """calibration.json, or None for a run without one (no --eval, regression, older)."""
        if not self.calibration_file.exists():
            return None
        return Calibration.load(self.calibration_file)

    def save_metrics(self, summary: RunSummary) -> None:
        write_text_atomic(self.metrics_file, json.dumps(summary.to_dict(), indent=2))
        self.sync()

    def remove_checkpoint_leftovers(self) -> None:
        """Deletes what a killed save left: temporary folders and files of a checkpoint that
        TensorFlow's `checkpoint` index does not name."""
        for directory in (self.latest_dir, self.best_dir):
            remove_unindexed(directory)

    # ---- readers ----

    def _require(self, file: Path) -> Path:
        if not file.exists():
            raise BertfitError(
                f"{self.shown} is not a complete bertfit run directory: {file.name} is missing. "
                "Pass the --output-dir of a finished `bertfit train`."
            )
        return file

    def load_config(self) -> RunConfig:
        return RunConfig.load(self._require(self.config_file))

    def load_task(self) -> Task:
        return Task.load(self._require(self.labels_file))

    def load_bert_config(self) -> BertConfig:
        return BertConfig.from_json_file(self._require(self.encoder_dir / "config.json"))

    def load_tokenizer(self):
        """The run's tokenizer, as `save_setup` wrote it."""
        return load_tokenizer(self._require(self.tokenizer_dir))

    def checkpoint_path(self, which: str = "best") -> str:
        directory = self.best_dir if which == "best" else self.latest_dir
        path = tf.train.latest_checkpoint(str(directory))
        if path is None and which == "best":
            path = tf.train.latest_checkpoint(str(self.latest_dir))
        if path is None:
            raise BertfitError(f"{self.shown}: no checkpoint found under {self._shown(directory)}.")
        return path


def _save_outputs(file: Path, targets: np.ndarray, outputs: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, targets=targets, outputs=outputs)
    write_bytes_atomic(file, buffer.getvalue())


def _load_outputs(file: Path) -> tuple[np.ndarray, np.ndarray] | None:
    if not file.exists():
        return None
    with np.load(file) as data:
        return data["targets"], data["outputs"]
