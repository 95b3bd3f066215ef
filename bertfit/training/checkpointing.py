"""A training run's checkpoints: saving them, and what a resume reads back.

The variables are keyed by explicit names (`bertfit.runs.weights`, which inference reads
too). A resumable checkpoint (`checkpoints/latest`) holds the model, the optimizer (slots, step,
loss scale), the RNG states and a JSON `TrainingState` (epoch, position in the epoch's batch
plan, history), all in one file, so they can never disagree. The best checkpoint holds the
model weights inference needs (and a LoRA run's `checkpoints/adapter` its adapters and head).
The files are safetensors (`bertfit.runs.checkpoint_files`: atomic, one per folder), written
and read through Keras on either backend, without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from bertfit.atomic import write_text_atomic
from bertfit.errors import BertfitError
from bertfit.model.lora import adapted_layers, lora_parameters
from bertfit.runs.checkpoint_files import latest_checkpoint, save_checkpoint
from bertfit.runs.records import EarlyStop, EpochRecord, StepEvaluation
from bertfit.runs.weights import (
    adapter_variables,
    checkpoint_variables,
    restore_variables,
    variable_values,
)

ADAPTER_CONFIG = "adapter_config.json"


class CheckpointWriteError(BertfitError):
    """A checkpoint could not be written (a full disk, a quota, a read-only file system): its
    partial files are removed and the previous checkpoint stays the one a resume uses."""


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
        adapter_dir: where a LoRA run's adapters and head are saved beside `best`.
    """

    def __init__(self, model, optimizer, latest_dir, best_dir, after_save=None, adapter_dir=None):
        self.seconds = 0.0  # spent writing checkpoints (and uploading them)
        self._saved_at = time.perf_counter()  # the run's start counts as its first save
        self._after_save = after_save
        self._latest = Path(latest_dir), checkpoint_variables(model, optimizer)
        self._best = Path(best_dir), checkpoint_variables(model)
        self._adapter = None
        if adapter_dir is not None and adapter_variables(model):
            self._adapter = Path(adapter_dir), checkpoint_variables(model, adapters_only=True)

    def save_latest(self, state: TrainingState) -> str:
        return self._timed_save(*self._latest, state)

    def save_best(self, state: TrainingState) -> str:
        if self._adapter is not None:
            self._timed_save(*self._adapter, state)
        return self._timed_save(*self._best, state)

    def _timed_save(self, directory: Path, variables: dict, state: TrainingState) -> str:
        start = time.perf_counter()
        try:
            path = save_checkpoint(
                directory, state.global_step, variable_values(variables), state.to_json()
            )
        except OSError as e:
            raise self._save_failed(directory, state, e) from None
        if self._after_save is not None:
            self._after_save()
        self._saved_at = time.perf_counter()
        self.seconds += self._saved_at - start
        return path

    def seconds_since_save(self) -> float:
        return time.perf_counter() - self._saved_at

    @staticmethod
    def _save_failed(directory: Path, state: TrainingState, error: OSError) -> CheckpointWriteError:
        """The error in one line, with what is kept (`save_checkpoint` removed its partial
        file)."""
        reason = str(error.strerror or error).splitlines()[0][:200]
        kept = latest_checkpoint(directory)
        then = (
            f"the previous checkpoint {Path(kept).name} is kept, and the same command "
            "resumes from it"
            if kept
            else "no earlier checkpoint was saved here"
        )
        return CheckpointWriteError(
            f"cannot save the checkpoint of global step {state.global_step} in {directory} "
            f"({reason}); its partial file was removed and {then}. Free space (or choose a "
            "writable --output-dir) and rerun."
        )

    def restore_latest(self) -> TrainingState | None:
        """Restores model, optimizer and RNG from `latest`; None when there is none yet."""
        directory, variables = self._latest
        path = latest_checkpoint(directory)
        if path is None:
            return None
        return TrainingState.from_json(restore_variables(variables, path))
