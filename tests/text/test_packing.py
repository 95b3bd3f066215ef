"""pack_inputs: HF truncation arithmetic, special tokens, segment ids and padding."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bertfit.errors import ConfigError, InputFormatError
from bertfit.text import pack_inputs, truncation_lengths

CLS, SEP, PAD = 101, 102, 0

# (max_length, len_a, len_b) -> what Hugging Face's tokenizers 0.23 kept, recorded by hand.
HF_KEPT = {
    (8, 3, 3): (2, 3),
    (8, 4, 3): (3, 2),
    (8, 3, 4): (2, 3),
    (8, 1, 9): (1, 4),
    (8, 9, 1): (4, 1),
    (8, 2, 3): (2, 3),
    (8, 11, 11): (2, 3),
    (8, 6, 0): (5, 0),
    (9, 7, 7): (3, 3),
    (9, 5, 2): (4, 2),
    (9, 2, 12): (2, 4),
}


@pytest.mark.parametrize(("key", "kept"), HF_KEPT.items())
def test_truncation_lengths_match_recorded_hf(key, kept):
    max_length, len_a, len_b = key
    keep_a, keep_b = truncation_lengths(tf.constant([len_a]), tf.constant([len_b]), max_length - 3)
    assert (int(keep_a[0]), int(keep_b[0])) == kept


def test_truncation_never_exceeds_the_budget_or_the_lengths():
    grid = np.array([(a, b) for a in range(20) for b in range(20)])
    for budget in range(0, 12):
        keep_a, keep_b = truncation_lengths(
            tf.constant(grid[:, 0]), tf.constant(grid[:, 1]), budget
        )
        assert np.all(keep_a.numpy() + keep_b.numpy() == np.minimum(grid.sum(1), budget))
        assert np.all(keep_a.numpy() <= grid[:, 0]) and np.all(keep_b.numpy() <= grid[:, 1])


def pack(ids_a, ids_b=None, max_seq_length=8, **kwargs):
    inputs = pack_inputs(
        ids_a, ids_b, max_seq_length=max_seq_length, cls_id=CLS, sep_id=SEP, pad_id=PAD, **kwargs
    )
    return {name: tensor.numpy().tolist() for name, tensor in inputs.items()}


def test_single_segments_are_cut_to_fit():
    inputs = pack(tf.ragged.constant([[1, 2, 3, 4, 5, 6, 7], [1]]), max_seq_length=5)
    assert inputs["input_word_ids"] == [[CLS, 1, 2, 3, SEP], [CLS, 1, SEP, PAD, PAD]]
    assert inputs["input_mask"] == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert inputs["input_type_ids"] == [[0] * 5, [0] * 5]


def test_pairs_mark_the_second_segment():
    inputs = pack(tf.ragged.constant([[1, 2], []]), tf.ragged.constant([[3], [4, 5]]))
    assert inputs["input_word_ids"] == [
        [CLS, 1, 2, SEP, 3, SEP, PAD, PAD],
        [CLS, SEP, 4, 5, SEP, PAD, PAD, PAD],
    ]
    assert inputs["input_type_ids"] == [[0, 0, 0, 0, 1, 1, 0, 0], [0, 0, 1, 1, 1, 0, 0, 0]]
    assert inputs["input_mask"] == [[1] * 6 + [0] * 2, [1] * 5 + [0] * 3]


def test_pairs_are_truncated_longest_first():
    inputs = pack([[1, 2, 3, 4, 5, 6]], [[7, 8, 9]], max_seq_length=9)
    assert inputs["input_word_ids"] == [[CLS, 1, 2, 3, SEP, 7, 8, 9, SEP]]


def test_longest_padding_fits_the_batch():
    inputs = pack(tf.ragged.constant([[1, 2], [1]]), max_seq_length=64, padding="longest")
    assert inputs["input_word_ids"] == [[CLS, 1, 2, SEP], [CLS, 1, SEP, PAD]]


def test_one_example_gives_unbatched_outputs():
    inputs = pack(tf.constant([1, 2]), tf.constant([3]), max_seq_length=6)
    assert inputs["input_word_ids"] == [CLS, 1, 2, SEP, 3, SEP]
    assert inputs["input_type_ids"] == [0, 0, 0, 0, 1, 1]


def test_dense_ids_and_int64_are_accepted():
    inputs = pack(tf.constant([[1, 2], [3, 4]], tf.int64), max_seq_length=4)
    assert inputs["input_word_ids"] == [[CLS, 1, 2, SEP], [CLS, 3, 4, SEP]]


def test_int32_row_splits_are_accepted():
    ids = tf.ragged.constant([[1, 2], [3]], row_splits_dtype=tf.int32)
    inputs = pack(ids, ids, max_seq_length=6)
    assert inputs["input_word_ids"] == [[CLS, 1, SEP, 1, 2, SEP], [CLS, 3, SEP, 3, SEP, PAD]]


def test_outputs_are_int32_with_a_static_length_in_graphs():
    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int32)] * 2)
    def packed(ids_a, ids_b):
        return pack_inputs(ids_a, ids_b, max_seq_length=16, cls_id=CLS, sep_id=SEP)

    for name, spec in packed.get_concrete_function().structured_outputs.items():
        assert spec.dtype == tf.int32, name
        assert spec.shape.as_list() == [None, 16], name


def test_empty_batch():
    inputs = pack(tf.ragged.constant([], tf.int32, ragged_rank=1), max_seq_length=4)
    assert inputs["input_word_ids"] == []


@pytest.mark.parametrize(
    "ids", [None, ["a", "b"], tf.constant(["a"]), tf.zeros([2, 2, 2], tf.int32)]
)
def test_rejects_what_is_not_token_ids(ids):
    with pytest.raises(InputFormatError):
        pack(ids)


def test_rejects_segments_of_different_batches():
    with pytest.raises(InputFormatError, match="one row per example"):
        pack([[1, 2]], [3])
    with pytest.raises(InputFormatError, match="one row per example"):
        pack([[1, 2]], [[3], [4]])


@pytest.mark.parametrize(("max_seq_length", "pair"), [(1, False), (2, True), (8.0, False)])
def test_rejects_a_length_without_room_for_special_tokens(max_seq_length, pair):
    with pytest.raises(ConfigError, match="max_seq_length"):
        pack([[1]], [[2]] if pair else None, max_seq_length=max_seq_length)


def test_rejects_unknown_padding():
    with pytest.raises(ConfigError, match="padding"):
        pack([[1]], padding="do_not_pad")
