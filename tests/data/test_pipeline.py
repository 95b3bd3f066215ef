"""The bucketed input: per-bucket pipelines that follow the batch plan."""

from __future__ import annotations

import pytest
import tensorflow as tf

from bertfit.data.pipeline import BucketedInput, EncodedTexts, encode_texts, plan_batches
from bertfit.model.inputs import INDEX
from bertfit.text.packing import pack_inputs
from bertfit.text.tokenizer import BertTokenizer
from tests.tiny import TINY_VOCAB

LENGTHS = (1, 3, 6, 2, 7, 4, 5)  # WordPiece ids per example, before [CLS] and [SEP]


def _bucketed(pad_to_longest: bool = True) -> BucketedInput:
    ids = tf.ragged.constant([[5] * n for n in LENGTHS], dtype=tf.int32)
    encoded = EncodedTexts(ids, None, ids.row_lengths().numpy() + 2)
    plan = plan_batches(encoded.packed_lengths, [4, 8, 16], 2, shuffle=True, seed=1)
    return BucketedInput(
        encoded,
        None,
        plan,
        tf.distribute.get_strategy(),
        special_ids={"cls_id": 101, "sep_id": 102, "pad_id": 0},
        pad_to_longest=pad_to_longest,
    )


@pytest.mark.parametrize("pad_to_longest", [True, False])
def test_iterating_follows_the_plan_and_feeds_every_example_once(pad_to_longest):
    data = _bucketed(pad_to_longest)
    fed = []
    for (seq_length, batch), planned in zip(data, data.plan, strict=True):
        assert seq_length == planned.seq_length
        real = [i for i in batch[INDEX].numpy() if i >= 0]
        longest = max(LENGTHS[i] + 2 for i in real)
        assert batch["input_word_ids"].shape[1] == (longest if pad_to_longest else seq_length)
        fed.extend(real)
    assert sorted(fed) == list(range(7))


def test_batches_padded_to_their_longest_row_come_from_one_pipeline():
    # one element spec for every bucket: one pipeline (one trace of its map function)
    assert len({id(d) for d in _bucketed(pad_to_longest=True).datasets.values()}) == 1
    assert len({id(d) for d in _bucketed(pad_to_longest=False).datasets.values()}) == 3


def test_the_bucket_pipelines_run_without_the_tf_data_autotuner():
    # Deleting an iterator that has not reached its end (every bucket's, once its planned
    # steps are taken) waits for the autotuner: 2-35 s per bucket after each epoch, measured.
    data = _bucketed()
    for seq_length in data.datasets:
        dataset = data._dataset(seq_length, tf.distribute.InputContext())
        assert dataset.options().autotune.enabled is False


@pytest.fixture
def autograph_conversions(monkeypatch) -> list:
    """The names of the functions AutoGraph converts while the test runs."""
    from tensorflow.python.autograph.impl import api

    converted = []
    convert = api._convert_actual
    monkeypatch.setattr(
        api, "_convert_actual", lambda f, *a: converted.append(f.__name__) or convert(f, *a)
    )
    return converted


def test_the_pipelines_are_traced_without_autograph(autograph_conversions):
    # Nothing in them branches on a tensor; converting the packing and tokenizing functions
    # took ~1.4 s of a training run's start on a 2-core CPU, and ~1 s of every later epoch's.
    for pad_to_longest in (True, False):
        _bucketed(pad_to_longest)
    encode_texts(BertTokenizer(TINY_VOCAB), ["a text", "another one"])
    assert autograph_conversions == []


class _RobertaTemplate(BertTokenizer):
    """The tiny vocabulary packed with RoBERTa's pair template: `<s> a </s></s> b </s>`."""

    @property
    def special_ids(self) -> dict:
        return {**super().special_ids, "pair_separators": 2, "second_type_id": 0}


@pytest.mark.parametrize("tokenizer_class", [BertTokenizer, _RobertaTemplate])
def test_packed_lengths_are_the_lengths_the_template_packs(tokenizer_class):
    """A pair's packed length counts its template's separators (RoBERTa has two between the
    texts): a bucket chosen from it holds the whole pair, never one token short."""
    tokenizer = tokenizer_class(TINY_VOCAB)
    texts, pairs = ["the film", "a very good plot"], ["was fun", "boring"]
    encoded = encode_texts(tokenizer, texts, pairs)
    packed = pack_inputs(
        encoded.ids_a, encoded.ids_b, max_seq_length=32, padding="longest", **tokenizer.special_ids
    )
    assert encoded.packed_lengths.tolist() == packed["input_mask"].numpy().sum(1).tolist()
