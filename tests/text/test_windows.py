"""Windows of long texts (issue 35): every id lands in a window, in order, with the overlap
asked for; the cap drops and counts the rest; padding windows are marked; pairs are refused."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bertfit.errors import ConfigError
from bertfit.text import BertTokenizer
from bertfit.text.windows import WindowSpec, tokenize_windows, window_ids
from tests.tiny import TINY_VOCAB, write_vocab

CLS, SEP, PAD = 101, 102, 0


def _windows(lengths, spec, **kwargs):
    ids = tf.ragged.constant([list(range(1000, 1000 + n)) for n in lengths], dtype=tf.int32)
    return window_ids(ids, spec, cls_id=CLS, sep_id=SEP, pad_id=PAD, **kwargs)


@pytest.mark.parametrize(("seq", "stride"), [(5, 0), (5, 2), (8, 3), (6, 1)])
def test_windows_cover_every_id_in_order_with_the_overlap(seq, stride):
    spec = WindowSpec(max_seq_length=seq, stride=stride, max_chunks=50)
    lengths = list(range(0, 30))
    out = _windows(lengths, spec)
    words, mask, windows = (out[k].numpy() for k in ("input_word_ids", "input_mask", "window_mask"))
    for row, n in enumerate(lengths):
        real = [words[row, k][mask[row, k] == 1] for k in range(50) if windows[row, k]]
        assert all(w[0] == CLS and w[-1] == SEP for w in real)
        texts = [w[1:-1].tolist() for w in real]
        assert all(len(t) <= spec.content for t in texts)
        for a, b in zip(texts, texts[1:], strict=False):  # consecutive: `stride` ids shared
            assert a[len(a) - stride :] == b[:stride] and len(a) == spec.content
        rebuilt = texts[0] + [i for t in texts[1:] for i in t[stride:]]
        assert rebuilt == list(range(1000, 1000 + n))
        assert len(real) == out["windows"].numpy()[row] == max(1, len(real))
        assert out["dropped_tokens"].numpy()[row] == 0
        # Padding windows are [CLS] [SEP] and padding.
        for k in range(len(real), 50):
            assert words[row, k].tolist() == [CLS, SEP] + [PAD] * (seq - 2)


def test_the_cap_keeps_the_first_windows_and_counts_the_dropped_ids():
    spec = WindowSpec(max_seq_length=6, stride=1, max_chunks=2)  # 4 ids a window, step 3
    out = _windows([4, 7, 8, 20], spec)
    assert out["windows"].numpy().tolist() == [1, 2, 3, 7]
    assert out["window_mask"].numpy().tolist() == [[1, 0], [1, 1], [1, 1], [1, 1]]
    assert out["dropped_tokens"].numpy().tolist() == [0, 0, 1, 13]  # windows cover ids 0..6
    assert out["input_word_ids"].numpy()[3, 1].tolist() == [CLS, 1003, 1004, 1005, 1006, SEP]


def test_shapes_are_static_and_int32_inside_a_traced_function():
    spec = WindowSpec(max_seq_length=8, stride=2, max_chunks=3)

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int32)])
    def cut(ids):
        return window_ids(ids, spec, cls_id=CLS, sep_id=SEP)

    out = cut.get_concrete_function().structured_outputs
    assert out["input_word_ids"].shape.as_list() == [None, 3, 8]
    assert out["window_mask"].shape.as_list() == [None, 3]
    assert {t.dtype for t in out.values()} == {tf.int32}
    assert cut(tf.ragged.constant([[5] * 30], tf.int32))["window_mask"].numpy().sum() == 3


def test_a_bucket_k_overrides_the_cap():
    spec = WindowSpec(max_seq_length=5, stride=0, max_chunks=8)
    out = _windows([10], spec, max_chunks=2)
    assert out["input_word_ids"].shape == (1, 2, 5)
    assert out["dropped_tokens"].numpy().tolist() == [4]


def test_the_checkpoint_template_and_pad_id_are_used():
    spec = WindowSpec(max_seq_length=5, stride=0, max_chunks=2)
    out = window_ids(tf.ragged.constant([[7]]), spec, cls_id=0, sep_id=2, pad_id=1)
    assert out["input_word_ids"].numpy()[0].tolist() == [[0, 7, 2, 1, 1], [0, 2, 1, 1, 1]]


def test_the_first_window_is_the_truncated_packing(tmp_path):
    tokenizer = BertTokenizer(write_vocab(tmp_path))
    words = " ".join(TINY_VOCAB[5:] * 3)
    texts = [words, "a good film", ""]
    spec = WindowSpec(max_seq_length=16, stride=4, max_chunks=3)
    out = tokenize_windows(tokenizer, texts, spec)
    truncated = tokenizer(texts, max_seq_length=16)
    for name in ("input_word_ids", "input_mask", "input_type_ids"):
        np.testing.assert_array_equal(out[name][:, 0].numpy(), truncated[name].numpy())
    n = tokenizer.tokenize([words]).row_lengths().numpy()[0]
    assert out["windows"].numpy()[0] == 1 + -(-(n - 14) // 10)
    assert out["dropped_tokens"].numpy()[0] == n - (2 * 10 + 14)
    assert out["window_mask"].numpy().tolist() == [[1, 1, 1], [1, 0, 0], [1, 0, 0]]


def test_pairs_and_bad_specs_are_refused_with_what_to_do(tmp_path):
    tokenizer = BertTokenizer(write_vocab(tmp_path))
    with pytest.raises(ConfigError, match="text pairs are not supported yet"):
        tokenize_windows(tokenizer, ["a"], WindowSpec(8), text_pairs=["b"])
    with pytest.raises(ConfigError, match="lower --chunk-stride"):
        WindowSpec(max_seq_length=8, stride=6)
    with pytest.raises(ConfigError, match="max_chunks"):
        WindowSpec(max_seq_length=8, max_chunks=0)
