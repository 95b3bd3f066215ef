"""The layers of GTE (Alibaba's gte-*-v1.5 and gte-multilingual; transformers' `GteModel`) and
NomicBERT (nomic-embed-text; `NomicBertModel`) for `BertEncoder`: BERT's post-LayerNorm layer
with a fused query/key/value projection, rotary position embeddings instead of a position
table (`model/rotary.py`) and a gated feed-forward (`model/gated_mlp.py`).

transformers derives both families' layers from one (`JinaEmbeddingsV3Layer`); they differ in
their settings (`RotaryGluSettings`, in `BertConfig.variant`): GTE's projections have biases
(but its gated ones), its up and gate projections are one matrix, its rotary base is 160,000 or
more, NTK-scaled in some checkpoints; NomicBERT's projections have no biases, its up and gate
are two matrices, its base is 1,000, and it may rotate part of each head only.

Each layer, on token rows: qkv (one matrix: all queries, then all keys, then all values) ->
queries and keys rotated by position -> softmax(q k^T / sqrt(head_size) + padding bias) v ->
output projection -> residual -> LayerNorm -> gated feed-forward -> residual -> LayerNorm. The
rotary angles are computed once per encoder call (`EncoderParts.context`); the embeddings are
BERT's without a position table.
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops

from bertfit.model.attention import AUTO, attend
from bertfit.model.blocks import (
    Dropout,
    FamilyLayers,
    FamilyParts,
    dense,
    dense_variables,
    layer_norm,
    norm_variables,
    per_example,
    size,
)
from bertfit.model.config import BertConfig
from bertfit.model.gated_mlp import LAYOUTS, UP_GATE, GatedFeedForward
from bertfit.model.inputs import WORD_IDS
from bertfit.model.rotary import Angles, angles, inverse_frequencies, rotate


@dataclasses.dataclass(frozen=True)
class RotaryGluSettings:
    """The settings of a rotary, gated layer beyond `BertConfig`'s, stored in
    `BertConfig.variant` as a dict. The defaults are GTE's.

    Examples:
    >>> RotaryGluSettings(rotary_fraction=0.5).rotary_dim(64)
    32
    """

    rope_theta: float = 160_000.0
    rotary_fraction: float = 1.0  # the share of each head that is rotated
    ntk_factor: float = 1.0  # > 1: fixed NTK-aware scaling of the rotary frequencies
    qkv_bias: bool = True
    attention_output_bias: bool = True
    mlp_layout: str = UP_GATE  # how the gate and up projections are stored (`gated_mlp`)
    mlp_input_bias: bool = False
    mlp_output_bias: bool = True
    mlp_dropout: float = 0.0  # on the gated states (GTE: hidden_dropout_prob)

    def __post_init__(self):
        if self.mlp_layout not in LAYOUTS:
            raise ValueError(f"mlp_layout {self.mlp_layout!r}: expected one of {LAYOUTS}.")

    def rotary_dim(self, head_size: int) -> int:
        """How many dimensions of each head are rotated (the first ones)."""
        return int(head_size * self.rotary_fraction)


def settings_of(config: BertConfig) -> RotaryGluSettings:
    return RotaryGluSettings(**config.variant)


class RotaryGluLayer(keras.layers.Layer):
    """One post-LayerNorm layer with rotary attention and a gated feed-forward."""

    supports_cls_only = True
    attention_implementation = AUTO  # `model/attention.py`

    def __init__(self, config: BertConfig, index: int = 0, **kwargs):
        super().__init__(**kwargs)
        settings = settings_of(config)
        dtype = self.dtype_policy
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        self.qkv = dense(3 * config.hidden_size, config, "qkv", dtype, use_bias=settings.qkv_bias)
        self.attention_output = dense(
            config.hidden_size,
            config,
            "attention_output",
            dtype,
            use_bias=settings.attention_output_bias,
        )
        self.attention_layer_norm = layer_norm(config, "attention_layer_norm", dtype)
        self.mlp = GatedFeedForward(
            config,
            layout=settings.mlp_layout,
            input_bias=settings.mlp_input_bias,
            output_bias=settings.mlp_output_bias,
            dropout=settings.mlp_dropout,
            name="mlp",
            dtype=dtype,
        )
        self.output_layer_norm = layer_norm(config, "output_layer_norm", dtype)
        self.probs_dropout = Dropout(config.attention_probs_dropout_prob, dtype=dtype)
        self.dropout = Dropout(config.hidden_dropout_prob, dtype=dtype)

    def build(self, input_shape=None):
        hidden = (None, self.hidden_size)
        for layer in (self.qkv, self.attention_output, self.attention_layer_norm, self.mlp):
            layer.build(hidden)
        self.output_layer_norm.build(hidden)
        self.built = True

    def call(self, x, attention_bias, training=False, cls_only=False, context=None):
        """`x`: [batch * seq, hidden], one row per token; `attention_bias` [batch, 1, 1, seq];
        `context`: the rotary `Angles` of this call. `cls_only`: compute each example's first
        token alone ([batch, hidden]), attending over every token as usual."""
        batch_size, length = size(attention_bias, 0), size(attention_bias, -1)
        qkv = ops.reshape(self.qkv(x), (batch_size, length, 3, self.num_heads, self.head_size))
        # q, k, v: [batch, heads, seq, head_size]
        q, k, v = ops.unstack(ops.transpose(qkv, (2, 0, 3, 1, 4)), num=3, axis=0)
        residual = x
        if cls_only:
            q = rotate(q[:, :, :1], context.first())
            residual = per_example(x, attention_bias)[:, 0]
        else:
            q = rotate(q, context)
        k = rotate(k, context)
        attended = attend(
            q,
            k,
            v,
            attention_bias,
            dropout=self.probs_dropout,
            training=training,
            implementation=self.attention_implementation,
        )
        attended = self.attention_output(attended)
        x = self.attention_layer_norm(residual + self.dropout(attended, training=training))
        feed_forward = self.mlp(x, training=training)
        return self.output_layer_norm(x + self.dropout(feed_forward, training=training))

    def named_variables(self) -> dict[str, keras.Variable]:
        """The layer's weights under their canonical names (below `layer_<i>/`)."""
        named = dense_variables("attention/qkv", self.qkv)
        named |= dense_variables("attention/output", self.attention_output)
        named |= norm_variables("attention/layer_norm", self.attention_layer_norm)
        named |= self.mlp.named_variables()
        named |= norm_variables("output/layer_norm", self.output_layer_norm)
        return named


class EncoderParts(FamilyParts):
    """No weights: the rotary angles of each call's sequence length, for every layer."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(config, **kwargs)
        settings = settings_of(config)
        self.inverse_frequencies = inverse_frequencies(
            settings.rotary_dim(config.head_size), settings.rope_theta, settings.ntk_factor
        )

    def context(self, inputs: dict, training=False) -> Angles:
        return angles(size(inputs[WORD_IDS], 1), self.inverse_frequencies)


LAYERS = FamilyLayers(RotaryGluLayer, parts=EncoderParts)
