"""One shape for the training data of a run, whatever its kind (`TrainingData`).

A run trains on one of three kinds of data, picked once by `training.setup.prepare`:

- `LabelledData`: the rows of a file, tokenized in memory; batches of length buckets chosen
  from the rows' packed lengths (`plan_batches`, `BucketedInput`).
- `LabelledDocuments`: the same with `--long-documents chunk`: each row one document cut into
  windows of max_seq_length, batched in chunk-count buckets (`bertfit.data.windowed`).
- `TrainStream` (`bertfit.data.streaming`): a prepared TFRecord set (`bertfit prepare`, or
  `--streaming`), planned from its manifest and read from its shards while training.

Each kind answers the same questions for the run's `Batching` (the buckets and batch sizes the
run decided once): the lengths its buckets are chosen from, its batch plan, its input (`tf.data`
under a strategy, or with none the same batches made in NumPy on the host), its length profile,
its fingerprint (what a resume compares) and its size. The code that knows a kind lives in its
class; the run's setup calls through the shape and never asks which it is.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING

import numpy as np

from bertfit.config import RunConfig
from bertfit.data.buckets import ResolvedBuckets, resolve_buckets
from bertfit.data.host_input import HostInput, HostWindowedInput
from bertfit.data.packed import PackedShape, padding_share, plan_packed
from bertfit.data.pipeline import Batch, BucketedInput, EncodedTexts, plan_batches
from bertfit.data.profile import LengthProfile
from bertfit.data.sources import Example
from bertfit.data.windowed import (
    WindowedDocuments,
    WindowedInput,
    WindowProfile,
    chunk_buckets,
    chunk_suggestion,
    plan_documents,
)
from bertfit.errors import BertfitError, ConfigError

if TYPE_CHECKING:
    import tensorflow as tf

# With --long-documents truncate, more than this share of training rows losing tokens prints
# one line suggesting --long-documents chunk (with the measured share).
CHUNK_SUGGESTION_SHARE = 0.1


@dataclasses.dataclass(frozen=True)
class Batching:
    """How a run cuts data into steps, decided once (`training.setup.assemble`): every kind of
    data plans and feeds its batches from it.

    Args:
        buckets: the run's length buckets (the last is max_seq_length).
        batch_size: rows of a global micro-batch (one replica's when `check` plans what a
            single replica is fed).
        micro_batches: micro-batches per step (`--grad-accum` when training, else 1).
        run_length: steps of one bucket kept together (`--steps-per-execution` when training).
        seed: what the shuffles depend on, with the epoch.
        pipelines: input pipelines the rows are split among (one per worker or TPU host).
        pad_to_longest: pad each batch to its longest row (a step not XLA-compiled), not to
            its bucket's length.
        weighted: the examples' loss weights apply (training); evaluation weighs each 1.
        packing: the packed batches' shape (`--packing`, `bertfit.data.packed`), whose rows
            replace `batch_size` examples; None: one example per row, in length buckets.
    """

    buckets: tuple[int, ...]
    batch_size: int
    micro_batches: int = 1
    run_length: int = 1
    seed: int = 0
    pipelines: int = 1
    pad_to_longest: bool = False
    weighted: bool = False
    packing: PackedShape | None = None

    @classmethod
    def of(
        cls,
        config: RunConfig,
        buckets: tuple[int, ...],
        *,
        training: bool,
        pipelines: int = 1,
        batch_size: int | None = None,
        pad_to_longest: bool = False,
        packing: PackedShape | None = None,
    ) -> Batching:
        """The batching of a run's training (grad_accum micro-batches per step, in runs of
        steps_per_execution) or evaluation (one batch per step). `batch_size` (default
        `--batch-size`, the global batch) is one replica's batch, fed by one pipeline (and
        one replica's share of a packed batch's rows)."""
        t = config.train
        if packing is not None and batch_size:
            packing = dataclasses.replace(packing, rows=packing.rows * batch_size // t.batch_size)
        return cls(
            buckets=tuple(buckets),
            batch_size=batch_size or t.batch_size,
            micro_batches=t.grad_accum if training else 1,
            run_length=t.steps_per_execution if training else 1,
            seed=t.seed,
            pipelines=1 if batch_size else pipelines,
            pad_to_longest=pad_to_longest and packing is None,
            weighted=training,
            packing=packing,
        )

    @property
    def rows_per_step(self) -> int:
        """Rows of one step: every micro-batch's."""
        rows = self.batch_size if self.packing is None else self.packing.rows
        return rows * self.micro_batches


class TrainingData(abc.ABC):
    """The training (or evaluation) data of a run, of any kind (see the module docstring).

    Attributes:
        path: the file or prepared set it was read from, as the user named it.
        labels: the targets in memory (`Task.targets`), or None (a streamed set; a sample read
            without a task).
        weights: each example's weight in the loss (`--class-weights`), or None for 1.
    """

    path: str
    labels: np.ndarray | None
    weights: np.ndarray | None

    @abc.abstractmethod
    def __len__(self) -> int:
        """The examples (rows, or documents) an epoch trains on."""

    @abc.abstractmethod
    def fingerprint(self) -> str:
        """A digest of the data: a resumed run refuses data whose digest changed."""

    @abc.abstractmethod
    def lengths(self) -> np.ndarray:
        """Packed lengths ([CLS]/[SEP] included) the length buckets are chosen from."""

    def resolve_buckets(
        self,
        config: RunConfig,
        *,
        rows_read: int,
        trace_tokens: int,
        saved: tuple[int, ...] | None = None,
    ) -> ResolvedBuckets:
        """The run's length buckets (`data.buckets.resolve_buckets`) for these lengths.
        `rows_read`: the rows they stand for (a sample's file, a streamed set's histogram)."""
        t, lengths = config.train, self.lengths()
        return resolve_buckets(
            config.data.buckets,
            config.model.max_seq_length,
            lengths,
            batch_size=t.batch_size * t.grad_accum,
            epochs=t.epochs * rows_read / max(len(lengths), 1),
            trace_tokens=trace_tokens,
            saved=saved,
        )

    def notes(self, config: RunConfig, batching: Batching) -> list[str]:
        """What the user should read about this data before training (printed and logged)."""
        return []

    def packed_shape(self, config: RunConfig, replicas: int) -> PackedShape:
        """The packed batches' shape for these lengths (`--packing`), its rows a multiple of
        `replicas`: only rows held in memory are packed (`LabelledData`)."""
        raise ConfigError(
            f"--packing plans its rows in memory; --train {self.path} is streamed from a "
            "prepared set's shards. Train on the data file, or leave --packing out."
        )

    @abc.abstractmethod
    def plan(self, batching: Batching, *, shuffle: bool, epoch: int = 0) -> list:
        """The epoch's steps in order: `Batch`es (a bucket key, the examples' indices) or, for
        a stream, `StreamStep`s (a bucket length, the step's real examples)."""

    @abc.abstractmethod
    def input(
        self,
        batching: Batching,
        strategy: tf.distribute.Strategy | None,
        *,
        special_ids: dict[str, int],
        shuffle: bool,
        epoch: int = 0,
        start: int = 0,
    ):
        """The input of the plan's steps from `start` on (a resumed epoch skips the steps
        taken): `plan`, `len` and `iterators()` by bucket key. Under a `tf.distribute`
        `strategy`, its distributed tf.data pipelines (with their `datasets`); with None, the
        same whole global batches as NumPy arrays, for a backend that reads NumPy (JAX; a
        process of several makes its share of their rows: `HostInput.iterators`)."""

    @abc.abstractmethod
    def profile(self, batching: Batching) -> LengthProfile:
        """The lengths against the buckets (the report, TensorBoard)."""

    def window_profile(self) -> WindowProfile | None:
        """The documents' lengths against the window; None unless documents are windowed."""
        return None

    def row_shape(self, bucket: int) -> tuple[int, ...]:
        """The shape of one example in a batch of `bucket` (its length): what the encoder runs
        on per example (`check`'s memory estimate, `doctor`'s FLOPs)."""
        return (bucket,)

    def read_error(self, error: Exception) -> BertfitError | None:
        """The error to raise for an `error` raised mid-epoch that is a `tf.data` read that
        failed (a damaged shard), or None: any other error, and data held in memory, which
        has no files to blame, are raised as they are."""
        return None


def data_fingerprint(examples: list[Example]) -> str:
    """A digest of the rows (texts, pairs, labels, order)."""
    digest = hashlib.sha256()
    for e in examples:
        digest.update(json.dumps([e.text, e.text_pair, e.label]).encode("utf-8"))
    return digest.hexdigest()


@dataclasses.dataclass
class LabelledData(TrainingData):
    """Examples read from one file (or glob), tokenized in memory, with their targets
    (`Task.targets`) and the weight of each in the loss."""

    path: str
    examples: list[Example]
    labels: np.ndarray | None
    encoded: EncodedTexts
    weights: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.examples)

    def fingerprint(self) -> str:
        return data_fingerprint(self.examples)

    def lengths(self) -> np.ndarray:
        return self.encoded.packed_lengths

    def notes(self, config: RunConfig, batching: Batching) -> list[str]:
        """With `--packing`, its shape and padding; the one-line suggestion of
        `--long-documents chunk` when more than `CHUNK_SUGGESTION_SHARE` of the rows lose
        tokens (single texts only)."""
        notes = []
        if batching.packing is not None:
            plan = self.plan(batching, shuffle=False)
            share = padding_share(self.lengths(), batching.packing, plan)
            notes.append(
                f"packing: {batching.packing.describe()}; {share:.1%} of token slots are "
                f"padding ({len(plan)} steps an epoch)"
            )
        if self.encoded.ids_b is None:
            limit = config.model.max_seq_length
            notes.append(chunk_suggestion(self.lengths(), limit, CHUNK_SUGGESTION_SHARE))
        return [note for note in notes if note is not None]

    def plan(self, batching: Batching, *, shuffle: bool, epoch: int = 0) -> list[Batch]:
        """Length buckets' batches, or with `--packing` packed rows'."""
        order = {"shuffle": shuffle, "seed": batching.seed, "epoch": epoch}
        lengths, rows = self.lengths(), batching.rows_per_step
        if batching.packing is not None:
            return plan_packed(lengths, batching.packing, rows, **order)
        runs = batching.run_length
        return plan_batches(lengths, batching.buckets, rows, run_length=runs, **order)

    def input(
        self,
        batching: Batching,
        strategy: tf.distribute.Strategy | None,
        *,
        special_ids: dict[str, int],
        shuffle: bool,
        epoch: int = 0,
        start: int = 0,
    ) -> BucketedInput | HostInput:
        """tf.data's `BucketedInput`, or with no strategy `HostInput`: made in NumPy on the
        host, without TensorFlow."""
        plan = self.plan(batching, shuffle=shuffle, epoch=epoch)[start:]
        weights = self.weights if batching.weighted else None
        slots = None if batching.packing is None else batching.packing.slots
        if strategy is None:
            return HostInput(
                self.encoded,
                self.labels,
                plan,
                special_ids=special_ids,
                weights=weights,
                slots=slots,
            )
        return BucketedInput(
            self.encoded,
            self.labels,
            plan,
            strategy,
            special_ids=special_ids,
            micro_batches=batching.micro_batches,
            weights=weights,
            pad_to_longest=batching.pad_to_longest,
            slots=slots,
        )

    def profile(self, batching: Batching) -> LengthProfile:
        """The lengths against the buckets, or against the packed rows' one length."""
        plan = self.plan(batching, shuffle=False)
        packing = batching.packing
        buckets = list(batching.buckets) if packing is None else [packing.length]
        return LengthProfile.of(self.lengths(), buckets, plan)

    def packed_shape(self, config: RunConfig, replicas: int) -> PackedShape:
        return PackedShape.choose(
            self.lengths(),
            config.model.max_seq_length,
            batch_size=config.train.batch_size,
            replicas=replicas,
        )


@dataclasses.dataclass
class LabelledDocuments(LabelledData):
    """`LabelledData` with `--long-documents chunk`: `documents` holds the same ids cut into
    windows (each example one document, fed as `[batch, K, max_seq_length]`). Every window is
    max_seq_length long (the one length bucket, saved with the run), and documents go into
    chunk-count buckets (`chunk_buckets`: 1, 2, 4, ... max_chunks windows)."""

    documents: WindowedDocuments = dataclasses.field(kw_only=True)

    @property
    def chunks(self) -> tuple[int, ...]:
        """The chunk counts K of the `[batch, K, max_seq_length]` batches."""
        return chunk_buckets(self.documents.spec.max_chunks)

    def resolve_buckets(
        self,
        config: RunConfig,
        *,
        rows_read: int,
        trace_tokens: int,
        saved: tuple[int, ...] | None = None,
    ) -> ResolvedBuckets:
        """One length, the window's: the buckets are chunk counts (`chunks`)."""
        return ResolvedBuckets((config.model.max_seq_length,))

    def notes(self, config: RunConfig, batching: Batching) -> list[str]:
        return [f"long documents in windows: {self.window_profile().line()}"]

    def plan(self, batching: Batching, *, shuffle: bool, epoch: int = 0) -> list[Batch]:
        """Documents by their windows, in chunk-count buckets (`Batch.seq_length` is K)."""
        return plan_documents(
            self.documents,
            batching.rows_per_step,
            shuffle=shuffle,
            seed=batching.seed,
            epoch=epoch,
            buckets=self.chunks,
            run_length=batching.run_length,
        )

    def input(
        self,
        batching: Batching,
        strategy: tf.distribute.Strategy | None,
        *,
        special_ids: dict[str, int],
        shuffle: bool,
        epoch: int = 0,
        start: int = 0,
    ) -> WindowedInput | HostWindowedInput:
        """Static `[batch, K, max_seq_length]` batches, with or without XLA (in NumPy on the
        host with no strategy)."""
        plan = self.plan(batching, shuffle=shuffle, epoch=epoch)[start:]
        weights = self.weights if batching.weighted else None
        if strategy is None:
            return HostWindowedInput(
                self.documents, self.labels, plan, special_ids=special_ids, weights=weights
            )
        return WindowedInput(
            self.documents,
            self.labels,
            plan,
            strategy,
            special_ids=special_ids,
            micro_batches=batching.micro_batches,
            weights=weights,
        )

    def profile(self, batching: Batching) -> LengthProfile:
        """The kept windows against the chunk-count buckets (a bucket's "tokens" are then
        windows, its padding the padding windows)."""
        plan = self.plan(batching, shuffle=False)
        return LengthProfile.of(self.documents.kept_windows, list(self.chunks), plan)

    def window_profile(self) -> WindowProfile:
        return WindowProfile.of(self.documents)

    def row_shape(self, bucket: int) -> tuple[int, ...]:
        """K windows of max_seq_length: the encoder runs on batch·K windows."""
        return (bucket, self.documents.spec.max_seq_length)
