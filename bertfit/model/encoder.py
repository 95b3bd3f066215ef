"""`BertEncoder`: the one encoder every checkpoint format and family loads into.

Post-LayerNorm transformer as in Devlin et al. (2018) and Hugging Face's `BertModel`; the
families' differences are switches of `BertConfig` (factorised embeddings, position offsets, no
token types, shared layers, no pooler) or, for DeBERTa-v3 and ModernBERT, their own layer class
(`VARIANT_LAYERS`). Under a mixed
dtype policy the matrix work runs in the compute dtype while LayerNorm and the attention softmax run
in float32.

Between the embeddings and the outputs the hidden states are one row per token, [batch * seq,
hidden], and only attention views them per example. Keras' Dense multiplies a 3-D input through
`tf.tensordot`, whose shape arithmetic (and its gradient's) was a quarter of the training graph's
ops; on rows it is one matrix product.
"""

from __future__ import annotations

import functools
import importlib
import math

import keras
import tensorflow as tf

from bertfit.errors import InputFormatError
from bertfit.model.config import ACTIVATIONS, BertConfig
from bertfit.model.inputs import MASK, TYPE_IDS, WORD_IDS, normalize_inputs
from bertfit.model.layers import Dropout, LayerNorm, gelu, gelu_tanh


def activation(name: str):
    """The function a checkpoint's `hidden_act` names (see `model.config.ACTIVATIONS`).

    Examples:
    >>> round(float(activation("gelu_new")(tf.constant(1.0))), 4)  # GELU's tanh approximation
    0.8412
    """
    function, arguments = ACTIVATIONS[name]
    return functools.partial(getattr(keras.activations, function), **arguments)


TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")


def _feed_forward_activation(name: str):
    """`activation(name)`, with the GELUs as `layers.gelu` (erf form) and `layers.gelu_tanh`
    (tanh form), their gradients written out."""
    if name == "gelu":
        return gelu
    return gelu_tanh if name in TANH_GELUS else activation(name)


def _dense(units: int, config: BertConfig, name: str, dtype, activation=None) -> keras.layers.Dense:
    return keras.layers.Dense(
        units,
        activation=activation,
        name=name,
        dtype=dtype,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range),
    )


def _embedding(
    rows: int, width: int, config: BertConfig, name: str, dtype
) -> keras.layers.Embedding:
    return keras.layers.Embedding(
        rows,
        width,
        embeddings_initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range),
        name=name,
        dtype=dtype,
    )


def _layer_norm(config: BertConfig, name: str, dtype) -> LayerNorm:
    # Computed in float32 whatever the compute dtype, as Keras' LayerNormalization. ModernBERT's
    # norms have no bias unless its settings' `norm_bias` says so.
    center = config.variant.get("norm_bias", True)
    return LayerNorm(epsilon=config.layer_norm_eps, center=center, name=name, dtype=dtype)


class BertEmbeddings(keras.layers.Layer):
    """Word + position + token-type embeddings, then LayerNorm and dropout, then (factorised
    embeddings: ALBERT, ELECTRA) a projection to the hidden size. Returns one row per token,
    [batch * seq, hidden].

    A family without a position table (`absolute_positions=False`) or without token types
    (`type_vocab_size=0`) leaves that table out; RoBERTa's positions start at
    `position_offset`."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        dtype = self.dtype_policy
        width = config.embedding_width
        self.word_embeddings = _embedding(
            config.vocab_size, width, config, "word_embeddings", dtype
        )
        self.position_embeddings = (
            _embedding(config.max_position_embeddings, width, config, "position_embeddings", dtype)
            if config.absolute_positions
            else None
        )
        self.token_type_embeddings = (
            _embedding(config.type_vocab_size, width, config, "token_type_embeddings", dtype)
            if config.type_vocab_size
            else None
        )
        self.layer_norm = _layer_norm(config, "layer_norm", self.dtype_policy)
        self.dropout = Dropout(config.hidden_dropout_prob, dtype=self.dtype_policy)
        self.projection = (
            _dense(config.hidden_size, config, "projection", dtype)
            if width != config.hidden_size
            else None
        )
        self.width = width
        self.position_offset = config.position_offset
        self.max_length = config.max_sequence_length

    def _tables(self) -> list[keras.layers.Embedding]:
        tables = (self.word_embeddings, self.position_embeddings, self.token_type_embeddings)
        return [table for table in tables if table is not None]

    def build(self, input_shape=None):
        for layer in self._tables():
            layer.build((None, None))
        self.layer_norm.build((None, None, self.width))
        if self.projection is not None:
            self.projection.build((None, self.width))
        self.built = True

    def call(self, word_ids, type_ids, training=False):
        length = word_ids.shape[1]
        if length is not None and self.max_length is not None and length > self.max_length:
            raise InputFormatError(
                f"The inputs are {length} tokens long but this encoder has {self.max_length} "
                f"positions (its position table, or the longest input it was trained for); "
                f"pack them to at most {self.max_length} tokens (max_seq_length)."
            )
        x = self.word_embeddings(word_ids)
        if self.position_embeddings is not None:
            # A slice, not a gather of position ids: XLA clamps an out-of-range gather index
            # and would return wrong numbers silently; a slice past the table fails the
            # addition below.
            start = self.position_offset
            positions = self.position_embeddings.embeddings[start : start + tf.shape(word_ids)[1]]
            x += tf.cast(positions, self.compute_dtype)[tf.newaxis]
        if self.token_type_embeddings is not None:
            x += self.token_type_embeddings(type_ids)
        rows = tf.reshape(self.dropout(self.layer_norm(x), training=training), [-1, self.width])
        return rows if self.projection is None else self.projection(rows)

    def named_variables(self) -> dict[str, keras.Variable]:
        named = {f"{table.name}": table.embeddings for table in self._tables()}
        named |= _norm_variables("layer_norm", self.layer_norm)
        if self.projection is not None:
            named |= _dense_variables("projection", self.projection)
        return named


def _norm_variables(name: str, norm) -> dict[str, keras.Variable]:
    named = {f"{name}/gamma": norm.gamma}
    if norm.beta is not None:
        named[f"{name}/beta"] = norm.beta
    return named


def _dense_variables(name: str, dense) -> dict[str, keras.Variable]:
    named = {f"{name}/kernel": dense.kernel}
    if dense.bias is not None:
        named[f"{name}/bias"] = dense.bias
    return named


class SelfAttention(keras.layers.Layer):
    """Multi-head self-attention with an additive padding mask; softmax in float32."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = config.num_attention_heads
        self.head_size = config.head_size
        self.hidden_size = config.hidden_size
        self.query = _dense(config.hidden_size, config, "query", self.dtype_policy)
        self.key = _dense(config.hidden_size, config, "key", self.dtype_policy)
        self.value = _dense(config.hidden_size, config, "value", self.dtype_policy)
        self.dropout = Dropout(config.attention_probs_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        for layer in (self.query, self.key, self.value):
            layer.build((None, self.hidden_size))
        self.built = True

    def _heads(self, rows, batch_size):
        """Token rows [batch * seq, hidden] as [batch, heads, seq, head_size]."""
        per_head = tf.reshape(rows, [batch_size, -1, self.num_heads, self.head_size])
        return tf.transpose(per_head, [0, 2, 1, 3])

    def call(self, x, attention_bias, training=False, queries=None):
        """`x`: the token rows [batch * seq, hidden]. `queries`: the rows that attend, the
        same number per example (default: all of `x`); keys and values are always every row
        of `x`. Returns one row per query."""
        queries = x if queries is None else queries
        batch_size = _size(attention_bias, 0)
        # Batched matrix products on [batch, heads, seq, head_size]: tf.einsum transposes the
        # same way inside, yet a training or inference step took ~4% longer with it (2-core CPU).
        q = self._heads(self.query(queries), batch_size)
        k = self._heads(self.key(x), batch_size)
        v = self._heads(self.value(x), batch_size)
        scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(self.head_size))
        # Keras casts float arguments to the compute dtype; the bias is 0 or -1e9, so that is exact
        # enough, and the softmax itself runs in float32.
        logits = tf.cast(scores, tf.float32) + tf.cast(attention_bias, tf.float32)
        probs = tf.nn.softmax(logits, axis=-1)
        probs = self.dropout(tf.cast(probs, x.dtype), training=training)
        context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])  # [batch, seq, heads, size]
        return tf.reshape(context, [-1, self.hidden_size])


def _size(tensor, axis: int):
    """The size of `tensor` along `axis`: a Python int when static (XLA's shapes), else a
    scalar tensor."""
    return tensor.shape[axis] or tf.shape(tensor)[axis]


def _per_example(rows, attention_bias):
    """The token rows [batch * seq, hidden] as [batch, seq, hidden], seq taken from the
    [batch, 1, 1, seq] attention bias."""
    return tf.reshape(rows, [-1, _size(attention_bias, -1), rows.shape[-1]])


class TransformerLayer(keras.layers.Layer):
    """One post-LayerNorm BERT layer: attention, add & norm, feed-forward, add & norm."""

    def __init__(self, config: BertConfig, index: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.attention = SelfAttention(config, name="attention", dtype=self.dtype_policy)
        self.attention_output = _dense(
            config.hidden_size, config, "attention_output", self.dtype_policy
        )
        self.attention_layer_norm = _layer_norm(config, "attention_layer_norm", self.dtype_policy)
        self.intermediate = _dense(
            config.intermediate_size,
            config,
            "intermediate",
            self.dtype_policy,
            _feed_forward_activation(config.hidden_act),
        )
        self.output_dense = _dense(config.hidden_size, config, "output", self.dtype_policy)
        self.output_layer_norm = _layer_norm(config, "output_layer_norm", self.dtype_policy)
        self.dropout = Dropout(config.hidden_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        hidden = (None, self.hidden_size)
        self.attention.build(hidden)
        self.attention_output.build(hidden)
        self.attention_layer_norm.build(hidden)
        self.intermediate.build(hidden)
        self.output_dense.build((None, self.intermediate_size))
        self.output_layer_norm.build(hidden)
        self.built = True

    def call(self, x, attention_bias, training=False, cls_only=False, context=None):
        """`x`: [batch * seq, hidden], one row per token. `cls_only`: compute the output at
        each example's first token alone ([batch, hidden]), attending over every token as
        usual: the same numbers as those rows of the full output, for less work."""
        queries = _per_example(x, attention_bias)[:, 0] if cls_only else x
        attended = self.attention(x, attention_bias, training=training, queries=queries)
        attended = self.attention_output(attended)
        x = self.attention_layer_norm(queries + self.dropout(attended, training=training))
        feed_forward = self.output_dense(self.intermediate(x))
        return self.output_layer_norm(x + self.dropout(feed_forward, training=training))

    supports_cls_only = True

    def named_variables(self) -> dict[str, keras.Variable]:
        """The layer's weights under their canonical names (below `layer_<i>/`)."""
        named = {}
        for name, dense in (
            ("attention/query", self.attention.query),
            ("attention/key", self.attention.key),
            ("attention/value", self.attention.value),
            ("attention/output", self.attention_output),
            ("intermediate", self.intermediate),
            ("output", self.output_dense),
        ):
            named |= _dense_variables(name, dense)
        named |= _norm_variables("attention/layer_norm", self.attention_layer_norm)
        named |= _norm_variables("output/layer_norm", self.output_layer_norm)
        return named


def _transformer_layers(config: BertConfig, dtype) -> list[keras.layers.Layer]:
    """The encoder's layers: the family's layer class (BERT's post-LayerNorm layer unless
    `config.variant` names another), one per layer, or one shared by all (ALBERT)."""
    layer_class = TransformerLayer
    if config.model_type in VARIANT_LAYERS:
        module, name = VARIANT_LAYERS[config.model_type]
        layer_class = getattr(importlib.import_module(module), name)
    if config.share_layers:
        shared = layer_class(config, name="layer_0", dtype=dtype)
        return [shared] * config.num_hidden_layers
    return [
        layer_class(config, name=f"layer_{i}", dtype=dtype, index=i)
        for i in range(config.num_hidden_layers)
    ]


# Families whose layers differ from BERT's: model_type -> (module, layer class). Such a layer
# class takes `(config, name=, dtype=, index=)`, is called as `layer(x, attention_bias,
# training=, context=)` on token rows and has `named_variables()`; its module may define an
# `EncoderParts` layer (see `BertEncoder`) for weights outside the layers.
VARIANT_LAYERS = {
    "deberta-v2": ("bertfit.model.deberta", "DebertaLayer"),
    "modernbert": ("bertfit.model.modernbert", "ModernBertLayer"),
}


def _encoder_parts(config: BertConfig, dtype) -> keras.layers.Layer | None:
    """A family's weights outside its layers (DeBERTa's relative position table, ModernBERT's
    final norm), as its module's `EncoderParts(config)` layer; None for BERT's families."""
    if config.model_type not in VARIANT_LAYERS:
        return None
    module = importlib.import_module(VARIANT_LAYERS[config.model_type][0])
    parts = getattr(module, "EncoderParts", None)
    return None if parts is None else parts(config, name="encoder_parts", dtype=dtype)


@keras.saving.register_keras_serializable(package="bertfit")
class BertEncoder(keras.layers.Layer):
    """An encoder of any supported family (see `BertConfig`): token ids in, contextual vectors
    out.

    Args:
        config: the architecture (`BertConfig`).
        random_init: False starts the weights at zero (all but the pooler's), for an encoder
            whose weights are loaded next.
        dtype: a Keras dtype policy name such as "float32" or "mixed_bfloat16".

    Call it with a dict of `input_word_ids`, `input_mask` and `input_type_ids` (int32,
    [batch, seq]; HF and KerasHub names work too). It returns TF Hub's BERT output dict:
    `sequence_output` [batch, seq, hidden], `pooled_output` [batch, hidden] (families with a
    pooler), `default` [batch, hidden] (TF Hub's name for the whole input's vector:
    `pooled_output`, or the first token's output for families without a pooler) and
    `encoder_outputs`, one [batch, seq, hidden] tensor per layer. With `pooled_only=True` it
    returns `pooled_output` alone, the family's vector for the whole input (the pooler's output,
    or the first token's for families without a pooler), and computes the last layer at the
    first token only where the layer allows (the other positions of the last layer do not reach
    it): the same numbers for about a sixth less work in a 6-layer model.

    Examples:
    >>> config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
    ...                     num_attention_heads=2, intermediate_size=64)
    >>> encoder = BertEncoder(config)
    >>> outputs = encoder({"input_word_ids": [[2, 7, 3]], "input_mask": [[1, 1, 1]],
    ...                    "input_type_ids": [[0, 0, 0]]})
    >>> outputs["pooled_output"].shape
    TensorShape([1, 32])
    """

    def __init__(self, config: BertConfig, random_init: bool = True, **kwargs):
        kwargs.setdefault("name", "bert_encoder")
        super().__init__(**kwargs)
        self.config = config
        self.embeddings = BertEmbeddings(config, name="embeddings", dtype=self.dtype_policy)
        self.transformer_layers = _transformer_layers(config, self.dtype_policy)
        self.parts = _encoder_parts(config, self.dtype_policy)
        self.pooler = (
            _dense(config.hidden_size, config, "pooler", self.dtype_policy, activation="tanh")
            if config.has_pooler
            else None
        )
        if not random_init:
            self._start_at_zero()
        self.build()

    def _start_at_zero(self) -> None:
        """Zeros for every weight but the pooler's (which a checkpoint may lack), for weights
        a checkpoint is about to overwrite: drawing MiniLM's 22M random values takes ~0.6 s
        of a 2-core CPU on every load."""
        zeros = keras.initializers.Zeros()
        for layer in self._flatten_layers(include_self=False):
            if layer is self.pooler:
                continue
            for attribute in ("kernel_initializer", "embeddings_initializer"):
                if hasattr(layer, attribute):
                    setattr(layer, attribute, zeros)

    def build(self, input_shape=None):
        self.embeddings.build()
        for layer in self.transformer_layers:
            if not layer.built:  # ALBERT's shared layer appears in every place
                layer.build()
        if self.parts is not None:
            self.parts.build()
        if self.pooler is not None:
            self.pooler.build((None, self.config.hidden_size))
        self.built = True

    @property
    def input_dtype(self):
        """Token ids, not the compute dtype: Keras converts and traces inputs as int32."""
        return "int32"

    def __call__(self, inputs, training=False, **kwargs):
        return super().__call__(normalize_inputs(inputs), training=training, **kwargs)

    def call(self, inputs, training=False, pooled_only=False):
        mask = tf.cast(inputs[MASK], tf.float32)
        # [batch, 1, 1, seq]: 0 where attended, a large negative where padded. expand_dims, not
        # [:, newaxis, newaxis, :]: LiteRT has no builtin for a new-axis slice of a tensor whose
        # length is known only at run time (the LiteRT export pads to the batch's bucket).
        attention_bias = (1.0 - tf.expand_dims(tf.expand_dims(mask, 1), 1)) * -1e9
        x = self.embeddings(inputs[WORD_IDS], inputs[TYPE_IDS], training=training)
        context = None if self.parts is None else self.parts.context(inputs, training=training)
        encoder_outputs = []
        last = len(self.transformer_layers) - 1
        for i, layer in enumerate(self.transformer_layers):
            cls_only = pooled_only and i == last and layer.supports_cls_only
            x = layer(x, attention_bias, training=training, cls_only=cls_only, context=context)
            encoder_outputs.append(x)
        if self.parts is not None:
            x = encoder_outputs[-1] = self.parts.finish(x)
        if pooled_only:
            if not cls_only:  # the last layer computed every row
                x = _per_example(x, attention_bias)[:, 0]
            return {"pooled_output": self.pool(x)}
        encoder_outputs = [_per_example(rows, attention_bias) for rows in encoder_outputs]
        outputs = {"sequence_output": encoder_outputs[-1], "encoder_outputs": encoder_outputs}
        outputs["default"] = self.pool(encoder_outputs[-1][:, 0])  # TF Hub's whole-input output
        if self.pooler is not None:
            outputs["pooled_output"] = outputs["default"]
        return outputs

    def pool(self, first_tokens: tf.Tensor) -> tf.Tensor:
        """The family's vector for a whole input from its first token's output: BERT's
        dense+tanh pooler, or the first token itself for families without a pooler."""
        return first_tokens if self.pooler is None else self.pooler(first_tokens)

    def named_variables(self) -> dict[str, keras.Variable]:
        """Every weight under its canonical bertfit name (the keys of the name tables in
        `checkpoints.families`); a shared layer (ALBERT) is named once, as `layer_0`."""
        named = {f"embeddings/{k}": v for k, v in self.embeddings.named_variables().items()}
        layers = (
            self.transformer_layers[:1] if self.config.share_layers else self.transformer_layers
        )
        for i, layer in enumerate(layers):
            named |= {f"layer_{i}/{k}": v for k, v in layer.named_variables().items()}
        if self.parts is not None:
            named |= self.parts.named_variables()
        if self.pooler is not None:
            named |= _dense_variables("pooler", self.pooler)
        return named

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(BertConfig(**config.pop("config")), **config)
