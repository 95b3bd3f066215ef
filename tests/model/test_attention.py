"""Attention through Keras' fused `dot_product_attention` gives the written-out path's numbers
and gradients (`bertfit.model.attention`), for the kit's part and for whole encoders; on JAX:
tests/model/test_backends.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from bertfit.model.attention import AUTO, EXPLICIT, FUSED, attend, uses_fused
from bertfit.model.encoder import BertEncoder, segment_bias
from bertfit.model.layers import Dropout
from tests.model.test_backends import CONFIGS, windows
from tests.tiny import TINY_CONFIG, tiny_encoder

BATCH, HEADS, SEQ, HEAD_SIZE = 2, 4, 6, 8


def _padding_bias():
    bias = np.zeros((BATCH, 1, 1, SEQ), "float32")
    bias[1, ..., 4:] = -1e9  # the second example's last two tokens are padding
    return bias


def _segment_bias():
    return segment_bias(tf.constant([[1, 1, 1, 2, 2, 0], [1, 2, 2, 2, 3, 3]]))


def _fused_and_explicit(kv_heads, padding_bias, with_bias):
    """Outputs and the gradients of a weighted sum of them with respect to q, k, v (and the
    bias), fused and written out."""
    rng = np.random.default_rng(0)
    q = tf.constant(rng.normal(size=(BATCH, HEADS, SEQ, HEAD_SIZE)), tf.float32)
    k, v = (tf.constant(rng.normal(size=(BATCH, kv_heads, SEQ, HEAD_SIZE)), tf.float32)
            for _ in range(2))  # fmt: skip
    bias = tf.constant(rng.normal(size=(1, HEADS, SEQ, SEQ)), tf.float32) if with_bias else None
    weights = tf.constant(rng.normal(size=(BATCH * SEQ, HEADS * HEAD_SIZE)), tf.float32)
    results = {}
    for implementation in (FUSED, EXPLICIT):
        inputs = [q, k, v] + ([bias] if with_bias else [])
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            rows = attend(q, k, v, padding_bias, bias=bias, implementation=implementation)
            total = tf.reduce_sum(rows * weights)
        results[implementation] = [rows, *tape.gradient(total, inputs)]
    return results


@pytest.mark.parametrize(
    "kv_heads, mask, with_bias",
    [
        (HEADS, "padding", False),
        (HEADS, "segments", False),
        (1, "padding", False),  # grouped key/value heads: one for all four query heads
        (2, "segments", False),
        (HEADS, "padding", True),  # an additive bias per query and key (MPNet's, DeBERTa's)
    ],
)
def test_the_fused_op_gives_the_written_out_attention_and_gradients(kv_heads, mask, with_bias):
    padding_bias = _padding_bias() if mask == "padding" else _segment_bias()
    results = _fused_and_explicit(kv_heads, padding_bias, with_bias)
    for fused, explicit in zip(results[FUSED], results[EXPLICIT], strict=True):
        np.testing.assert_allclose(fused.numpy(), explicit.numpy(), atol=1e-5)


def test_attention_dropout_is_written_out_whatever_the_choice():
    dropout = Dropout(0.1)
    assert uses_fused(FUSED) and not uses_fused(EXPLICIT)
    assert not uses_fused(FUSED, dropout, training=True)
    assert uses_fused(FUSED, dropout, training=False)
    assert uses_fused(FUSED, Dropout(0.0), training=True)
    assert not uses_fused(AUTO)  # a CPU on TensorFlow: written out, measured faster
    with pytest.raises(ValueError, match="flash"):
        uses_fused("flash")


def _encoder_outputs_and_gradients(config, inputs, implementation):
    """The sequence output on tokens (0 on padding) and the gradients of its sum of squares."""
    encoder = tiny_encoder(config)
    encoder.use_attention(implementation)
    tokens = tf.cast(inputs["input_mask"] > 0, tf.float32)[..., None]
    with tf.GradientTape() as tape:
        sequence = encoder(inputs, training=True)["sequence_output"] * tokens
        total = tf.reduce_sum(tf.square(sequence))
    variables = encoder.trainable_variables
    gradients = tape.gradient(total, variables)
    # The tables' IndexedSlices as tensors; the pooler, unused here, has None.
    return [sequence] + [
        tf.zeros(v.shape) if g is None else tf.convert_to_tensor(g)
        for v, g in zip(variables, gradients, strict=True)
    ]


PACKED = {
    "input_word_ids": [[2, 7, 8, 3, 2, 9, 3, 0], [2, 5, 6, 7, 3, 2, 4, 3]],
    "input_mask": [[1, 1, 1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 1, 2, 2, 2]],  # segments
    "input_type_ids": [[0] * 8] * 2,
    "input_positions": [[0, 1, 2, 3, 0, 1, 2, 0], [0, 1, 2, 3, 4, 0, 1, 2]],
    "example_starts": [[0, 4], [0, 5]],
}


@pytest.mark.parametrize(
    "family, packed",
    [
        ("bert", True),
        ("eurobert", False),
        ("mpnet", False),
        ("deberta-v3", False),
        ("modernbert", False),
    ],
)
def test_an_encoder_computes_the_same_with_fused_attention(family, packed):
    """Each ~0.5-1 s: BERT's layer on a packed batch (segment masks), EuroBERT's grouped
    key/value heads, MPNet's relative bias, DeBERTa's disentangled scores, ModernBERT's dense
    window. Compared on tokens: a padding token whose every key is masked (ModernBERT's window
    over padding alone) gets a uniform average of other keys from either, not the same one."""
    config = TINY_CONFIG if family == "bert" else CONFIGS[family]
    config = dataclasses.replace(config, vocab_size=max(config.vocab_size, 40))
    inputs = PACKED if packed else {k: v[0] for k, v in windows(config).items()}
    inputs = {k: tf.constant(v, tf.int32) for k, v in inputs.items() if k != "window_mask"}
    fused = _encoder_outputs_and_gradients(config, inputs, FUSED)
    explicit = _encoder_outputs_and_gradients(config, inputs, EXPLICIT)
    assert len(fused) == len(explicit) > 10
    for a, b in zip(fused, explicit, strict=True):
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a, b, atol=1e-5 * scale)


def test_use_attention_refuses_an_unknown_implementation():
    with pytest.raises(ValueError, match="'flash' not in"):
        tiny_encoder().use_attention("flash")


def test_the_fused_path_keeps_the_float32_softmax_under_mixed_bfloat16():
    """Both paths take bfloat16 q, k, v and run the logits and softmax in float32: each is
    float32's numbers to bfloat16's rounding (outputs below 2: steps of 1/128)."""
    rng = np.random.default_rng(1)
    q, k, v = (tf.constant(rng.normal(size=(BATCH, HEADS, SEQ, HEAD_SIZE)), tf.bfloat16)
               for _ in range(3))  # fmt: skip
    reference = attend(*(tf.cast(x, tf.float32) for x in (q, k, v)), _padding_bias()).numpy()
    assert np.abs(reference).max() < 2
    for implementation in (FUSED, EXPLICIT):
        rows = attend(q, k, v, _padding_bias(), implementation=implementation)
        assert rows.dtype == tf.bfloat16
        np.testing.assert_allclose(
            tf.cast(rows, tf.float32).numpy(), reference, atol=3 / 128, err_msg=implementation
        )


def test_a_mixed_bfloat16_encoder_with_fused_attention_stays_close():
    """As the written-out path does (tests/model/test_encoder.py)."""
    reference = tiny_encoder()
    encoder = BertEncoder(TINY_CONFIG, dtype="mixed_bfloat16")
    for mine, theirs in zip(encoder.weights, reference.weights, strict=True):
        mine.assign(theirs)
    encoder.use_attention(FUSED)
    inputs = {k: tf.constant(v, tf.int32) for k, v in PACKED.items()}
    sequence = encoder(inputs)["sequence_output"]
    assert sequence.dtype == tf.bfloat16
    drift = np.abs(tf.cast(sequence, tf.float32) - reference(inputs)["sequence_output"])
    assert drift.max() < 0.1
