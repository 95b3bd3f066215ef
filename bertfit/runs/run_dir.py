"""A run directory, read: everything needed to evaluate, predict, resume or export a trained run.

    run/
      config.yaml           the resolved RunConfig (reload with --config)
      labels.json           the task and its label names by output id (`Task`)
      encoder/              config.json (the architecture), tokenizer/ (the tokenizer's files,
                            as `tokenizer.save` writes them)
      checkpoints/latest/   ckpt-N.safetensors: model + optimizer + RNG + data position at
                            global step N: resumes the run exactly
      checkpoints/best/     ckpt-N.safetensors: the model weights of the best evaluation by
                            `best_metric` (no optimizer); `checkpoints/adapter/` beside it: a
                            LoRA run's adapters and head (`bertfit.runs.checkpoint_files`)
      metrics.json          per epoch and final: loss, accuracy, macro_f1, num_examples, ...;
                            "status" is "running" until the run finished
      steps.jsonl           every optimizer step: loss, learning rate, gradient norm, examples/s,
                            wall_time (Unix seconds when its host call returned)
      eval_outputs.npz      the targets and outputs of the latest evaluation (for the report)
      best_eval_outputs.npz the same of the best checkpoint's evaluation (calibrated on)
      calibration.json      the temperatures, per-label thresholds or predictive interval
                            fitted on --eval at the end, with ECE, Brier and NLL before and
                            after (`bertfit.runs.calibration.Calibration`)
      tensorboard/          TensorBoard events (`tensorboard --logdir runs/`)
      report.html           plots and tables of the run (`bertfit report`)
      train.log             what happened, readable

A run whose metrics.json does not say "finished" (killed, or still training) can still be
evaluated, exported and served: its best checkpoint, or its latest (mid-epoch) one, is used and
the commands say so in a warning (`RunDir.unfinished_note`).

A run at a URL (`gs://`, `s3://`, ...) is read from a local copy: `open_run` downloads its
files into a temporary folder, removed at exit; each checkpoint folder's newest checkpoint is
the one used. Training writes a run through `bertfit.training.run_dir` (the lock, the start
policy, the writers) and `bertfit.training.remote_run` (a run at a URL).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

import numpy as np

from bertfit import storage
from bertfit.atomic import leftover_of
from bertfit.config import RunConfig
from bertfit.data.buckets import saved_buckets
from bertfit.data.tasks import Task
from bertfit.errors import BertfitError
from bertfit.model.config import BertConfig
from bertfit.runs.calibration import CALIBRATION_FILE, Calibration
from bertfit.runs.checkpoint_files import SUFFIX, checkpoint_step, latest_checkpoint
from bertfit.runs.records import FINISHED, RUNNING
from bertfit.text.loading import load_tokenizer

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
    "onnx-engine",  # the ONNX export `--engine onnx` runs (bertfit.export.onnx_engine)
    "distill",  # `bertfit distill`: the teacher's labels and the student's start
}
# Entries a run directory holds before its run starts (`status` still says "new").
BEFORE_RUN_ENTRIES = {"distill"}
LOCK_FILE = ".lock"  # held by the `bertfit train` writing the run (`bertfit.training.run_dir`)
_NOT_READ = ("tensorboard",)  # not needed to evaluate, predict, export or report a run


def leftovers(entries) -> list[str]:
    """The temporary files of bertfit's own atomic writes among a run directory's `entries` (a
    kill between the write and the rename leaves them)."""
    return [
        name
        for name in entries
        if (found := leftover_of(name)) is not None and found[0] in RUN_ENTRIES
    ]


class RunDir:
    """Paths and readers of one run directory.

    Args:
        path: the directory.
        shown_as: how messages name it: the URL of a run at a URL, whose files are in the
            local folder `path` (`open_run`).
        not_copied: the files of the run at a URL left out of that folder, relative to it
            (checkpoint weights a report does not need: still named in the warnings).
    """

    def __init__(
        self, path: str | Path, *, shown_as: str | None = None, not_copied: Iterable[str] = ()
    ):
        self.path = Path(path)
        self.shown = shown_as or str(path)
        self._not_copied = [PurePosixPath(name) for name in not_copied]

    def _shown(self, file: Path) -> str:
        """How messages name `file` of this run (under the URL for a run at a URL)."""
        if self.shown == str(self.path):
            return str(file)
        return f"{self.shown}/{file.relative_to(self.path).as_posix()}"

    @property
    def config_shown(self) -> str:
        """config.yaml as messages name it (`bertfit train --config ... --resume`)."""
        return self._shown(self.config_file)

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
    adapter_dir = property(lambda self: self.path / "checkpoints" / "adapter")  # LoRA runs

    def status(self) -> str:
        """ "new" (absent or empty), "running" (a run that did not finish), "finished", or
        "foreign" (files that are not a bertfit run)."""
        if not self.path.exists():
            return "new"
        entries = {p.name for p in self.path.iterdir()} - {LOCK_FILE}
        entries -= set(leftovers(entries))
        if not entries - BEFORE_RUN_ENTRIES:
            return "new"
        if not self.config_file.exists() or not entries <= RUN_ENTRIES:
            return "foreign"
        return FINISHED if self.metrics_status() == FINISHED else RUNNING

    def metrics_status(self) -> str | None:
        """metrics.json's "status", None when it is missing or unreadable."""
        return self._metrics_entry("status")

    def chosen_schedule(self) -> str | None:
        """metrics.json's "schedule": what the run said of the batch size and epochs it chose
        for a small training set; None where the flags or the defaults set them."""
        return self._metrics_entry("schedule")

    def few_shot_record(self) -> dict | None:
        """metrics.json's "few_shot": the `--few-shot` stage the run trained first."""
        return self._metrics_entry("few_shot")

    def finished_scores(self) -> dict | None:
        """metrics.json's "final" (the final weights' scores on the eval data) of a finished
        run; None for a run that did not finish."""
        metrics = self._metrics()
        return metrics.get("final") if metrics.get("status") == FINISHED else None

    def _metrics_entry(self, key: str):
        return self._metrics().get(key)

    def _metrics(self) -> dict:
        """metrics.json, {} when it is missing or unreadable."""
        try:
            metrics = json.loads(self.metrics_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return metrics if isinstance(metrics, dict) else {}

    def saved_checkpoint(self) -> bool:
        """Whether the run saved a checkpoint (its latest or its best): something trained that
        a resume continues or a command uses."""
        return any(self._latest_checkpoint(d) for d in (self.latest_dir, self.best_dir))

    def saved_buckets(self) -> tuple[int, ...]:
        """The length buckets the run here resolved (a resumed run keeps them)."""
        saved = self.load_config()
        return saved_buckets(saved.data.buckets, saved.model.max_seq_length)

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
        best = self._latest_checkpoint(self.best_dir)
        latest = self._latest_checkpoint(self.latest_dir)
        if best:
            step = checkpoint_step(best)
            used = f"its best checkpoint so far ({Path(best).name}, global step {step})"
        elif latest:
            used = f"its latest, mid-epoch checkpoint (global step {checkpoint_step(latest)})"
        else:
            used = "no checkpoint (none was saved)"
        return (
            f"{self.shown} is an unfinished run (killed, or still training: {progress}); "
            f"using {used}. Resume it with bertfit train --config "
            f"{self._shown(self.config_file)} --resume to finish it."
        )

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

    def load_eval_outputs(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(targets, outputs) of the latest evaluation, if one was saved."""
        return _load_outputs(self.eval_outputs_file)

    def load_best_eval_outputs(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(targets, outputs) of the best checkpoint's evaluation, if one was saved."""
        return _load_outputs(self.best_eval_outputs_file)

    def load_calibration(self) -> Calibration | None:
        """calibration.json, or None for a run without one (no --eval, older runs)."""
        if not self.calibration_file.exists():
            return None
        return Calibration.load(self.calibration_file)

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
        """The run's tokenizer, as training's `TrainingRunDir.save_setup` wrote it."""
        return load_tokenizer(self._require(self.tokenizer_dir))

    def load_host_tokenizer(self):
        """The same tokenizer on the host (`HostTokenizer`: `tokenizers` and NumPy, no
        TensorFlow), from the same files."""
        from bertfit.text.host import load_host_tokenizer

        return load_host_tokenizer(self._require(self.tokenizer_dir))

    def _latest_checkpoint(self, directory: Path) -> str | None:
        folder = PurePosixPath(directory.relative_to(self.path).as_posix())
        not_copied = [name.name for name in self._not_copied if name.parent == folder]
        return latest_checkpoint(directory, not_copied)

    def checkpoint_path(self, which: str = "best") -> str:
        """The current checkpoint of `which` ("best", or "latest"; a run without a best
        checkpoint yet gives its latest)."""
        directory = self.best_dir if which == "best" else self.latest_dir
        path = self._latest_checkpoint(directory)
        if path is None and which == "best":
            path = self._latest_checkpoint(self.latest_dir)
        if path is None:
            raise BertfitError(f"{self.shown}: no checkpoint found under {self._shown(directory)}.")
        return path


def open_run(path: str | os.PathLike, *, checkpoints: bool = True) -> RunDir:
    """The `RunDir` of the run at `path`, to read (evaluate, predict, export, report). A run
    at a URL is downloaded, less its TensorBoard events (and its checkpoints' weights without
    `checkpoints`: a report, a warning), into a temporary folder removed at exit."""
    if not storage.is_url(path):
        return RunDir(path)
    url = storage.path_text(path)
    not_copied = []

    def skip(name: str) -> bool:
        parts = name.split("/")
        weights = parts[0] == "checkpoints" and (parts[-1].endswith(SUFFIX) or ".data-" in name)
        if weights and not checkpoints:
            not_copied.append(name)
            return True
        return parts[0] in (LOCK_FILE, *_NOT_READ)

    folder = Path(tempfile.mkdtemp(prefix="bertfit-run-copy-"))
    atexit.register(shutil.rmtree, folder, True)
    storage.download_tree(url, folder, skip=skip)
    return RunDir(folder, shown_as=url, not_copied=not_copied)


def _load_outputs(file: Path) -> tuple[np.ndarray, np.ndarray] | None:
    if not file.exists():
        return None
    with np.load(file) as data:
        return data["targets"], data["outputs"]
