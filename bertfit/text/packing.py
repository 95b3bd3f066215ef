"""Packing WordPiece ids into BERT inputs: truncation, `[CLS]`/`[SEP]`, segment ids, padding.

Kept apart from tokenization so a data pipeline can tokenize once, group examples by length and
then pack each group to its own bucket length.
"""

from __future__ import annotations

import tensorflow as tf

from bertfit.errors import InputFormatError
from bertfit.text import lengths


def pack_inputs(
    ids_a,
    ids_b=None,
    *,
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
    pad_id: int = 0,
    padding: str = "max_length",
    pair_separators: int = 1,
    second_type_id: int = 1,
) -> dict[str, tf.Tensor]:
    """Packs `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, truncating like Hugging Face.

    Truncation is HF's `truncation=True`: single segments keep their first
    `max_seq_length - 2` ids; pairs follow `truncation_lengths` (longest first).
    RoBERTa-style templates (`<s> a </s></s> b </s>`, every type id 0) are
    `pair_separators=2, second_type_id=0`.

    Args:
        ids_a: ids of the first segments: a `tf.RaggedTensor` `[batch, None]`, a dense
            `[batch, length]` tensor, a list of lists, or one example as a 1-D tensor or list.
        ids_b: ids of the second segments, shaped like `ids_a`, or `None`.
        max_seq_length: the packed length, special tokens included (an int, or a scalar
            integer tensor as TF Hub's `bert_pack_inputs(..., seq_length=...)` receives it).
        cls_id: id of `[CLS]`.
        sep_id: id of `[SEP]`.
        pad_id: id written after the end of each row.
        pair_separators: separator tokens between the two segments of a pair (BERT 1,
            RoBERTa 2).
        second_type_id: the type id of the second segment and its separators.
        padding: `"max_length"` pads to `max_seq_length`; `"longest"` to the longest row.

    Returns:
        int32 `input_word_ids`, `input_mask` (1 on real tokens) and `input_type_ids` (1 on the
        second segment and its `[SEP]`), each `[batch, length]`, or `[length]` for one example.

    Examples:
    >>> inputs = pack_inputs(tf.ragged.constant([[7, 8, 9]]), tf.ragged.constant([[5]]),
    ...                      max_seq_length=6, cls_id=101, sep_id=102)
    >>> inputs["input_word_ids"].numpy().tolist(), inputs["input_type_ids"].numpy().tolist()
    ([[101, 7, 8, 102, 5, 102]], [[0, 0, 0, 0, 1, 1]])
    """
    lengths.check_padding(padding)
    ids_a, single = _as_ragged_ids(ids_a, "ids_a")
    if isinstance(max_seq_length, tf.Tensor):
        max_seq_length = tf.cast(max_seq_length, tf.int64)
    else:
        lengths.check_max_seq_length(
            max_seq_length, special_tokens=2 + pair_separators if ids_b is not None else 2
        )
    if ids_b is None:
        segments = [(ids_a, tf.minimum(ids_a.row_lengths(), max_seq_length - 2))]
    else:
        ids_b, single_b = _as_ragged_ids(ids_b, "ids_b")
        if single != single_b or not ids_a.shape[:1].is_compatible_with(ids_b.shape[:1]):
            raise InputFormatError(
                "ids_a and ids_b must have one row per example each, got shapes "
                f"{ids_a.shape} and {ids_b.shape}."
            )
        budget = max_seq_length - 2 - pair_separators
        keep_a, keep_b = truncation_lengths(ids_a.row_lengths(), ids_b.row_lengths(), budget)
        segments = [(ids_a, keep_a), (ids_b, keep_b)]
    separators = 1 if ids_b is None else 1 + pair_separators
    total = 1 + sum(keep for _, keep in segments) + separators
    # The longest row; 0 for no rows (reduce_max of nothing is the dtype's minimum).
    longest = tf.maximum(tf.reduce_max(total), 0)
    length = max_seq_length if padding == "max_length" else longest
    inputs = _pack_segments(
        segments, length, max_seq_length, (cls_id, sep_id, pad_id), pair_separators, second_type_id
    )
    return {name: t[0] for name, t in inputs.items()} if single else inputs


def pack_rows(
    examples: dict[str, tf.Tensor], slots: int, length: int, pad_id: int = 0
) -> dict[str, tf.Tensor]:
    """Several packed examples per row: `--packing`'s static [rows, length] inputs.

    Args:
        examples: `pack_inputs`' outputs for rows * `slots` examples, slot after slot of
            each row, [rows * slots, width] (width at most `length`); an empty slot has an
            all-zero `input_mask`.
        slots: the example slots of a row.
        length: the row length; the examples of a row must fit in it.
        pad_id: written after a row's last example.

    Returns:
        int32 `input_word_ids` and `input_type_ids` [rows, length], each row its examples'
        tokens one after another; `input_mask` numbering each token's slot (1..slots; 0 on
        padding); `input_positions` each token's position within its example; and
        `example_starts` [rows, slots], each slot's first token (0 for an empty slot).

    Examples:
    >>> examples = pack_inputs(tf.ragged.constant([[7, 8], [9], []]), max_seq_length=4,
    ...                        padding="longest", cls_id=101, sep_id=102)
    >>> empty = tf.constant([[1], [1], [0]])  # the third slot is empty
    >>> examples["input_mask"] *= empty
    >>> rows = pack_rows(examples, slots=3, length=8)
    >>> rows["input_word_ids"].numpy().tolist(), rows["input_mask"].numpy().tolist()
    ([[101, 7, 8, 102, 101, 9, 102, 0]], [[1, 1, 1, 1, 2, 2, 2, 0]])
    >>> rows["input_positions"].numpy().tolist(), rows["example_starts"].numpy().tolist()
    ([[0, 1, 2, 3, 0, 1, 2, 0]], [[0, 4, 0]])
    """
    mask = examples["input_mask"]
    width = tf.shape(mask)[1]
    rows = tf.shape(mask)[0] // slots
    keep = tf.reshape(mask > 0, [rows, slots * width])
    slot_numbers = tf.range(1, slots + 1, dtype=tf.int32)[:, tf.newaxis]  # [slots, 1]
    per_token = {
        "input_word_ids": (examples["input_word_ids"], pad_id),
        "input_type_ids": (examples["input_type_ids"], 0),
        "input_mask": (tf.tile(slot_numbers, [rows, width]), 0),
        "input_positions": (tf.tile(tf.range(width)[tf.newaxis], [rows * slots, 1]), 0),
    }
    packed = {
        name: tf.ragged.boolean_mask(tf.reshape(values, [rows, slots * width]), keep).to_tensor(
            pad, shape=[None, length]
        )
        for name, (values, pad) in per_token.items()
    }
    lengths = tf.reshape(tf.reduce_sum(tf.cast(mask > 0, tf.int32), axis=1), [rows, slots])
    starts = tf.cumsum(lengths, axis=1, exclusive=True)
    packed["example_starts"] = tf.where(lengths > 0, starts, 0)
    return packed


def truncation_lengths(
    len_a: tf.Tensor, len_b: tf.Tensor, budget: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """`bertfit.text.lengths.truncation_lengths` in the graph: how many ids of each segment
    HF's `longest_first` keeps when the pair has `budget` room.

    Examples:
    >>> keep_a, keep_b = truncation_lengths(tf.constant([9, 2]), tf.constant([9, 9]), budget=5)
    >>> keep_a.numpy().tolist(), keep_b.numpy().tolist()
    ([2, 2], [3, 3])
    """
    return lengths.truncation_lengths(len_a, len_b, budget, xp=tf)


def _pack_segments(
    segments, length, max_seq_length, special_ids, pair_separators, second_type_id
) -> dict:
    """Writes `[CLS] a [SEP] b [SEP]` position by position with dense ops (cheap to trace).

    Args:
        segments: `(ids, keep)` pairs: ragged ids and how many of each row to keep.
        length: the packed width.
        max_seq_length: an upper bound on `length`, to make the ids dense.
        special_ids: `(cls_id, sep_id, pad_id)`.
        pair_separators: separators after the first segment of a pair (its last one's too).
        second_type_id: the type id of the second segment.
    """
    cls_id, sep_id, pad_id = special_ids
    positions = tf.range(length, dtype=tf.int64)[tf.newaxis, :]
    word_ids = tf.where(positions == 0, cls_id, pad_id)
    type_ids = tf.zeros_like(positions, tf.int32)
    start = tf.ones_like(segments[0][1])[:, tf.newaxis]  # [batch, 1]
    for index, (ids, keep) in enumerate(segments):
        end = start + keep[:, tf.newaxis]  # where this segment's separators start
        separators = pair_separators if index == 0 and len(segments) == 2 else 1
        dense = _dense(ids, pad_id, max_seq_length)
        offsets = tf.clip_by_value(positions - start, 0, max_seq_length - 1)
        in_segment = (positions >= start) & (positions < end)
        word_ids = tf.where(in_segment, tf.gather(dense, offsets, batch_dims=1), word_ids)
        word_ids = tf.where((positions >= end) & (positions < end + separators), sep_id, word_ids)
        if index == 1:
            in_second = (positions >= start) & (positions < end + separators)
            type_ids = tf.where(in_second, second_type_id, type_ids)
        start = end + separators
    return {
        "input_word_ids": word_ids,
        "input_mask": tf.cast(positions < start, tf.int32),
        "input_type_ids": tf.broadcast_to(type_ids, tf.shape(word_ids)),
    }


def _dense(ids: tf.RaggedTensor, pad_id: int, width) -> tf.Tensor:
    """`ids` as a [batch, width] tensor (cut or padded with `pad_id`)."""
    if not isinstance(width, tf.Tensor):
        return ids.to_tensor(pad_id, shape=[None, width])
    dense = ids.to_tensor(pad_id)
    missing = tf.maximum(width - tf.shape(dense, out_type=tf.int64)[1], 0)
    return tf.pad(dense, [[0, 0], [0, missing]], constant_values=pad_id)[:, :width]


def _as_ragged_ids(ids, name: str) -> tuple[tf.RaggedTensor, bool]:
    """A `[batch, None]` int32 ragged tensor of the ids, and whether they were one example."""
    if ids is None:
        raise InputFormatError(f"{name} is None; pass token ids from BertTokenizer.tokenize.")
    if not isinstance(ids, (tf.Tensor, tf.RaggedTensor)):
        ids = (
            tf.ragged.constant(ids) if isinstance(ids, (list, tuple)) else tf.convert_to_tensor(ids)
        )
    if not (ids.dtype.is_integer and ids.shape.rank in (1, 2)):
        raise InputFormatError(
            f"{name} must be integer token ids of rank 1 or 2, got dtype "
            f"{ids.dtype.name} and shape {ids.shape}; tokenize text first."
        )
    ids = tf.cast(ids, tf.int32)
    if ids.shape.rank == 1:
        return tf.RaggedTensor.from_tensor(tf.expand_dims(ids, 0)), True
    if isinstance(ids, tf.RaggedTensor):
        return ids.with_row_splits_dtype(tf.int64), False
    return tf.RaggedTensor.from_tensor(ids), False
