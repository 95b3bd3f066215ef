"""Packed batches (`--packing`): the plan of every epoch, its padding, and the rows fed."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bertfit.data.packed import MAX_SLOTS, PackedShape, padding_share, plan_packed
from bertfit.data.pipeline import BucketedInput, EncodedTexts
from bertfit.model.inputs import INDEX, MASK, POSITIONS, STARTS, WORD_IDS
from bertfit.text.packing import pack_inputs

SPECIAL = {"cls_id": 101, "sep_id": 102, "pad_id": 0}


def _long_tailed(n: int, median: float, seed: int = 0) -> np.ndarray:
    """Packed lengths with a long tail (log-normal), [CLS] and [SEP] included."""
    rng = np.random.default_rng(seed)
    return np.maximum(rng.lognormal(np.log(median), 0.8, n).astype(int), 0) + 2


def _plan(lengths, length=128, batch_size=32, epoch=0, shuffle=True):
    shape = PackedShape.choose(lengths, length, batch_size=batch_size)
    return shape, plan_packed(lengths, shape, shape.rows, shuffle=shuffle, seed=7, epoch=epoch)


def test_every_example_is_in_one_slot_of_each_epoch_and_every_row_fits():
    lengths = _long_tailed(3000, median=20)
    rows_of_epochs, first_rows = [], []
    for epoch in range(3):
        shape, plan = _plan(lengths, epoch=epoch)
        indices = np.concatenate([batch.indices for batch in plan])
        assert all(batch.indices.shape == (shape.rows, shape.slots) for batch in plan)
        assert sorted(indices[indices >= 0].tolist()) == list(range(len(lengths)))
        used = np.where(indices >= 0, np.minimum(lengths, 128)[np.maximum(indices, 0)], 0)
        assert used.sum(axis=1).max() <= 128
        again = _plan(lengths, epoch=epoch)[1]  # as a resume plans the epoch again
        assert [b.indices.tolist() for b in again] == [b.indices.tolist() for b in plan]
        rows_of_epochs.append(len(plan))
        first_rows.append(frozenset(plan[0].indices[0].tolist()))
    # every epoch the same steps: the run's length, its schedule and a resume rely on it
    assert len(set(rows_of_epochs)) == 1
    assert len(set(first_rows)) == 3  # which examples share a row changes every epoch


@pytest.mark.parametrize("median, length", [(20, 64), (20, 128), (60, 512), (200, 512)], ids=str)
def test_padding_is_at_most_three_percent_of_a_long_tailed_mix(median, length):
    lengths = _long_tailed(5000, median)
    shape, plan = _plan(lengths, length)
    assert padding_share(lengths, shape, plan) <= 0.03
    # a step holds about --batch-size examples on average
    steps = len(plan)
    assert 0.8 * 32 <= len(lengths) / steps <= 1.25 * 32


def test_the_shape_is_chosen_once_from_the_lengths():
    lengths = _long_tailed(2000, median=20)
    shape = PackedShape.choose(lengths, 128, batch_size=32, replicas=4)
    assert shape.length == 128 and shape.rows % 4 == 0
    assert shape.slots <= MAX_SLOTS
    # the slots hold a row of the shortest examples
    assert np.sort(lengths)[: shape.slots].sum() <= 128 or shape.slots == MAX_SLOTS


@pytest.mark.slow
def test_rotten_tomatoes_packs_with_at_most_three_percent_padding(rotten_tomatoes, minilm_dir):
    """The training texts' lengths under MiniLM's tokenizer, at 64 and 128 tokens a row."""
    import csv

    from bertfit.checkpoints.load import build_tokenizer, read_checkpoint
    from bertfit.data.pipeline import encode_texts

    with open(f"{rotten_tomatoes}/train.csv", encoding="utf-8") as f:
        texts = [row["text"] for row in csv.DictReader(f)]
    tokenizer = build_tokenizer(read_checkpoint(minilm_dir))
    lengths = encode_texts(tokenizer, texts).packed_lengths
    for length in (64, 128):
        shape, plan = _plan(lengths, length)
        assert padding_share(lengths, shape, plan) <= 0.03, length


def test_the_pipeline_feeds_each_planned_row_with_its_examples_packed_as_alone():
    lengths = (1, 3, 6, 2, 7, 4, 5, 1, 2)  # WordPiece ids per example
    ids = tf.ragged.constant([[10 + i] * n for i, n in enumerate(lengths)], dtype=tf.int32)
    encoded = EncodedTexts(ids, None, ids.row_lengths().numpy() + 2)
    shape = PackedShape(rows=2, slots=4, length=12)
    plan = plan_packed(encoded.packed_lengths, shape, 2, shuffle=True, seed=3)
    labels = np.arange(len(lengths), dtype=np.int32)
    data = BucketedInput(
        encoded, labels, plan, tf.distribute.get_strategy(), special_ids=SPECIAL, slots=4
    )
    alone = pack_inputs(ids, max_seq_length=12, padding="longest", **SPECIAL)
    seen = []
    for (length, batch), planned in zip(data, plan, strict=True):
        assert length == 12 and batch[WORD_IDS].shape == (2, 12) and batch[STARTS].shape == (2, 4)
        np.testing.assert_array_equal(batch[INDEX].numpy(), planned.indices)
        for row in range(2):
            for slot, example in enumerate(planned.indices[row]):
                if example < 0:
                    assert batch["example_weight"].numpy()[row, slot] == 0
                    continue
                tokens = batch[MASK].numpy()[row] == slot + 1
                n = int(encoded.packed_lengths[example])
                assert tokens.sum() == n
                start = batch[STARTS].numpy()[row, slot]
                assert np.flatnonzero(tokens).tolist() == list(range(start, start + n))
                expected = alone[WORD_IDS].numpy()[example, :n]
                np.testing.assert_array_equal(batch[WORD_IDS].numpy()[row][tokens], expected)
                assert batch[POSITIONS].numpy()[row][tokens].tolist() == list(range(n))
                assert batch["label"].numpy()[row, slot] == example
                seen.append(int(example))
    assert sorted(seen) == list(range(len(lengths)))
