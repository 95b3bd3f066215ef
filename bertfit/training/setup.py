"""What a run sets up before its first step, written once for `train`, `check`, `evaluate` and
`predict`: the files read as the run reads them (a `--train` glob included), the task, the
checkpoint and its tokenizer, the tokenized data, the bucket plan, the classifier at the run's
precision and the `Trainer` whose `replica_step` is the function the run compiles.

`bertfit check` builds the same objects from the same functions, so it compiles exactly what
`bertfit train` will (the accumulated step under `--grad-accum`, the encoder's dtype policy from
`--precision`, never a global Keras policy).
"""

from __future__ import annotations

import dataclasses
import glob
from typing import TYPE_CHECKING

import keras
import numpy as np
import tensorflow as tf

from bertfit.checkpoints.base import Checkpoint
from bertfit.checkpoints.load import build_encoder, build_tokenizer, read_checkpoint
from bertfit.checkpoints.registry import resolve
from bertfit.config import PRECISION_POLICIES, RunConfig, check_positions
from bertfit.data.buckets import choose_buckets, padding_share
from bertfit.data.pipeline import (
    Batch,
    BucketedInput,
    EncodedTexts,
    buckets_for,
    default_buckets,
    encode_texts,
    plan_batches,
)
from bertfit.data.sources import Example, SourceSpec, read_examples
from bertfit.data.tasks import Task, infer_task
from bertfit.errors import DataError
from bertfit.model.classifier import BertClassifier
from bertfit.text.tokenizer import BertTokenizer
from bertfit.training.loop import Trainer

if TYPE_CHECKING:
    from bertfit.inference.predictor import Classifier


@dataclasses.dataclass
class LabelledData:
    """Examples read from one file, tokenized, with their targets (`Task.targets`) and the
    weight of each in the loss."""

    path: str
    examples: list[Example]
    labels: np.ndarray | None
    encoded: EncodedTexts
    weights: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.examples)


# ---- reading ----


def source_spec(config: RunConfig) -> SourceSpec:
    """How a run reads its files: `--format` and the column flags."""
    d = config.data
    return SourceSpec(
        format=d.format,
        text_column=d.text_column,
        text_pair_column=d.text_pair_column,
        label_column=d.label_column,
        empty_labels=True,  # the task decides: the empty set in multi-label data, else an error
    )


def classifier_source_spec(classifier: Classifier) -> SourceSpec:
    """How to read files for a trained classifier: the columns its training files used."""
    columns = classifier.metadata.get("columns", {})
    return SourceSpec(
        text_column=columns.get("text", "text"),
        text_pair_column=columns.get("text_pair"),
        label_column=columns.get("label", "label"),
        empty_labels=True,
    )


def read_training_examples(pattern: str, config: RunConfig) -> list[Example]:
    """The rows of one file, or of every file a glob matches (sorted by name, concatenated).

    Every worker reads all of them: the batch plan is global and each worker's input pipeline
    takes its replicas' rows of every global batch (see data/pipeline.py), which uses each
    example exactly once per epoch and keeps every worker at the same step count.
    """
    if not glob.has_magic(pattern):
        return read_examples(pattern, source_spec(config))
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise DataError(
            f"--train {pattern!r} matches no file; check the pattern (quote it so "
            "the shell does not expand it) and the working directory.",
            code="data-file-not-found",
        )
    return [e for path in paths for e in read_examples(path, source_spec(config))]


def infer_run_task(examples: list[Example], config: RunConfig) -> tuple[Task, list[str]]:
    """The task of the training rows (`--task`, or inferred) and notes for the user."""
    return infer_task(
        examples, config.data.train, kind=config.model.task, separator=config.data.label_separator
    )


def read_labelled(
    path: str, config: RunConfig, tokenizer, task: Task | None, labels_required: bool = True
) -> LabelledData:
    examples = read_examples(path, source_spec(config), labels_required=labels_required)
    return encode_labelled(path, examples, config, tokenizer, task)


def encode_labelled(
    path: str, examples: list[Example], config: RunConfig, tokenizer, task: Task | None
) -> LabelledData:
    """Tokenizes the examples (and their pairs); their targets when a task is given."""
    labels = None if task is None else task.targets(examples, path)
    pairs = None
    if config.data.text_pair_column:
        pairs = [e.text_pair for e in examples]
    encoded = encode_texts(tokenizer, [e.text for e in examples], pairs)
    return LabelledData(path, examples, labels, encoded)


# ---- the checkpoint ----


def load_checkpoint(config: RunConfig) -> Checkpoint:
    """The checkpoint `--model` names; its position table must hold `--max-seq-length`."""
    checkpoint = read_checkpoint(resolve(config.model.name))
    if checkpoint.config is not None:
        check_positions(
            config.model.max_seq_length,
            checkpoint.config.max_sequence_length,
            config.model.name,
        )
    return checkpoint


def run_tokenizer(checkpoint: Checkpoint, config: RunConfig) -> BertTokenizer:
    """The checkpoint's tokenizer, with `--lower-case` when given."""
    return build_tokenizer(checkpoint, lower_case=config.model.lower_case)


# ---- batches ----


def with_chosen_buckets(
    config: RunConfig,
    data: LabelledData,
    saved: list[int] | None = None,
    rows: int | None = None,
    traced_per_bucket: bool = True,
) -> tuple[RunConfig, str]:
    """The config with the length buckets chosen from the training lengths (`saved`: the
    buckets a resumed run chose), and a sentence saying what they cost in padding. `rows`:
    how many training rows `data` stands for when it is a sample (`bertfit check`).
    `traced_per_bucket`: False when one trace serves every bucket (no XLA: batches padded to
    their longest row), so buckets cost no trace."""
    lengths = data.encoded.packed_lengths
    scale = (rows or len(lengths)) / max(len(lengths), 1)
    if saved is not None:
        buckets = saved
    else:
        buckets = choose_buckets(
            lengths,
            config.model.max_seq_length,
            batch_size=config.train.batch_size * config.train.grad_accum,
            epochs=config.train.epochs * scale,
            traced_per_bucket=traced_per_bucket,
        )
    chosen = dataclasses.replace(config, data=dataclasses.replace(config.data, buckets=buckets))
    buckets, fixed = buckets_for(chosen), default_buckets(config.model.max_seq_length)
    return chosen, (
        f"length buckets {', '.join(map(str, buckets))} chosen from the training lengths: "
        f"{padding_share(lengths, buckets):.0%} of token slots are padding "
        f"({padding_share(lengths, fixed):.0%} with {', '.join(map(str, fixed))}); "
        "--buckets sets them"
    )


def plan_for(
    data: LabelledData,
    config: RunConfig,
    *,
    shuffle: bool,
    epoch: int = 0,
    training: bool = False,
    batch_size: int | None = None,
) -> list[Batch]:
    """The run's batch plan of `data`. Training plans hold grad_accum micro-batches per step,
    in runs of steps_per_execution. `batch_size` (default `--batch-size`, the global batch) is
    one replica's batch when `check` plans what a single replica is fed."""
    micro = config.train.grad_accum if training else 1
    return plan_batches(
        data.encoded.packed_lengths,
        buckets_for(config),
        (batch_size or config.train.batch_size) * micro,
        shuffle=shuffle,
        seed=config.train.seed,
        epoch=epoch,
        run_length=config.train.steps_per_execution if training else 1,
    )


def bucketed(
    data: LabelledData,
    trainer: Trainer,
    tokenizer,
    config: RunConfig,
    *,
    shuffle: bool,
    epoch: int = 0,
    training: bool = False,
    start: int = 0,
    batch_size: int | None = None,
    static_shapes: bool = False,
) -> BucketedInput:
    """The input of the plan's steps from `start` on (a resumed epoch skips the steps taken).
    Batches are padded to their longest row when the trainer's replica step is not
    XLA-compiled (and `static_shapes` does not ask for the bucket lengths), else to their
    bucket's length."""
    plan = plan_for(
        data, config, shuffle=shuffle, epoch=epoch, training=training, batch_size=batch_size
    )
    return BucketedInput(
        data.encoded,
        data.labels,
        plan[start:],
        trainer.strategy,
        special_ids=tokenizer.special_ids,
        micro_batches=config.train.grad_accum if training else 1,
        weights=data.weights if training else None,
        pad_to_longest=not (trainer.xla.replica_step or static_shapes),
    )


# ---- the model and its trainer ----


def build_classifier(encoder: keras.Layer, task: Task, config: RunConfig) -> BertClassifier:
    """The classifier a run puts on `encoder`: one output per label (or the value), with the
    run's pooling, dropout and seed."""
    return BertClassifier(
        encoder,
        task.num_outputs,
        config.model.pooling,
        config.model.dropout,
        seed=config.train.seed,
    )


def make_trainer(
    checkpoint: Checkpoint,
    task: Task,
    config: RunConfig,
    strategy: tf.distribute.Strategy,
    total_steps: int,
) -> Trainer:
    """The run's `Trainer`: the classifier built in the strategy's scope with the encoder's dtype
    policy from `--precision` (no global Keras policy is set), the unused pooler left out of
    training with `--pooling mean`, dynamic loss scaling with `mixed_fp16`. The model takes over
    the checkpoint's weights: its arrays are released (a run would hold MiniLM's 87 MiB twice)."""

    def build_model() -> BertClassifier:
        encoder = build_encoder(checkpoint, dtype=PRECISION_POLICIES[config.model.precision])
        return build_classifier(encoder, task, config)

    trainer = Trainer(
        build_model,
        strategy,
        config.train,
        total_steps,
        frozen=("pooler",) if config.model.pooling == "mean" else (),
        loss_scale=config.model.precision == "mixed_fp16",
        task_kind=task.kind,
    )
    checkpoint.tensors.clear()
    return trainer
