"""DeBERTa-v2/v3 layers for `BertEncoder` (`model_type` "deberta-v2"): disentangled attention.

He et al. (2021), "DeBERTa: Decoding-enhanced BERT with Disentangled Attention", and the v3
checkpoints (He et al., 2023), as Hugging Face's `DebertaV2Model` computes them. The embeddings
are BERT's (`BertEmbeddings`, usually without a position table and without token types); each
layer is BERT's post-LayerNorm layer whose attention scores add to the content term q_i . k_j

- content -> position (c2p): q_i . pk[d(i - j)], the query against the projected relative
  position embedding of the (bucketed) distance d from key j to query i,
- position -> content (p2c): k_j . pq[-d(j - i)], the key against the projected embedding of the
  opposite distance,

all divided by sqrt(head_size * (1 + number of terms)). Distances are bucketed: within
`position_buckets / 2` they are exact, beyond it logarithmic up to `max_relative_positions`, then
clamped to the table. The relative position table (`encoder/relative_embeddings`, optionally
LayerNorm-ed) is the encoder's, outside the layers (`EncoderParts`); with `share_att_key` the
layers project it with their own query and key weights, otherwise with their own position
projections. DeBERTa-v2's xlarge models add a convolution beside the first layer
(`conv_kernel_size`).

Both relative terms are computed for every (token, table row) pair as one matrix product, and the
[seq, seq] scores are then gathered out of it with indices that depend on the sequence length
only (`EncoderParts.context`), so shapes stay static under XLA.
"""

from __future__ import annotations

import dataclasses
import math

import keras
from keras import ops

from bertfit.errors import CheckpointError
from bertfit.model.attention import AUTO, attend
from bertfit.model.blocks import (
    Dropout,
    FamilyLayers,
    FamilyParts,
    dense,
    dense_variables,
    embedding,
    feed_forward_activation,
    layer_norm,
    norm_variables,
    per_example,
    size,
    split_heads,
)
from bertfit.model.config import ACTIVATIONS, BertConfig
from bertfit.model.inputs import WORD_IDS
from bertfit.model.layers import matmul_transposed, take

_TERMS = ("c2p", "p2c")


@dataclasses.dataclass(frozen=True)
class DebertaSettings:
    """DeBERTa's own hyper-parameters, stored in `BertConfig.variant` as a plain dict.

    The defaults are DeBERTa-v3's (`microsoft/deberta-v3-base`).

    Examples:
    >>> settings = DebertaSettings(pos_att_type=["p2c", "c2p"])
    >>> settings.span, settings.scale_factor
    (256, 3)
    >>> DebertaSettings(**settings.to_dict()) == settings
    True
    """

    relative_attention: bool = True
    position_buckets: int = 256  # <= 0: exact distances up to max_relative_positions
    max_relative_positions: int = 512  # the longest bucketed distance (never < 1)
    pos_att_type: tuple[str, ...] = _TERMS  # the relative terms: "c2p", "p2c"
    share_att_key: bool = True  # project positions with the content query/key weights
    norm_rel_ebd: bool = True  # LayerNorm over the relative position table
    conv_kernel_size: int = 0  # > 0: DeBERTa-v2's convolution beside the first layer
    conv_act: str = "tanh"

    def __post_init__(self):
        unknown = sorted(set(self.pos_att_type) - set(_TERMS))
        if unknown:
            raise CheckpointError(
                f"DeBERTa's pos_att_type {unknown} is not supported; bertfit computes the "
                "relative terms 'c2p' and 'p2c' (DeBERTa-v2/v3)."
            )
        # One spelling per set of terms, whatever the config file's order.
        terms = tuple(term for term in _TERMS if term in self.pos_att_type)
        object.__setattr__(self, "pos_att_type", terms)
        if self.max_relative_positions < 1:
            raise CheckpointError(
                f"DeBERTa's max_relative_positions is {self.max_relative_positions}; it must be "
                "at least 1 (read_config puts max_position_embeddings in place of -1)."
            )
        if self.conv_kernel_size > 0 and self.conv_kernel_size % 2 == 0:
            raise CheckpointError(
                f"DeBERTa's conv_kernel_size {self.conv_kernel_size} is even; bertfit supports "
                "odd kernel sizes, which keep the sequence length (every released model's is 3)."
            )
        if self.conv_kernel_size > 0 and self.conv_act not in ACTIVATIONS:
            raise CheckpointError(
                f"DeBERTa's conv_act {self.conv_act!r} is not supported; bertfit supports "
                f"{tuple(ACTIVATIONS)}."
            )

    @property
    def span(self) -> int:
        """Half the number of rows of the relative position table."""
        return self.position_buckets if self.position_buckets > 0 else self.max_relative_positions

    @property
    def scale_factor(self) -> int:
        """Scores are divided by sqrt(head_size * scale_factor): one per attention term."""
        return 1 + len(self.pos_att_type)

    def to_dict(self) -> dict:
        """A plain dict for `BertConfig.variant` (lists, not tuples: it round-trips JSON)."""
        return {**dataclasses.asdict(self), "pos_att_type": list(self.pos_att_type)}


def relative_buckets(distance, buckets: int, max_position: int):
    """DeBERTa's log-bucketed relative position of an int32 `distance` (query - key).

    Distances within `buckets // 2` are kept; larger ones become
    sign * (mid + ceil(log(|d| / mid) / log((max_position - 1) / mid) * (mid - 1))), computed in
    float32 as Hugging Face's `make_log_bucket_position` does. `buckets <= 0`: unchanged.

    Examples:
    >>> distance = ops.convert_to_tensor([-40, -3, 0, 4, 5, 63], "int32")
    >>> ops.convert_to_numpy(relative_buckets(distance, 8, 64)).tolist()
    [-7, -3, 0, 4, 5, 7]
    """
    if buckets <= 0:
        return distance
    mid = buckets // 2
    sign = ops.sign(distance)
    magnitude = ops.where((distance < mid) & (distance > -mid), mid - 1, ops.abs(distance))
    # Both logarithms in float32, as Hugging Face's (a float64 one could move a bucket edge).
    log_ratio = ops.log(ops.cast(magnitude, "float32") / mid) / ops.log(
        ops.convert_to_tensor((max_position - 1) / mid, "float32")
    )
    log_position = ops.cast(ops.ceil(log_ratio * (mid - 1)) + mid, "int32")
    return ops.where(magnitude <= mid, distance, log_position * sign)


class EncoderParts(FamilyParts):
    """The relative position table and its LayerNorm, shared by every layer; `context` hands
    the layers the (normalised) table and the gather indices for this sequence length."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(config, **kwargs)
        self.settings = DebertaSettings(**config.variant)
        self.hidden_size = config.hidden_size
        relative = self.settings.relative_attention
        self.relative_embeddings = (
            embedding(
                2 * self.settings.span,
                config.hidden_size,
                config,
                "relative_embeddings",
                self.dtype_policy,
            )
            if relative
            else None
        )
        self.relative_layer_norm = (
            layer_norm(config, "relative_layer_norm", self.dtype_policy)
            if relative and self.settings.norm_rel_ebd
            else None
        )

    def build(self, input_shape=None):
        if self.relative_embeddings is not None:
            self.relative_embeddings.build((None,))
        if self.relative_layer_norm is not None:
            self.relative_layer_norm.build((None, self.hidden_size))
        self.built = True

    def context(self, inputs: dict, training=False) -> dict:
        """`relative_embeddings` [2 * span, hidden] in the compute dtype, and `c2p_index` /
        `p2c_index` [seq, seq]: where score (i, j) of each term lies in its [seq * 2 * span]
        row of (token, table row) products."""
        if self.relative_embeddings is None:
            return {}
        settings = self.settings
        positions = ops.arange(size(inputs[WORD_IDS], 1), dtype="int32")
        distance = positions[:, None] - positions[None, :]  # query - key
        buckets = relative_buckets(
            distance, settings.position_buckets, settings.max_relative_positions
        )
        width = 2 * settings.span
        # c2p (i, j): query i against table row d(i, j); p2c (i, j): key j against -d(j, i).
        c2p = ops.clip(buckets + settings.span, 0, width - 1)
        p2c = ops.clip(settings.span - ops.transpose(buckets), 0, width - 1)
        table = self.relative_embeddings.embeddings
        if self.relative_layer_norm is not None:
            table = self.relative_layer_norm(table)
        return {
            "relative_embeddings": ops.cast(table, self.compute_dtype),
            "c2p_index": c2p + positions[:, None] * width,
            "p2c_index": p2c + positions[None, :] * width,
        }

    def named_variables(self) -> dict[str, keras.Variable]:
        named = {}
        if self.relative_embeddings is not None:
            named["encoder/relative_embeddings"] = self.relative_embeddings.embeddings
        if self.relative_layer_norm is not None:
            named |= norm_variables("encoder/relative_layer_norm", self.relative_layer_norm)
        return named


class DebertaLayer(keras.layers.Layer):
    """One DeBERTa layer: disentangled self-attention, add & norm, feed-forward, add & norm
    (and, in the first layer of a model with `conv_kernel_size`, the convolution's add & norm).
    Softmax and LayerNorm run in float32 under a mixed policy."""

    supports_cls_only = False
    attention_implementation = AUTO  # `model/attention.py`

    def __init__(self, config: BertConfig, index: int = 0, **kwargs):
        super().__init__(**kwargs)
        settings = self.settings = DebertaSettings(**config.variant)
        dtype = self.dtype_policy
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        self.query = dense(config.hidden_size, config, "query", dtype)
        self.key = dense(config.hidden_size, config, "key", dtype)
        self.value = dense(config.hidden_size, config, "value", dtype)
        terms = settings.pos_att_type if settings.relative_attention else ()
        self.c2p = "c2p" in terms
        self.p2c = "p2c" in terms
        separate = not settings.share_att_key
        self.position_key = (
            dense(config.hidden_size, config, "position_key", dtype)
            if separate and self.c2p
            else None
        )
        self.position_query = (
            dense(config.hidden_size, config, "position_query", dtype)
            if separate and self.p2c
            else None
        )
        self.position_dropout = Dropout(config.hidden_dropout_prob, dtype=dtype)
        self.attention_dropout = Dropout(config.attention_probs_dropout_prob, dtype=dtype)
        self.inverse_scale = 1.0 / math.sqrt(self.head_size * settings.scale_factor)
        self.attention_output = dense(config.hidden_size, config, "attention_output", dtype)
        self.attention_layer_norm = layer_norm(config, "attention_layer_norm", dtype)
        self.intermediate = dense(
            config.intermediate_size,
            config,
            "intermediate",
            dtype,
            feed_forward_activation(config.hidden_act),
        )
        self.output_dense = dense(config.hidden_size, config, "output", dtype)
        self.output_layer_norm = layer_norm(config, "output_layer_norm", dtype)
        self.dropout = Dropout(config.hidden_dropout_prob, dtype=dtype)
        self.conv = self.conv_layer_norm = None
        if index == 0 and settings.conv_kernel_size > 0:
            self.conv = keras.layers.Conv1D(
                config.hidden_size,
                settings.conv_kernel_size,
                padding="same",
                name="conv",
                dtype=dtype,
                kernel_initializer=keras.initializers.TruncatedNormal(
                    stddev=config.initializer_range
                ),
            )
            self.conv_activation = feed_forward_activation(settings.conv_act)
            self.conv_layer_norm = layer_norm(config, "conv_layer_norm", dtype)

    def build(self, input_shape=None):
        hidden = (None, self.hidden_size)
        for layer in (self.query, self.key, self.value, self.position_key, self.position_query):
            if layer is not None:
                layer.build(hidden)
        self.attention_output.build(hidden)
        self.attention_layer_norm.build(hidden)
        self.intermediate.build(hidden)
        self.output_dense.build((None, self.intermediate_size))
        self.output_layer_norm.build(hidden)
        if self.conv is not None:
            self.conv.build((None, None, self.hidden_size))
            self.conv_layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def _heads(self, rows, batch_size):
        return split_heads(rows, batch_size, self.num_heads, self.head_size)

    def _table_heads(self, rows):
        """Table rows [2 * span, hidden] as [heads, 2 * span, head_size]."""
        per_head = ops.reshape(rows, (-1, self.num_heads, self.head_size))
        return ops.transpose(per_head, (1, 0, 2))

    @staticmethod
    def _relative_scores(content, table, index):
        """[batch, heads, seq, seq] scores out of `content` [batch, heads, seq, head_size]
        times `table` [heads, 2 * span, head_size]: entry (i, j) is item index[i, j] of the
        flattened [seq * 2 * span] products of each (batch, head)."""
        products = matmul_transposed(content, table)  # [b, h, seq, 2 * span]
        flat = ops.reshape(products, (size(content, 0), size(content, 1), -1))
        return take(flat, index, axis=2)

    def _attention(self, x, attention_bias, context, training):
        batch_size = size(attention_bias, 0)
        q = self._heads(self.query(x), batch_size)
        k = self._heads(self.key(x), batch_size)
        v = self._heads(self.value(x), batch_size)
        relative = None  # the disentangled scores, a bias on the content's
        if self.c2p or self.p2c:
            table = self.position_dropout(context["relative_embeddings"], training=training)
            relative = 0.0
            if self.c2p:  # queries against the positions as keys
                keys = self._table_heads((self.position_key or self.key)(table))
                c2p = self._relative_scores(q, keys, context["c2p_index"])
                relative += ops.cast(c2p, "float32")
            if self.p2c:  # keys against the positions as queries
                queries = self._table_heads((self.position_query or self.query)(table))
                p2c = self._relative_scores(k, queries, context["p2c_index"])
                relative += ops.cast(p2c, "float32")
            relative *= self.inverse_scale
        return attend(
            q,
            k,
            v,
            attention_bias,
            bias=relative,
            scale=self.inverse_scale,
            dropout=self.attention_dropout,
            training=training,
            implementation=self.attention_implementation,
        )

    def _convolve(self, inputs, outputs, attention_bias, training):
        """DeBERTa-v2's first-layer convolution: LayerNorm(outputs + act(conv(inputs))), with
        the padding positions zeroed before and after (as Hugging Face's `ConvLayer`)."""
        mask = ops.expand_dims(ops.cast(attention_bias[:, 0, 0, :] > -1.0, inputs.dtype), -1)
        sequence = per_example(inputs, attention_bias) * mask
        convolved = self.conv(sequence) * mask
        convolved = self.conv_activation(self.dropout(convolved, training=training))
        residual = per_example(outputs, attention_bias)
        normed = self.conv_layer_norm(residual + convolved) * mask
        return ops.reshape(normed, (-1, self.hidden_size))

    def call(self, x, attention_bias, training=False, cls_only=False, context=None):
        """`x`: [batch * seq, hidden], one row per token; `context`: `EncoderParts.context`."""
        if cls_only:
            raise ValueError("DebertaLayer computes every token (supports_cls_only is False).")
        attended = self.attention_output(self._attention(x, attention_bias, context, training))
        hidden = self.attention_layer_norm(x + self.dropout(attended, training=training))
        feed_forward = self.output_dense(self.intermediate(hidden))
        outputs = self.output_layer_norm(hidden + self.dropout(feed_forward, training=training))
        if self.conv is not None:
            outputs = self._convolve(x, outputs, attention_bias, training)
        return outputs

    def named_variables(self) -> dict[str, keras.Variable]:
        """The layer's weights under their canonical names (below `layer_<i>/`); BERT's names
        where the weight is BERT's."""
        named = {}
        for name, layer in (
            ("attention/query", self.query),
            ("attention/key", self.key),
            ("attention/value", self.value),
            ("attention/position_key", self.position_key),
            ("attention/position_query", self.position_query),
            ("attention/output", self.attention_output),
            ("intermediate", self.intermediate),
            ("output", self.output_dense),
            ("conv", self.conv),
        ):
            if layer is not None:
                named |= dense_variables(name, layer)
        named |= norm_variables("attention/layer_norm", self.attention_layer_norm)
        named |= norm_variables("output/layer_norm", self.output_layer_norm)
        if self.conv_layer_norm is not None:
            named |= norm_variables("conv/layer_norm", self.conv_layer_norm)
        return named


# Packed rows: the relative positions are distances within the row, equal to those within an
# example; DeBERTa-v2's convolution would run across the examples of a row.
LAYERS = FamilyLayers(
    DebertaLayer,
    parts=EncoderParts,
    packs=lambda config: DebertaSettings(**config.variant).conv_kernel_size == 0,
)
