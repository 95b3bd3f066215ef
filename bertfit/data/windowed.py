"""Batches of whole documents cut into windows, with static shapes: `[batch, K, seq]` (issue 35).

The way through, like the length buckets of `bertfit.data.pipeline`:
1. `encode_documents` tokenizes every text once and counts the windows each one needs
   (`bertfit.text.windows.WindowSpec`).
2. `plan_documents` puts each document in the smallest chunk-count bucket K that holds its
   windows (`chunk_buckets`: 1, 2, 4, ... up to `max_chunks`; longer documents keep their
   first `max_chunks` windows) and cuts each bucket into full global batches, padded with
   documents of index -1. Every document is in exactly one batch, once, never once per window.
3. `WindowedInput` feeds each bucket's batches from its own pipeline with the fully static
   element shape `[per-replica batch, K, max_seq_length]`: one row per document, so the loss
   and the metrics count documents. A padding document has weight 0 and no real window
   (`window_mask` 0), so none of its windows reaches the pooled document vector either.

In a windowed plan, `Batch.seq_length` holds the bucket's chunk count K (the bucket key the
plan and the input pipeline share); every window has `max_seq_length` tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from bertfit.data.pipeline import (
    PAD_INDEX,
    Batch,
    BucketedInput,
    EncodedTexts,
    encode_texts,
    plan_batches,
)
from bertfit.model.inputs import GLOBAL_EXAMPLES, INDEX, LABEL, WEIGHT
from bertfit.text.windows import WINDOW_MASK, WindowSpec, window_ids

MODEL_KEYS = ("input_word_ids", "input_mask", "input_type_ids", WINDOW_MASK)


@dataclasses.dataclass
class WindowedDocuments:
    """Token ids of every document (no special tokens) and the windows each one needs."""

    ids: tf.RaggedTensor
    windows: np.ndarray  # before the max_chunks cut
    spec: WindowSpec

    def __len__(self) -> int:
        return len(self.windows)

    @property
    def kept_windows(self) -> np.ndarray:
        return np.minimum(self.windows, self.spec.max_chunks)

    @property
    def dropped_tokens(self) -> np.ndarray:
        """Ids of each document after its last kept window."""
        lengths = self.ids.row_lengths().numpy()
        covered = (self.kept_windows - 1) * self.spec.step + self.spec.content
        return np.maximum(lengths - covered, 0)


def encode_documents(tokenizer, texts: Sequence[str], spec: WindowSpec) -> WindowedDocuments:
    """Tokenizes every text once (in-graph, in order) and counts its windows."""
    ids = encode_texts(tokenizer, texts).ids_a
    return WindowedDocuments(ids, spec.windows_needed(ids.row_lengths().numpy()), spec)


@dataclasses.dataclass(frozen=True)
class WindowProfile:
    """Documents' token lengths against the window: what the report shows for `chunk`.

    Args:
        documents: how many documents.
        max_seq_length, max_chunks: the window and the cap they were cut with.
        median_tokens, max_tokens: documents' ids (no special tokens).
        windows: kept windows per document -> documents.
        cut_documents: documents that needed more than `max_chunks` windows.
        dropped_share: the share of all ids dropped after the last kept window.
        stride: ids two consecutive windows share.
        token_counts: documents' ids -> documents (the report's histogram).

    Examples:
    >>> ids = tf.ragged.constant([[1] * 3, [1] * 9, [1] * 40])
    >>> spec = WindowSpec(max_seq_length=6, stride=0, max_chunks=3)  # 4 ids a window
    >>> needed = spec.windows_needed(np.array([3, 9, 40]))
    >>> profile = WindowProfile.of(WindowedDocuments(ids, needed, spec))
    >>> profile.windows, profile.cut_documents, round(profile.dropped_share, 3)
    ({1: 1, 3: 2}, 1, 0.538)
    >>> profile.line()
    '3 documents of 9 ids (median; longest 40) in windows of 6: 1 to 3 windows; 1 cut at 3 windows, 53.8% of the ids dropped'
    """  # noqa: E501

    documents: int
    max_seq_length: int
    max_chunks: int
    median_tokens: float
    max_tokens: int
    windows: dict[int, int]
    cut_documents: int
    dropped_share: float
    stride: int = 0
    token_counts: dict[int, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, documents: WindowedDocuments) -> WindowProfile:
        lengths = documents.ids.row_lengths().numpy()
        kept, counts = np.unique(documents.kept_windows, return_counts=True)
        values, documents_of = np.unique(lengths, return_counts=True)
        spec = documents.spec
        return cls(
            documents=len(documents),
            max_seq_length=spec.max_seq_length,
            max_chunks=spec.max_chunks,
            median_tokens=float(np.median(lengths)) if len(lengths) else 0.0,
            max_tokens=int(lengths.max(initial=0)),
            windows=dict(zip(map(int, kept), map(int, counts), strict=True)),
            cut_documents=int((documents.windows > spec.max_chunks).sum()),
            dropped_share=float(documents.dropped_tokens.sum() / max(lengths.sum(), 1)),
            stride=spec.stride,
            token_counts=dict(zip(map(int, values), map(int, documents_of), strict=True)),
        )

    def window_ends(self) -> list[int]:
        """The ids a document of 1, 2, ... max_chunks windows holds at most (the report's
        window edges)."""
        spec = WindowSpec(self.max_seq_length, self.stride, self.max_chunks)
        return [spec.content + k * spec.step for k in range(self.max_chunks)]

    def to_dict(self) -> dict:
        """As JSON holds it (metrics.json `data.windows`): the counts' keys as strings."""
        values = dataclasses.asdict(self)
        for name in ("windows", "token_counts"):
            values[name] = {str(k): v for k, v in values[name].items()}
        return values

    @classmethod
    def from_dict(cls, values: dict) -> WindowProfile:
        """The profile `to_dict` wrote.

        >>> import json
        >>> spec = WindowSpec(max_seq_length=6, stride=1, max_chunks=2)
        >>> ids = tf.ragged.constant([[1] * 3, [1] * 9])
        >>> needed = spec.windows_needed(np.array([3, 9]))
        >>> profile = WindowProfile.of(WindowedDocuments(ids, needed, spec))
        >>> WindowProfile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile
        True
        >>> profile.window_ends()
        [4, 7]
        """
        values = dict(values)
        for name in ("windows", "token_counts"):
            values[name] = {int(k): v for k, v in values.get(name, {}).items()}
        return cls(**values)

    def line(self) -> str:
        """One line for the report and the console."""
        spread = f"{min(self.windows, default=0)} to {max(self.windows, default=0)} windows"
        cut = (
            f"; {self.cut_documents} cut at {self.max_chunks} windows, "
            f"{self.dropped_share:.1%} of the ids dropped"
            if self.cut_documents
            else "; nothing dropped"
        )
        return (
            f"{self.documents} documents of {self.median_tokens:g} ids (median; longest "
            f"{self.max_tokens}) in windows of {self.max_seq_length}: {spread}{cut}"
        )


def chunk_suggestion(packed_lengths: np.ndarray, max_seq_length: int, threshold: float = 0.1):
    """The one-line suggestion `truncate` prints when more than `threshold` of the rows lose
    tokens to max_seq_length, with the measured share; None when few do.

    Examples:
    >>> chunk_suggestion(np.array([10, 200, 300, 90]), 128)
    '50.0% of the training rows are longer than --max-seq-length 128 and lose tokens; --long-documents chunk classifies them whole (windows pooled per document).'
    >>> chunk_suggestion(np.array([10, 20]), 128) is None
    True
    """  # noqa: E501
    lengths = np.asarray(packed_lengths)
    share = float((lengths > max_seq_length).mean()) if len(lengths) else 0.0
    if share <= threshold:
        return None
    return (
        f"{share:.1%} of the training rows are longer than --max-seq-length {max_seq_length} and "
        "lose tokens; --long-documents chunk classifies them whole (windows pooled per document)."
    )


def chunk_buckets(max_chunks: int) -> tuple[int, ...]:
    """Chunk counts K of the buckets: powers of two below `max_chunks`, and `max_chunks`.

    Examples:
    >>> chunk_buckets(1), chunk_buckets(6), chunk_buckets(8)
    ((1,), (1, 2, 4, 6), (1, 2, 4, 8))
    """
    powers = [2**i for i in range(max_chunks.bit_length()) if 2**i < max_chunks]
    return (*powers, max_chunks)


def plan_documents(
    documents: WindowedDocuments,
    global_batch: int,
    *,
    shuffle: bool,
    seed: int = 0,
    epoch: int = 0,
    buckets: Sequence[int] | None = None,
    run_length: int = 1,
) -> list[Batch]:
    """Full global batches of documents, one chunk-count bucket each (`Batch.seq_length` = K).

    Args:
        documents: the encoded documents.
        global_batch: documents per step.
        shuffle: shuffle inside each bucket and the order of the batches, by (seed, epoch).
        buckets: the chunk counts; `chunk_buckets(spec.max_chunks)` by default.
        run_length: keep a bucket's batches together in runs of this many (as `plan_batches`).
    """
    buckets = chunk_buckets(documents.spec.max_chunks) if buckets is None else buckets
    return plan_batches(
        documents.kept_windows,
        buckets,
        global_batch,
        shuffle=shuffle,
        seed=seed,
        epoch=epoch,
        run_length=run_length,
    )


class WindowedInput(BucketedInput):
    """Per-bucket distributed datasets of windowed documents that follow a plan: a
    `BucketedInput` (the same arguments after `documents`, and the same batches) whose rows
    are documents cut into windows.

    Args:
        documents: the encoded documents.
        *args, **kwargs: as `BucketedInput` takes them after its `encoded`: the documents'
            `labels`, the `plan` (`plan_documents`), the `strategy`, `special_ids`,
            `micro_batches` and `weights`. Every batch has the static window shape (no
            `pad_to_longest`).

    Iterating yields `(K, per-replica batch)` in plan order. A batch holds `input_word_ids`,
    `input_mask`, `input_type_ids` ([per-replica batch, K, max_seq_length] int32),
    `window_mask` ([per-replica batch, K] int32; all 0 on padding documents), and one row per
    document of `label`, `example_weight` (0 on padding documents), `index` (-1 on them) and
    `global_examples`, as `BucketedInput` gives them.
    """

    def __init__(self, documents: WindowedDocuments, *args, **kwargs):
        self.documents = documents  # before the datasets: `_dataset` reads it
        super().__init__(EncodedTexts(documents.ids, None, documents.windows), *args, **kwargs)

    def _dataset(
        self, seq_length: int, context: tf.distribute.InputContext, every_bucket: bool = False
    ) -> tf.data.Dataset:
        """The batches of the bucket of K = `seq_length` windows per document."""
        chunks = seq_length
        ids, spec = self.documents.ids, self.documents.spec
        labels = tf.constant(self.labels)
        weights = tf.constant(self.weights, tf.float32)

        def build(element):
            index = element[INDEX]
            safe = tf.maximum(index, 0)
            real = index != PAD_INDEX
            windows = window_ids(tf.gather(ids, safe), spec, max_chunks=chunks, **self.special_ids)
            shape = [index.shape[0], chunks]
            width = [*shape, spec.max_seq_length]
            inputs = {k: tf.ensure_shape(windows[k], width) for k in MODEL_KEYS[:3]}
            mask = tf.where(real[:, tf.newaxis], windows[WINDOW_MASK], 0)
            label = tf.gather(labels, safe)
            real_rows = tf.reshape(real, [-1] + [1] * (len(label.shape) - 1))
            return {
                **inputs,
                WINDOW_MASK: tf.ensure_shape(mask, shape),
                LABEL: tf.where(real_rows, label, tf.zeros_like(label)),
                WEIGHT: tf.where(real, tf.gather(weights, safe), 0.0),
                INDEX: index,
                GLOBAL_EXAMPLES: element[GLOBAL_EXAMPLES],
            }

        options = tf.data.Options()
        options.autotune.enabled = False  # see BucketedInput._dataset
        rows = self._rows_for(None if every_bucket else chunks, context)
        build = tf.autograph.experimental.do_not_convert(build)
        return (
            tf.data.Dataset.from_tensor_slices(rows)
            .map(build, num_parallel_calls=2, deterministic=True)
            .prefetch(2)
            .with_options(options)
        )
