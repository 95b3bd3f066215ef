"""EuroBERT's layers (Boizard et al., 2025; Hugging Face's `EuroBertModel`) for `BertEncoder`:
Llama's pre-norm layers attending both ways.

- embeddings: the token table alone (no position table, no token types, no norm: each layer
  normalises its input; `FamilyLayers.embedding_norm` off);
- each layer: RMSNorm (`model.norms`) -> grouped-query attention (`blocks.SelfAttention` with
  `num_key_value_heads` key/value heads) with rotary positions on the queries and keys
  (`model.rotary`, base `rope_theta`) -> output projection -> residual; then RMSNorm -> SwiGLU
  (`model.gated_mlp`: down(silu(gate(x)) * up(x))) -> residual;
- a final RMSNorm after the last layer (`EncoderParts.finish`).

The rotary angles are computed once per encoder call (`EncoderParts.context`); angles,
rotations, norms and the softmax run in float32 under a mixed dtype policy.
"""

from __future__ import annotations

import dataclasses

import keras

from bertfit.model.blocks import (
    FamilyLayers,
    FamilyParts,
    SelfAttention,
    dense,
    dense_variables,
    norm_variables,
    per_example,
    size,
)
from bertfit.model.config import BertConfig
from bertfit.model.gated_mlp import SPLIT, GatedFeedForward
from bertfit.model.inputs import WORD_IDS
from bertfit.model.norms import rms_norm
from bertfit.model.rotary import Angles, angles, inverse_frequencies, rotate


@dataclasses.dataclass(frozen=True)
class EuroBertSettings:
    """EuroBERT's settings beyond `BertConfig`'s, stored in `BertConfig.variant` as a dict.

    The activation is `BertConfig.hidden_act` (SiLU: SwiGLU), the norms' epsilon
    `layer_norm_eps` (Hugging Face's `rms_norm_eps`) and the attention's dropout
    `attention_probs_dropout_prob` (`attention_dropout`).
    """

    num_key_value_heads: int | None = None  # None: as many as the query heads
    rope_theta: float = 250_000.0
    attention_bias: bool = False
    mlp_bias: bool = False


def settings_of(config: BertConfig) -> EuroBertSettings:
    return EuroBertSettings(**config.variant)


class RotaryAttention(SelfAttention):
    """Self-attention with the queries and keys rotated by their positions (the queries of a
    first-token-only call take the first positions' angles)."""

    def position(self, q, k, context: Angles):
        length = size(q, 2)
        return rotate(q, Angles(context.cos[:length], context.sin[:length])), rotate(k, context)


class EuroBertLayer(keras.layers.Layer):
    """One pre-RMSNorm EuroBERT layer: attention, then SwiGLU, each added to its input."""

    supports_cls_only = True

    def __init__(self, config: BertConfig, index: int = 0, **kwargs):
        super().__init__(**kwargs)
        settings = settings_of(config)
        dtype = self.dtype_policy
        self.hidden_size = config.hidden_size
        self.attention_norm = rms_norm(config, "attention_layer_norm", dtype)
        self.attention = RotaryAttention(
            config,
            num_key_value_heads=settings.num_key_value_heads,
            use_bias=settings.attention_bias,
            name="attention",
            dtype=dtype,
        )
        self.attention_output = dense(
            config.hidden_size, config, "attention_output", dtype, use_bias=settings.attention_bias
        )
        self.mlp_norm = rms_norm(config, "mlp_layer_norm", dtype)
        self.mlp = GatedFeedForward(
            config,
            layout=SPLIT,
            input_bias=settings.mlp_bias,
            output_bias=settings.mlp_bias,
            name="mlp",
            dtype=dtype,
        )

    def build(self, input_shape=None):
        hidden = (None, self.hidden_size)
        for layer in (self.attention_norm, self.attention, self.attention_output, self.mlp_norm):
            layer.build(hidden)
        self.mlp.build()
        self.built = True

    def call(self, x, attention_bias, training=False, cls_only=False, context=None):
        """`x`: [batch * seq, hidden], one row per token; `context`: the rotary `Angles`.
        `cls_only`: each example's first token alone ([batch, hidden]), attending over every
        token as usual."""
        normed = self.attention_norm(x)
        queries, residual = normed, x
        if cls_only:
            queries = per_example(normed, attention_bias)[:, 0]
            residual = per_example(x, attention_bias)[:, 0]
        attended = self.attention(
            normed, attention_bias, training=training, queries=queries, context=context
        )
        x = residual + self.attention_output(attended)
        return x + self.mlp(self.mlp_norm(x), training=training)

    def named_variables(self) -> dict[str, keras.Variable]:
        """The layer's weights under their canonical names (below `layer_<i>/`): BERT's names
        for the attention, `mlp/gate`, `mlp/up` and `mlp/output` for the SwiGLU."""
        named = self.attention.named_variables()
        named |= dense_variables("attention/output", self.attention_output)
        named |= self.mlp.named_variables()
        named |= norm_variables("attention/layer_norm", self.attention_norm)
        named |= norm_variables("mlp/layer_norm", self.mlp_norm)
        return named


class EncoderParts(FamilyParts):
    """EuroBERT's parts outside its layers: the final RMSNorm, and per call the rotary angles."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(config, **kwargs)
        self.hidden_size = config.hidden_size
        self.inverse_frequencies = inverse_frequencies(
            config.head_size, settings_of(config).rope_theta
        )
        self.final_norm = rms_norm(config, "final_norm", self.dtype_policy)

    def build(self, input_shape=None):
        self.final_norm.build((None, self.hidden_size))
        self.built = True

    def context(self, inputs, training=False) -> Angles:
        return angles(size(inputs[WORD_IDS], 1), self.inverse_frequencies)

    def finish(self, x):
        return self.final_norm(x)

    def named_variables(self) -> dict[str, keras.Variable]:
        return norm_variables("encoder/final_norm", self.final_norm)


LAYERS = FamilyLayers(EuroBertLayer, parts=EncoderParts, embedding_norm=False)
