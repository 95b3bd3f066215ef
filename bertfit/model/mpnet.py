"""MPNet's layers (Song et al., 2020; Hugging Face's `MPNetModel`) for `BertEncoder`.

MPNet is BERT with RoBERTa's positions (the position table starts after the padding index, no
token types) whose attention adds a learned bias to the logits: one scalar per head and per
bucket of the distance from the query to the key (T5's buckets,
`model/relative_positions.py`). The bias table (`encoder/relative_attention_bias`, [buckets,
heads]) is the encoder's, shared by every layer, and the bias [1, heads, seq, seq] is looked up
once per call (`EncoderParts.context`), in float32.

Hugging Face's `MPNetEncoder.compute_position_bias` buckets the distances with its own defaults
(32 buckets, 128 the longest distance told apart) whatever the config's
`relative_attention_num_buckets` says, so these do the same: a table of more rows keeps its
extra ones unused, as there.
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops

from bertfit.errors import CheckpointError
from bertfit.model.blocks import (
    FamilyLayers,
    FamilyParts,
    SelfAttention,
    TransformerLayer,
    embedding,
    size,
)
from bertfit.model.config import BertConfig
from bertfit.model.inputs import WORD_IDS
from bertfit.model.layers import take
from bertfit.model.relative_positions import relative_position_buckets

BUCKETS = 32  # Hugging Face's `compute_position_bias(num_buckets=32)`
MAX_DISTANCE = 128  # `relative_position_bucket(max_distance=128)`


@dataclasses.dataclass(frozen=True)
class MPNetSettings:
    """MPNet's settings beyond `BertConfig`'s, stored in `BertConfig.variant` as a dict.

    Examples:
    >>> MPNetSettings().relative_attention_num_buckets
    32
    >>> MPNetSettings(relative_attention_num_buckets=16)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    bertfit.errors.CheckpointError: MPNet's relative_attention_num_buckets is 16; ...
    """

    relative_attention_num_buckets: int = 32  # the rows of the bias table

    def __post_init__(self):
        if self.relative_attention_num_buckets < BUCKETS:
            raise CheckpointError(
                f"MPNet's relative_attention_num_buckets is "
                f"{self.relative_attention_num_buckets}; its attention looks distances up in "
                f"{BUCKETS} buckets (as transformers' MPNetModel does), so the table needs at "
                "least that many rows. Check the checkpoint's config.json."
            )


@dataclasses.dataclass(frozen=True)
class Context:
    """The relative position bias of one call, [1, heads, seq, seq] in float32: an object, not
    a tensor, so that Keras does not cast it to the compute dtype on its way into a layer."""

    bias: object  # a tensor


class RelativeBiasAttention(SelfAttention):
    """BERT's attention with the per-call relative position bias added to its logits."""

    def score_bias(self, context: Context):
        return context.bias


class MPNetLayer(TransformerLayer):
    """BERT's post-LayerNorm layer with `RelativeBiasAttention`."""

    attention_class = RelativeBiasAttention


class EncoderParts(FamilyParts):
    """The relative attention bias table, shared by every layer; `context` looks up this
    call's bias."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(config, **kwargs)
        settings = MPNetSettings(**config.variant)
        self.num_heads = config.num_attention_heads
        self.relative_attention_bias = embedding(
            settings.relative_attention_num_buckets,
            config.num_attention_heads,
            config,
            "relative_attention_bias",
            self.dtype_policy,
        )

    def build(self, input_shape=None):
        self.relative_attention_bias.build((None,))
        self.built = True

    def context(self, inputs: dict, training=False) -> Context:
        positions = ops.arange(size(inputs[WORD_IDS], 1), dtype="int32")
        relative = positions[None, :] - positions[:, None]  # key - query
        buckets = relative_position_buckets(relative, BUCKETS, MAX_DISTANCE)
        table = ops.cast(self.relative_attention_bias.embeddings, "float32")
        bias = take(table, buckets, axis=0)  # [seq, seq, heads]
        return Context(ops.expand_dims(ops.transpose(bias, (2, 0, 1)), 0))

    def named_variables(self) -> dict[str, keras.Variable]:
        return {"encoder/relative_attention_bias": self.relative_attention_bias.embeddings}


LAYERS = FamilyLayers(MPNetLayer, parts=EncoderParts)
