"""ModernBERT's layers (Warner et al., 2024; Hugging Face's `ModernBertModel`) for `BertEncoder`.

A pre-LayerNorm transformer without biases (by default) and without a position table:

- embeddings: the token table, LayerNorm, dropout (`BertEmbeddings` with no position or
  token-type table; its LayerNorm has no bias when `norm_bias` is off);
- each layer: `attn_norm` (none in layer 0) -> one fused query/key/value projection (`Wqkv`)
  -> rotary position embeddings on the queries and keys -> attention -> `Wo` -> residual; then
  `mlp_norm` -> `Wi` to twice the intermediate size, split into an input and a gate ->
  act(input) * gate (GeGLU) -> `Wo` -> residual;
- every `global_attn_every_n_layers`-th layer (0, n, 2n, ...) attends globally with rotary
  base `global_rope_theta`; the others attend within a sliding window, |i - j| <=
  local_attention // 2, with base `local_rope_theta`, computing only the band for long
  sequences (`model.local_attention`);
- `final_norm` after the last layer (`EncoderParts.finish`).

Rotary embeddings use the "rotate half" layout (`model.rotary`). The angles are computed once
per encoder call (`EncoderParts.context`) for the sequence's length, in float32, as are the
rotations, the attention softmax and the LayerNorms under a mixed dtype policy.
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
    feed_forward_activation,
    layer_norm,
    merge_heads,
    norm_variables,
    per_example,
    size,
)
from bertfit.model.config import BertConfig
from bertfit.model.inputs import POSITIONS, WORD_IDS
from bertfit.model.local_attention import banded_attention, uses_bands, window_bias
from bertfit.model.rotary import Angles, angles, inverse_frequencies, rotate


@dataclasses.dataclass(frozen=True)
class ModernBertSettings:
    """ModernBERT's settings beyond `BertConfig`'s, stored in `BertConfig.variant` as a dict.

    The activation is `BertConfig.hidden_act` (Hugging Face's `hidden_activation`), the norms'
    epsilon `BertConfig.layer_norm_eps` (`norm_eps`), the embeddings' dropout
    `hidden_dropout_prob` (`embedding_dropout`) and the attention's `attention_probs_dropout_prob`
    (`attention_dropout`).

    Examples:
    >>> settings = ModernBertSettings(local_attention=8, global_attn_every_n_layers=3)
    >>> [settings.is_global(i) for i in range(4)], settings.window
    ([True, False, False, True], 4)
    """

    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    local_attention: int = 128  # the sliding window's width: |i - j| <= local_attention // 2
    global_attn_every_n_layers: int = 3
    norm_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    classifier_pooling: str = "cls"  # the checkpoint's own classifier's pooling: "cls" or "mean"
    max_sequence_length: int = 8192  # Hugging Face's max_position_embeddings

    @property
    def window(self) -> int:
        """The largest distance |i - j| at which a local layer's token i attends to token j."""
        return self.local_attention // 2

    def is_global(self, index: int) -> bool:
        return index % self.global_attn_every_n_layers == 0


def settings_of(config: BertConfig) -> ModernBertSettings:
    return ModernBertSettings(**config.variant)


def _norm(config: BertConfig, name: str, dtype) -> keras.layers.Layer:
    """The family's layer norm: with a bias only when its settings' `norm_bias` says so."""
    return layer_norm(config, name, dtype, bias=settings_of(config).norm_bias)


@dataclasses.dataclass(frozen=True)
class Context:
    """What every layer of one encoder call shares, in float32: the rotary angles for the
    global and the local base, and the sliding window's
    attention bias [seq, seq] (0 within the window, -1e9 outside) when the local layers
    compute it densely (None without local layers, or when they compute only the band:
    `model.local_attention.uses_bands`). An object, not a dict of tensors, so that Keras does
    not cast them to the compute dtype on the way into a layer under a mixed policy."""

    global_rotary: Angles
    local_rotary: Angles
    window: object | None  # a tensor


class ModernBertLayer(keras.layers.Layer):
    """One pre-LayerNorm ModernBERT layer, global or sliding-window by its `index`."""

    supports_cls_only = True
    supports_packed_cls_only = False  # its cls_only computes each row's first token
    attention_implementation = AUTO  # `model/attention.py`; the band is computed as it is

    def __init__(self, config: BertConfig, index: int = 0, **kwargs):
        super().__init__(**kwargs)
        settings = settings_of(config)
        dtype = self.dtype_policy
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        self.is_global = settings.is_global(index)
        self.window = settings.window
        # Hugging Face's layer 0 has no attention norm: the embeddings' norm precedes it.
        self.attention_norm = None if index == 0 else _norm(config, "attention_layer_norm", dtype)
        self.qkv = dense(
            3 * config.hidden_size, config, "qkv", dtype, use_bias=settings.attention_bias
        )
        self.attention_output = dense(
            config.hidden_size, config, "attention_output", dtype, use_bias=settings.attention_bias
        )
        self.mlp_norm = _norm(config, "mlp_layer_norm", dtype)
        self.mlp_input = dense(
            2 * config.intermediate_size, config, "mlp_input", dtype, use_bias=settings.mlp_bias
        )
        self.mlp_output = dense(
            config.hidden_size, config, "mlp_output", dtype, use_bias=settings.mlp_bias
        )
        self.activation = feed_forward_activation(config.hidden_act)
        rate = config.attention_probs_dropout_prob
        self.probs_dropout = Dropout(rate, dtype=dtype)
        self.attention_dropout = Dropout(rate, dtype=dtype)
        self.mlp_dropout = Dropout(settings.mlp_dropout, dtype=dtype)

    def build(self, input_shape=None):
        hidden = (None, self.hidden_size)
        for layer in (self.qkv, self.attention_output, self.mlp_norm, self.mlp_input):
            layer.build(hidden)
        if self.attention_norm is not None:
            self.attention_norm.build(hidden)
        self.mlp_output.build((None, self.intermediate_size))
        self.built = True

    def call(self, x, attention_bias, training=False, cls_only=False, context=None):
        """`x`: [batch * seq, hidden], one row per token; `attention_bias` [batch, 1, 1, seq];
        `context`: `EncoderParts.context`'s `Context`. `cls_only`: compute each example's first
        token alone ([batch, hidden]), attending over every token as usual."""
        batch_size, length = size(attention_bias, 0), size(attention_bias, -1)
        normed = x if self.attention_norm is None else self.attention_norm(x)
        # Wqkv's outputs are [3, heads, head_size]: all queries, then all keys, then all values.
        qkv = ops.reshape(self.qkv(normed), (batch_size, length, 3, self.num_heads, self.head_size))
        # q, k, v: [batch, heads, seq, head_size]
        q, k, v = ops.unstack(ops.transpose(qkv, (2, 0, 3, 1, 4)), num=3, axis=0)
        rotary = context.global_rotary if self.is_global else context.local_rotary
        q = rotate(q[:, :, :1], rotary.first()) if cls_only else rotate(q, rotary)
        k = rotate(k, rotary)
        bias = ops.cast(attention_bias, "float32")
        if self.is_global:
            attended = self._dense_attention(q, k, v, bias, training)
        elif cls_only:  # the first token's window: the keys 0 to `window`
            near = slice(None, self.window + 1)
            attended = self._dense_attention(
                q, k[:, :, near], v[:, :, near], bias[..., near], training
            )
        elif context.window is None:  # only the band (`model.local_attention`)
            attended = banded_attention(
                q, k, v, bias, self.window, dropout=self.probs_dropout, training=training
            )
            attended = merge_heads(attended, self.hidden_size)
        else:
            attended = self._dense_attention(q, k, v, bias, training, window=context.window)
        residual = per_example(x, attention_bias)[:, 0] if cls_only else x
        attended = self.attention_output(attended)
        x = residual + self.attention_dropout(attended, training=training)
        hidden, gate = ops.split(self.mlp_input(self.mlp_norm(x)), 2, axis=-1)
        hidden = self.mlp_dropout(self.activation(hidden) * gate, training=training)
        return x + self.mlp_output(hidden)

    def _dense_attention(self, q, k, v, padding_bias, training, window=None):
        """softmax(q k^T / sqrt(head_size) + padding_bias + window) v as token rows, every
        score computed."""
        return attend(
            q,
            k,
            v,
            padding_bias,
            bias=window,
            dropout=self.probs_dropout,
            training=training,
            implementation=self.attention_implementation,
        )

    def named_variables(self) -> dict[str, keras.Variable]:
        """The layer's weights under their canonical names (below `layer_<i>/`)."""
        named = {}
        for name, layer in (
            ("attention/qkv", self.qkv),
            ("attention/output", self.attention_output),
            ("mlp/input", self.mlp_input),
            ("mlp/output", self.mlp_output),
        ):
            named |= dense_variables(name, layer)
        if self.attention_norm is not None:
            named |= norm_variables("attention/layer_norm", self.attention_norm)
        named |= norm_variables("mlp/layer_norm", self.mlp_norm)
        return named


class EncoderParts(FamilyParts):
    """ModernBERT's parts outside its layers: the final norm, and per call the rotary angles
    (global and local base) and the sliding window's attention bias."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(config, **kwargs)
        self.settings = settings_of(config)
        self.hidden_size = config.hidden_size
        self.has_local = any(
            not self.settings.is_global(i) for i in range(config.num_hidden_layers)
        )
        self.inverse_frequencies = {
            name: inverse_frequencies(config.head_size, theta)
            for name, theta in (
                ("global", self.settings.global_rope_theta),
                ("local", self.settings.local_rope_theta),
            )
        }
        self.final_norm = _norm(config, "final_norm", self.dtype_policy)

    def build(self, input_shape=None):
        self.final_norm.build((None, self.hidden_size))
        self.built = True

    def context(self, inputs, training=False) -> Context:
        """The rotary angles and the sliding window's bias for this call's sequence length
        (None when the local layers compute only the band). A packed batch's angles are its
        tokens' positions within their examples ([batch, 1, seq, head_size / 2]); its window
        stays a distance within the row, which within an example is the distance of their
        positions (and attention never leaves one), and is dense: the band takes a padding
        bias, not the packed batch's [batch, 1, seq, seq] one."""
        length = size(inputs[WORD_IDS], 1)
        positions = inputs.get(POSITIONS)
        rotary = {
            name: angles(length, inverse, positions)
            for name, inverse in self.inverse_frequencies.items()
        }
        window = None
        if self.has_local and (
            positions is not None or not uses_bands(length, self.settings.window)
        ):
            window = window_bias(length, self.settings.window)
        return Context(rotary["global"], rotary["local"], window)

    def finish(self, x):
        return self.final_norm(x)

    def named_variables(self) -> dict[str, keras.Variable]:
        return norm_variables("encoder/final_norm", self.final_norm)


LAYERS = FamilyLayers(
    ModernBertLayer,
    parts=EncoderParts,
    norm_bias=lambda config: settings_of(config).norm_bias,
    packs=lambda config: True,
)
