"""Grouped-query attention (Ainslie et al., 2023), part of the family kit: multi-head attention
whose keys and values have fewer heads than its queries. Each group of num_heads /
num_key_value_heads consecutive query heads shares one key/value head, as transformers'
`repeat_kv` shares them (Llama, EuroBERT); with as many key/value heads as query heads it is
BERT's attention.

The shared heads are never copied: the queries of a group are laid out as one longer sequence,
[batch, kv_heads, group * seq, head_size], so that one batched matrix product per key/value
head scores them all.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from bertfit.errors import CheckpointError
from bertfit.model.blocks import Dropout, dense, merge_heads, size, split_heads
from bertfit.model.config import BertConfig
from bertfit.model.layers import matmul_transposed


class GroupedQueryAttention(keras.layers.Layer):
    """`blocks.SelfAttention` (the same `query`, `key` and `value` projections, `position` hook,
    padding bias and float32 softmax; the output projection is the layer's) with
    `num_key_value_heads` key/value heads.

    Args:
        config: the sizes (`num_attention_heads` query heads), the attention dropout and the
            initialisation.
        num_key_value_heads: the key/value heads; a divisor of the query heads.
        use_bias: whether the projections have biases.

    Examples:
    >>> config = BertConfig(hidden_size=8, num_attention_heads=4)
    >>> attention = GroupedQueryAttention(config, num_key_value_heads=2, use_bias=False)
    >>> attention.build()
    >>> [tuple(layer.kernel.shape) for layer in (attention.query, attention.key)]
    [(8, 8), (8, 4)]
    >>> tuple(attention(ops.ones([6, 8]), ops.zeros([2, 1, 1, 3])).shape)
    (6, 8)
    """

    def __init__(
        self, config: BertConfig, num_key_value_heads: int, use_bias: bool = True, **kwargs
    ):
        super().__init__(**kwargs)
        heads = config.num_attention_heads
        if num_key_value_heads < 1 or heads % num_key_value_heads:
            raise CheckpointError(
                f"num_key_value_heads {num_key_value_heads} does not divide num_attention_heads "
                f"{heads}; check the checkpoint's config.json."
            )
        self.num_heads, self.num_key_value_heads = heads, num_key_value_heads
        self.head_size, self.hidden_size = config.head_size, config.hidden_size
        width = num_key_value_heads * self.head_size
        dtype = self.dtype_policy
        self.query = dense(config.hidden_size, config, "query", dtype, use_bias=use_bias)
        self.key = dense(width, config, "key", dtype, use_bias=use_bias)
        self.value = dense(width, config, "value", dtype, use_bias=use_bias)
        self.dropout = Dropout(config.attention_probs_dropout_prob, dtype=dtype)

    def build(self, input_shape=None):
        for layer in (self.query, self.key, self.value):
            layer.build((None, self.hidden_size))
        self.built = True

    def position(self, q, k, context):
        """The queries [batch, heads, seq, d] and keys [batch, kv_heads, seq, d] with their
        positions applied (`SelfAttention.position`'s hook): as they are here."""
        return q, k

    def call(self, x, attention_bias, training=False, queries=None, context=None):
        """As `SelfAttention.call`: `queries` the rows that attend (the first ones of each
        example; default all of `x`), keys and values every row of `x`; one row per query."""
        queries = x if queries is None else queries
        batch_size, kv_heads = size(attention_bias, 0), self.num_key_value_heads
        q = split_heads(self.query(queries), batch_size, self.num_heads, self.head_size)
        k = split_heads(self.key(x), batch_size, kv_heads, self.head_size)
        v = split_heads(self.value(x), batch_size, kv_heads, self.head_size)
        q, k = self.position(q, k, context)
        # [batch, heads, seq, d] -> [batch, kv_heads, group * seq, d]: head h is in group h // g
        grouped = ops.reshape(q, (batch_size, kv_heads, -1, self.head_size))
        scores = matmul_transposed(grouped, k) * (1.0 / math.sqrt(self.head_size))
        logits = ops.cast(scores, "float32") + ops.cast(attention_bias, "float32")
        probs = self.dropout(ops.cast(ops.softmax(logits, axis=-1), x.dtype), training=training)
        attended = ops.matmul(probs, v)
        return merge_heads(
            ops.reshape(attended, (batch_size, self.num_heads, -1, self.head_size)),
            self.hidden_size,
        )
