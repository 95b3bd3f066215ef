"""Static-shape input pipeline: every batch a compiled step sees has one of a few known shapes.

The way through:
1. `encode_texts` tokenizes every text once, in-graph (tf.data + the tokenizer), keeping ragged
   WordPiece ids and each example's packed length.
2. `plan_batches` assigns each example to the smallest length bucket that holds it and cuts
   each bucket into full global batches; the last batch of a bucket is padded with rows whose
   index is -1 (example weight 0), so nothing is dropped and no batch is short.
3. `BucketedInput` builds one `tf.data` pipeline per bucket whose element shape is fully static
   ([per-replica batch, bucket length]), distributed with `distribute_datasets_from_function`.
   The host walks the plan and draws each step's batch from its bucket's iterator. (Without
   XLA, batches are padded to their longest row instead and one pipeline feeds every bucket.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence

import numpy as np
import tensorflow as tf

from bertfit.errors import BertfitError
from bertfit.model.inputs import GLOBAL_EXAMPLES, INDEX, LABEL, STARTS, WEIGHT
from bertfit.text.packing import pack_inputs, pack_rows

PAD_INDEX = -1


@dataclasses.dataclass
class EncodedTexts:
    """WordPiece ids of every example (no special tokens) and its packed length."""

    ids_a: tf.RaggedTensor
    ids_b: tf.RaggedTensor | None
    packed_lengths: np.ndarray  # special tokens included, before truncation

    def __len__(self) -> int:
        return len(self.packed_lengths)


def _tokenize_all(tokenizer, texts: Sequence[str], chunk: int) -> tf.RaggedTensor:
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(list(texts), tf.string))
    dataset = dataset.batch(chunk).map(tokenizer.tokenize, num_parallel_calls=tf.data.AUTOTUNE)
    pieces = list(dataset)
    if not pieces:
        return tf.ragged.constant([], dtype=tf.int32, ragged_rank=1)
    return tf.concat(pieces, axis=0)


def encode_texts(
    tokenizer, texts: Sequence[str], text_pairs: Sequence[str] | None = None, chunk: int = 2048
) -> EncodedTexts:
    """Tokenizes all texts (and pairs) with the in-graph tokenizer, in chunks, in order.
    The packed lengths count the tokenizer's template: `[CLS] a [SEP] b [SEP]`, or RoBERTa's
    `<s> a </s></s> b </s>` (its `pair_separators`)."""
    ids_a = _tokenize_all(tokenizer, texts, chunk)
    lengths = ids_a.row_lengths().numpy() + 2
    ids_b = None
    if text_pairs is not None:
        ids_b = _tokenize_all(tokenizer, text_pairs, chunk)
        separators = tokenizer.special_ids.get("pair_separators", 1)
        lengths = lengths + ids_b.row_lengths().numpy() + separators
    return EncodedTexts(ids_a, ids_b, lengths.astype(np.int64))


@dataclasses.dataclass(frozen=True)
class Batch:
    """One global batch: its bucket length and the example indices (-1 marks a padding row)."""

    seq_length: int
    indices: np.ndarray

    @property
    def num_examples(self) -> int:
        return int((self.indices != PAD_INDEX).sum())


def bucket_of(packed_lengths: np.ndarray, buckets: Sequence[int]) -> np.ndarray:
    """The index of the smallest bucket that holds each example; longer ones are truncated
    to the largest bucket (= max_seq_length)."""
    return np.minimum(np.searchsorted(np.asarray(buckets), packed_lengths), len(buckets) - 1)


def plan_batches(
    packed_lengths: np.ndarray,
    buckets: Sequence[int],
    global_batch: int,
    *,
    shuffle: bool,
    seed: int = 0,
    epoch: int = 0,
    run_length: int = 1,
) -> list[Batch]:
    """Cuts the examples into full global batches, one bucket per batch.

    Every example appears exactly once. With `shuffle`, the order inside each bucket and the
    order of the batches depend only on (seed, epoch), so every worker computes the same plan.
    `run_length` > 1 keeps each bucket's batches together in runs of that many (the last run
    of a bucket may be shorter) and shuffles the runs, so that one host call can execute a
    whole run from one bucket's iterator (`--steps-per-execution`).
    """
    rng = np.random.default_rng([seed, epoch])
    assignment = bucket_of(packed_lengths, buckets)
    runs = []
    for b, seq_length in enumerate(buckets):
        members = np.flatnonzero(assignment == b)
        if shuffle:
            members = rng.permutation(members)
        padding = (-len(members)) % global_batch
        members = np.concatenate([members, np.full(padding, PAD_INDEX)]).astype(np.int64)
        batches = [
            Batch(int(seq_length), members[start : start + global_batch])
            for start in range(0, len(members), global_batch)
        ]
        runs.extend(batches[i : i + run_length] for i in range(0, len(batches), run_length))
    if shuffle:
        runs = [runs[i] for i in rng.permutation(len(runs))]
    return [batch for run in runs for batch in run]


def runs_of(plan: list[Batch], limit: int, ends: Collection[int] = ()) -> list[tuple[int, int]]:
    """(seq_length, steps) for consecutive same-bucket steps of `plan`, at most `limit` each;
    a run also ends after the steps counted in `ends` (so its caller can act there).

    Examples:
    >>> plan = [Batch(8, np.zeros(2))] * 5
    >>> runs_of(plan, 4), runs_of(plan, 4, ends={2})
    ([(8, 4), (8, 1)], [(8, 2), (8, 3)])
    """
    runs: list[tuple[int, int]] = []
    for taken, batch in enumerate(plan):
        if runs and runs[-1][0] == batch.seq_length and runs[-1][1] < limit and taken not in ends:
            runs[-1] = (batch.seq_length, runs[-1][1] + 1)
        else:
            runs.append((batch.seq_length, 1))
    return runs


class BucketedInput:
    """Per-bucket distributed datasets that follow a batch plan.

    Args:
        encoded: the tokenized examples.
        labels: the targets of the examples (`Task.targets`: int32 [n], float32 [n, labels]
            or float32 [n]), or None (prediction).
        weights: float32 weight of each example in the loss (class weights), or None for 1.
        plan: the global batches, in the order the steps take them.
        strategy: the `tf.distribute` strategy that will consume the batches.
        special_ids: the tokenizer's `special_ids` (its special ids and pair template).
        micro_batches: each plan batch holds this many global micro-batches (gradient
            accumulation); a replica's element holds its rows of every micro-batch, micro-batch
            after micro-batch, and `global_examples` counts the real examples of all of them.
        pad_to_longest: pad each replica's batch to its longest row (at most its bucket's
            length) instead of to the bucket's length: the batches of every bucket then share
            one element spec, [per-replica batch, None], so a step traced without XLA serves
            them all once, with less padding, and one pipeline feeds them all. For
            TensorFlow's kernels only: XLA and TPUs need the static lengths.
        slots: packed batches (`--packing`, `bertfit.data.packed`): the plan's indices are
            [rows, slots], and each row holds its slots' examples one after another
            (`text.packing.pack_rows`); None: one example per row.

    Iterating yields `(seq_length, per-replica batch)` in plan order. A batch is a dict of
    `input_word_ids`, `input_mask`, `input_type_ids` ([per-replica batch, seq_length] int32),
    `label` (the targets' dtype and row shape, zeros on padding rows), `example_weight`
    (float32: 0 on padding rows, else the example's weight), `index` (int64, -1 on padding rows)
    and `global_examples` (float32: real examples in the whole global batch). A packed batch
    adds `input_positions` [rows, seq_length] and `example_starts` [rows, slots], and its
    `label`, `example_weight` and `index` are per slot ([rows, slots, ...]).
    """

    def __init__(
        self,
        encoded: EncodedTexts,
        labels: np.ndarray | None,
        plan: list[Batch],
        strategy: tf.distribute.Strategy,
        *,
        special_ids: dict[str, int],
        micro_batches: int = 1,
        weights: np.ndarray | None = None,
        pad_to_longest: bool = False,
        slots: int | None = None,
    ):
        self.encoded = encoded
        self.pad_to_longest = pad_to_longest and slots is None
        self.slots = slots
        self.micro_batches = micro_batches
        self.labels = np.zeros(len(encoded), np.int32) if labels is None else labels
        self.weights = np.ones(len(encoded), np.float32) if weights is None else weights
        self.plan = plan
        self.strategy = strategy
        self.special_ids = special_ids
        self.replicas = strategy.num_replicas_in_sync
        lengths = sorted({batch.seq_length for batch in plan})
        # Every bucket has the same element spec when padded to its longest row, so one
        # pipeline in plan order serves them all: one trace of its map function, not one per
        # bucket (~0.1 s each).
        self._shared = None
        if self.pad_to_longest and lengths:
            self._shared = strategy.distribute_datasets_from_function(
                lambda context: self._dataset(lengths[-1], context, every_bucket=True)
            )
            self.datasets = dict.fromkeys(lengths, self._shared)
        else:
            self.datasets = {
                seq_length: strategy.distribute_datasets_from_function(
                    lambda context, s=seq_length: self._dataset(s, context)
                )
                for seq_length in lengths
            }

    def __len__(self) -> int:
        return len(self.plan)

    def _rows_for(self, bucket: int | None, context: tf.distribute.InputContext) -> dict:
        """The per-replica index rows this input pipeline feeds for the steps of `bucket`
        (None: of every bucket), in step order."""
        local = self.replicas // context.num_input_pipelines
        first = context.input_pipeline_id * local
        rows, counts = [], []
        for batch in self.plan:
            if bucket is not None and batch.seq_length != bucket:
                continue
            # [micro-batch, replica, row (, slot)] → each replica's rows of every micro-batch,
            # in order.
            slots = batch.indices.shape[1:]
            per_replica = (
                batch.indices.reshape(self.micro_batches, self.replicas, -1, *slots)
                .swapaxes(0, 1)
                .reshape(self.replicas, -1, *slots)
            )
            rows.extend(per_replica[first : first + local])
            counts.extend([batch.num_examples] * local)
        return {INDEX: np.stack(rows), GLOBAL_EXAMPLES: np.asarray(counts, np.float32)}

    def _dataset(
        self, seq_length: int, context: tf.distribute.InputContext, every_bucket: bool = False
    ) -> tf.data.Dataset:
        """The batches of the bucket `seq_length` (`every_bucket`: the batches of all buckets,
        in step order), packed to at most `seq_length` tokens."""
        ids_a, ids_b = self.encoded.ids_a, self.encoded.ids_b
        labels = tf.constant(self.labels)
        weights = tf.constant(self.weights, tf.float32)

        def build(element):
            index = element[INDEX]
            safe = tf.maximum(index, 0)
            examples = tf.reshape(safe, [-1])  # a packed batch's slots, row after row
            pair = None if ids_b is None else tf.gather(ids_b, examples)
            inputs = pack_inputs(
                tf.gather(ids_a, examples),
                pair,
                max_seq_length=seq_length,
                padding="longest" if self.pad_to_longest or self.slots else "max_length",
                **self.special_ids,
            )
            real = index != PAD_INDEX
            per_replica = index.shape[0]
            shape = [per_replica, None if self.pad_to_longest else seq_length]
            shapes = {STARTS: [per_replica, self.slots]}
            if self.slots is not None:
                filled = tf.cast(tf.reshape(real, [-1, 1]), tf.int32)
                inputs["input_mask"] *= filled  # an empty slot packs no token
                pad_id = self.special_ids.get("pad_id", 0)
                inputs = pack_rows(inputs, self.slots, seq_length, pad_id)
            label = tf.gather(labels, safe)
            label_axes = len(label.shape) - len(real.shape)  # a multi-label row's labels
            real_rows = tf.reshape(real, [-1, *real.shape[1:]] + [1] * label_axes)
            return {
                **{k: tf.ensure_shape(v, shapes.get(k, shape)) for k, v in inputs.items()},
                LABEL: tf.where(real_rows, label, tf.zeros_like(label)),
                WEIGHT: tf.where(real, tf.gather(weights, safe), 0.0),
                INDEX: index,
                GLOBAL_EXAMPLES: element[GLOBAL_EXAMPLES],
            }

        # With tf.data's autotuner on, deleting an iterator that has not reached its end (each
        # bucket's, once its planned steps are taken) waits for the autotuner: 2-35 s per bucket
        # after each epoch and evaluation while the model computed on the same CPU (measured).
        # A batch here is a gather and a pad: two in flight are plenty.
        options = tf.data.Options()
        options.autotune.enabled = False
        rows = self._rows_for(None if every_bucket else seq_length, context)
        # No AutoGraph: `build` branches on no tensor, and converting it and the packing
        # functions cost ~1 s of every epoch's and evaluation's start on a 2-core CPU.
        build = tf.autograph.experimental.do_not_convert(build)
        return (
            tf.data.Dataset.from_tensor_slices(rows)
            .map(build, num_parallel_calls=2, deterministic=True)
            .prefetch(2)
            .with_options(options)
        )

    def iterators(self) -> dict:
        """A fresh iterator over each bucket's distributed dataset, by bucket length (the same
        one for every bucket when they share a pipeline)."""
        if self._shared is not None:
            return dict.fromkeys(self.datasets, iter(self._shared))
        return {seq_length: iter(d) for seq_length, d in self.datasets.items()}

    def __iter__(self):
        iterators = self.iterators()
        for batch in self.plan:
            yield batch.seq_length, next(iterators[batch.seq_length])


def scatter_outputs(
    steps: Iterable[tuple[np.ndarray, np.ndarray]], num_examples: int, progress=None
) -> np.ndarray:
    """The outputs of every example in the original order, from each predict step's
    (outputs, example indices: [rows], or a packed batch's [rows, slots] whose slots are the
    outputs' rows in order); padding rows and empty slots (index -1) are dropped. Every
    example must get one."""
    out = None
    seen = 0
    for step, (probabilities, index) in enumerate(steps):
        index = np.asarray(index).reshape(-1)  # a packed batch's [rows, slots]
        if out is None:
            out = np.full((num_examples, probabilities.shape[1]), np.nan, np.float32)
        real = index >= 0
        out[index[real]] = probabilities[real]
        seen += int(real.sum())
        if progress is not None:
            progress.update(step + 1, seen)
    if out is None or np.isnan(out).any():
        raise BertfitError("internal error: some examples got no prediction")
    return out
