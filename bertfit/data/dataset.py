"""`make_dataset`: bertfit's static-shape input pipeline for your own training loop.

    data = bertfit.make_dataset("tags.jsonl", tokenizer, task="multi-label",
                                max_seq_length=64, batch_size=32, strategy=strategy)
    for batch in data.epoch(0):                       # distributed, one bucket shape per step
        loss = strategy.run(step, args=(batch,))      # model(batch); bertfit.losses.batch_loss

Every example is used exactly once per epoch; the last batch of each length bucket is padded
with rows of `example_weight` 0, so every batch has the full global size and one of a few
static shapes (one per bucket), as TPUs need.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from bertfit.config import per_replica_batch
from bertfit.data.buckets import bucket_lengths, default_buckets
from bertfit.data.pipeline import BucketedInput, encode_texts, plan_batches
from bertfit.data.sources import Example, SourceSpec, read_examples
from bertfit.data.tasks import Task, infer_task


@dataclasses.dataclass
class TaskDataset:
    """Tokenized examples with their task and targets, cut into static-shape batches per epoch.

    Args:
        task: what the labels mean (`Task`): `task.num_outputs` is the model's output size.
        examples: the rows read.
        targets: `task.targets(examples)`.
        encoded: the tokenized texts.
        buckets, batch_size, strategy, seed, shuffle, special_ids: how batches are made.
    """

    task: Task
    examples: list[Example]
    targets: np.ndarray
    encoded: object
    buckets: list[int]
    batch_size: int
    strategy: tf.distribute.Strategy
    seed: int
    shuffle: bool
    special_ids: dict

    def epoch(self, epoch: int = 0) -> BucketedInput:
        """The batches of one epoch (an order that depends only on seed and epoch); iterating
        it yields each step's distributed batch."""
        plan = plan_batches(
            self.encoded.packed_lengths,
            self.buckets,
            self.batch_size,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=epoch,
        )
        return _Batches(
            self.encoded, self.targets, plan, self.strategy, special_ids=self.special_ids
        )

    def __iter__(self):
        return iter(self.epoch(0))

    def __len__(self) -> int:
        """Steps per epoch."""
        return len(
            plan_batches(self.encoded.packed_lengths, self.buckets, self.batch_size, shuffle=False)
        )


class _Batches(BucketedInput):
    """A `BucketedInput` whose iteration yields the batches alone (no bucket length)."""

    def __iter__(self):
        for _, batch in super().__iter__():
            yield batch


def make_dataset(
    data: str | os.PathLike | Sequence,
    tokenizer,
    *,
    task: str | Task | None = None,
    max_seq_length: int = 128,
    batch_size: int = 32,
    strategy: tf.distribute.Strategy | None = None,
    shuffle: bool = False,
    seed: int = 0,
    buckets: Sequence[int] | None = None,
    columns: SourceSpec | None = None,
    label_separator: str | None = None,
) -> TaskDataset:
    """The static-shape, distributed dataset of a labelled file or of rows.

    Args:
        data: a data file (CSV, TSV, JSONL, Parquet), or rows `(text, label)` /
            `(text, text_pair, label)`; a label may be a list (multi-label) or a number.
        tokenizer: a `BertTokenizer` (from `bertfit.load_encoder`).
        task: "single-label", "multi-label", "regression", a `Task` (e.g. the training data's,
            for evaluation data), or None to infer it from the labels.
        max_seq_length: the longest packed input; longer texts are truncated.
        batch_size: the global batch; it must divide by the strategy's replicas.
        strategy: the `tf.distribute` strategy that will run the steps (default: the current).
        shuffle, seed: shuffle within buckets and the order of batches per (seed, epoch).
        buckets: sequence lengths batches are padded to (default max/4, max/2, max).
        columns: the file's column names (`SourceSpec`; default text and label).
        label_separator: splits text labels into multi-label sets.
    """
    strategy = strategy or tf.distribute.get_strategy()
    per_replica_batch(batch_size, strategy.num_replicas_in_sync)  # raises with the fix
    name, examples = _examples(data, columns or SourceSpec())
    if not isinstance(task, Task):
        task, _ = infer_task(examples, name, kind=task, separator=label_separator)
    targets = task.targets(examples, name)
    pairs = (
        [e.text_pair for e in examples] if examples and examples[0].text_pair is not None else None
    )
    encoded = encode_texts(tokenizer, [e.text for e in examples], pairs)
    buckets = list(bucket_lengths(buckets or default_buckets(max_seq_length), max_seq_length))
    special = tokenizer.special_ids
    return TaskDataset(
        task, examples, targets, encoded, buckets, batch_size, strategy, seed, shuffle, special
    )


def _examples(data, columns: SourceSpec) -> tuple[str, list[Example]]:
    if isinstance(data, (str, os.PathLike)):
        return os.fspath(data), read_examples(data, columns)
    rows = []
    for i, row in enumerate(data, start=1):
        text, pair, label = (row[0], None, row[1]) if len(row) == 2 else row
        label = tuple(map(str, label)) if isinstance(label, (list, tuple)) else str(label)
        rows.append(Example(text, pair, label, i))
    return "rows", rows
