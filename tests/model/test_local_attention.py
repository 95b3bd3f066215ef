"""Sliding-window attention in the band (`bertfit.model.local_attention`) computes what the dense
window computes, and a ModernBERT local layer over a long sequence computes no seq x seq
tensor."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from bertfit.model.config import BertConfig
from bertfit.model.layers import matmul_transposed
from bertfit.model.local_attention import banded_attention, uses_bands, window_bias
from bertfit.model.modernbert import EncoderParts, ModernBertLayer, ModernBertSettings


def dense(q, k, v, bias, window):
    scores = matmul_transposed(q, k) / np.sqrt(q.shape[-1])
    return ops.softmax(scores + bias + window_bias(q.shape[2], window), axis=-1) @ v


@pytest.mark.parametrize(
    "length, window", [(9, 2), (32, 8), (33, 8), (100, 7), (12, 1), (10, 0), (5, 64)]
)
def test_the_band_is_the_dense_window_at_every_real_query(length, window):
    rng = np.random.default_rng(length + window)
    q, k, v = (ops.convert_to_tensor(3 * rng.normal(size=(3, 2, length, 4)), "float32")
               for _ in range(3))  # fmt: skip
    lengths = np.array([length, length // 2 + 1, 1])
    mask = np.arange(length)[None] < lengths[:, None]
    bias = ops.convert_to_tensor(np.where(mask, 0.0, -1e9)[:, None, None, :], "float32")
    expected = ops.convert_to_numpy(dense(q, k, v, bias, window))
    got = ops.convert_to_numpy(banded_attention(q, k, v, bias, window))
    for row, real in enumerate(lengths):
        np.testing.assert_allclose(got[row, :, :real], expected[row, :, :real], atol=1e-5)


def test_a_mixed_precision_band_keeps_its_dtype_and_is_close():
    rng = np.random.default_rng(0)
    q, k, v = (ops.convert_to_tensor(rng.normal(size=(1, 2, 40, 8)), "bfloat16") for _ in range(3))
    bias = ops.zeros((1, 1, 1, 40))
    got = banded_attention(q, k, v, bias, 5)
    assert got.dtype == "bfloat16"
    expected = dense(*(ops.cast(x, "float32") for x in (q, k, v)), bias, 5)
    np.testing.assert_allclose(ops.convert_to_numpy(ops.cast(got, "float32")),
                               ops.convert_to_numpy(expected), atol=0.05)  # fmt: skip


def _tensor_shapes(function, *args) -> list[tuple]:
    graph = tf.function(function).get_concrete_function(*args).graph
    return [tuple(t.shape.as_list()) for op in graph.get_operations() for t in op.outputs
            if t.shape.rank is not None]  # fmt: skip


def test_a_long_sequence_s_local_layer_computes_no_seq_by_seq_tensor():
    """At 64 tokens and a window of 4, the local layer's scores are [.., 16 blocks, 4, 12]:
    no tensor of the graph has two axes of 64 (the dense window's bias and scores did)."""
    settings = ModernBertSettings(local_attention=8, global_attn_every_n_layers=2)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=24, absolute_positions=False, type_vocab_size=0,
                        has_pooler=False, model_type="modernbert",
                        variant=dataclasses.asdict(settings))  # fmt: skip
    layer, parts = ModernBertLayer(config, index=1), EncoderParts(config)
    layer.build()
    length = 64
    assert uses_bands(length, settings.window) and not layer.is_global
    ids = tf.zeros([2, length], tf.int32)

    def call(rows, ids):
        bias = tf.zeros([2, 1, 1, length])
        return layer(rows, bias, context=parts.context({"input_word_ids": ids}))

    shapes = _tensor_shapes(call, tf.zeros([2 * length, 16]), ids)
    assert shapes and not [s for s in shapes if s.count(length) >= 2]
