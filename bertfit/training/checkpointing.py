"""A training run's checkpoints: saving them, and what a resume reads back.

The variables are keyed by explicit names (`bertfit.runs.weights`, which inference reads
too). A resumable checkpoint (`checkpoints/latest`) holds the model, the optimizer (slots, step,
loss scale), the RNG states and a JSON `TrainingState` (epoch, position in the epoch's batch
plan, history), all in one TensorFlow checkpoint, so they can never disagree. The best
checkpoint holds only the model weights inference needs.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit.atomic import write_text_atomic
from bertfit.errors import BertfitError
from bertfit.model.lora import adapted_layers, lora_parameters
from bertfit.runs.records import EarlyStop, EpochRecord, StepEvaluation
from bertfit.runs.weights import adapter_variables, make_checkpoint, mirror_for_backend

ADAPTER_CONFIG = "adapter_config.json"


class CheckpointWriteError(BertfitError):
    """A checkpoint could not be written (a full disk, a quota, a read-only file system): its
    partial files are removed and the previous checkpoint stays the one a resume uses."""


def remove_unindexed(directory: str | Path) -> None:
    """Deletes what a failed or killed save left in a checkpoint folder: temporary folders and
    the files of a checkpoint TensorFlow's `checkpoint` index does not name."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    current = tf.train.latest_checkpoint(str(directory))
    keep = {"checkpoint", Path(ADAPTER_CONFIG).stem} | ({Path(current).name} if current else set())
    for entry in directory.iterdir():
        if entry.name.split(".")[0] not in keep:
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink()


def write_adapter_config(directory: str | Path, model, base: str, alpha: float) -> None:
    """`adapter_config.json` beside the adapters: the base checkpoint they were trained on (as
    `--model` named it) and where they sit, as PEFT's file of the same name says it."""
    layers = {name: layer for name, layer in adapted_layers(model).items() if layer.lora_enabled}
    rank = next(iter(layers.values())).lora_rank
    config = {
        "base_model": base,
        "lora_rank": rank,
        "lora_alpha": alpha,
        "adapted_layers": sorted(layers),
        "adapter_parameters": lora_parameters(model),
        "trained_parameters": sum(int(np.prod(v.shape)) for v in adapter_variables(model).values()),
    }
    Path(directory).mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(directory) / ADAPTER_CONFIG, json.dumps(config, indent=2) + "\n")


@dataclasses.dataclass
class TrainingState:
    """Where a run is: what `checkpoints/latest` must hold to continue it exactly.

    Args:
        epoch: the epoch in progress (0-based).
        step: optimizer steps of that epoch already taken (== the plan's length once its
            training is done and only its evaluation remains).
        global_step: optimizer steps taken in the whole run.
        epoch_loss_sum, epoch_examples, epoch_seconds: this epoch's running totals.
        history: one record per finished epoch (as in metrics.json).
        best_value: the best `best_metric` value so far.
        data_fingerprint: identifies the training rows, so a resume on changed data is refused.
        evaluations: the evaluations inside epochs so far (`--eval-every-steps`).
        evaluations_without_improvement: evaluations in a row (at epoch ends and inside
            epochs) that did not improve `best_metric` by more than the minimum delta: early
            stopping's count.
        stopped_early: set by the evaluation that exhausted the patience; the run takes no
            step after it.
        packed_rows: with `--packing`, the rows of a step (a multiple of the replicas, so
            its batch plan depends on them), which a resume must keep; None without.
    """

    epoch: int = 0
    step: int = 0
    global_step: int = 0
    epoch_loss_sum: float = 0.0
    epoch_examples: int = 0
    epoch_seconds: float = 0.0
    history: list[EpochRecord] = dataclasses.field(default_factory=list)
    best_value: float | None = None
    data_fingerprint: str = ""
    evaluations: list[StepEvaluation] = dataclasses.field(default_factory=list)
    evaluations_without_improvement: int = 0
    stopped_early: EarlyStop | None = None
    packed_rows: int | None = None

    def epochs_remain(self, epochs: int) -> bool:
        """Whether an epoch is still to train or to record: none after the last of `epochs`,
        nor after the one early stopping ended (recorded once `epoch` moved past it)."""
        if self.stopped_early is not None:
            return self.epoch < self.stopped_early.epoch
        return self.epoch < epochs

    def to_json(self) -> str:
        values = dataclasses.asdict(self)
        values["history"] = [record.to_dict() for record in self.history]
        return json.dumps(values)

    @classmethod
    def from_json(cls, text: str) -> TrainingState:
        values = json.loads(text)
        values["history"] = [EpochRecord.from_dict(r) for r in values["history"]]
        values["evaluations"] = [StepEvaluation(**e) for e in values.get("evaluations", [])]
        if values.get("stopped_early") is not None:
            values["stopped_early"] = EarlyStop(**values["stopped_early"])
        return cls(**values)


class RunCheckpoints:
    """`latest` (resumable) and `best` (inference weights) checkpoints of one trainer.

    Args:
        model, optimizer: the trainer's.
        latest_dir, best_dir: where the two live (non-chief workers pass scratch folders).
        after_save: called after each save (`RunDir.sync`: a run at a URL uploads it).
    """

    def __init__(self, model, optimizer, latest_dir, best_dir, after_save=None, adapter_dir=None):
        self.seconds = 0.0  # spent writing checkpoints (and uploading them)
        self._after_save = after_save
        self._state = tf.Variable("", dtype=tf.string, trainable=False)
        self._mirror = mirror = mirror_for_backend()  # JAX: the same files, through copies
        resumable = make_checkpoint(model, optimizer, mirror=mirror, training_state=self._state)
        self._latest = tf.train.CheckpointManager(resumable, str(latest_dir), max_to_keep=1)
        self._best = tf.train.CheckpointManager(
            make_checkpoint(model, mirror=mirror), str(best_dir), max_to_keep=1
        )
        self._adapter = None  # a LoRA run's adapters and head, saved beside `best`
        if adapter_dir is not None and adapter_variables(model):
            self._adapter = tf.train.CheckpointManager(
                make_checkpoint(model, adapters_only=True, mirror=mirror),
                str(adapter_dir),
                max_to_keep=1,
            )

    def save_latest(self, state: TrainingState) -> str:
        self._state.assign(state.to_json())
        return self._timed_save(self._latest, state)

    def save_best(self, state: TrainingState) -> str:
        if self._adapter is not None:
            self._timed_save(self._adapter, state)
        return self._timed_save(self._best, state)

    def _timed_save(self, manager: tf.train.CheckpointManager, state: TrainingState) -> str:
        start = time.perf_counter()
        if self._mirror is not None:
            self._mirror.push()
        try:
            path = manager.save(checkpoint_number=state.global_step)
        except (OSError, tf.errors.OpError) as e:
            raise self._save_failed(manager, state, e) from None
        if self._after_save is not None:
            self._after_save()
        self.seconds += time.perf_counter() - start
        return path

    @staticmethod
    def _save_failed(
        manager: tf.train.CheckpointManager, state: TrainingState, error: Exception
    ) -> CheckpointWriteError:
        """The partial save removed, the error in one line with what is kept."""
        try:
            remove_unindexed(manager.directory)
        except OSError:
            pass  # what cannot be removed now is removed when the run resumes
        reason = getattr(error, "strerror", None) or getattr(error, "message", None) or error
        reason = str(reason).splitlines()[0][:200]
        kept = manager.latest_checkpoint
        then = (
            f"the previous checkpoint {Path(kept).name} is kept, and the same command "
            "resumes from it"
            if kept
            else "no earlier checkpoint was saved here"
        )
        return CheckpointWriteError(
            f"cannot save the checkpoint of global step {state.global_step} in "
            f"{manager.directory} ({reason}); its partial files were removed and {then}. Free "
            "space (or choose a writable --output-dir) and rerun."
        )

    def restore_latest(self) -> TrainingState | None:
        """Restores model, optimizer and RNG from `latest`; None when there is none yet."""
        path = self._latest.latest_checkpoint
        if path is None:
            return None
        self._latest.checkpoint.read(path).assert_existing_objects_matched()
        if self._mirror is not None:
            self._mirror.pull()
        return TrainingState.from_json(self._state.numpy().decode("utf-8"))
