"""`BertEncoder`: the one BERT implementation every checkpoint format loads into.

Post-LayerNorm transformer as in Devlin et al. (2018) and Hugging Face's `BertModel`. Under a mixed
dtype policy the matrix work runs in the compute dtype while LayerNorm and the attention softmax run
in float32.

Between the embeddings and the outputs the hidden states are one row per token, [batch * seq,
hidden], and only attention views them per example. Keras' Dense multiplies a 3-D input through
`tf.tensordot`, whose shape arithmetic (and its gradient's) was a quarter of the training graph's
ops; on rows it is one matrix product.
"""

from __future__ import annotations

import functools
import math

import keras
import tensorflow as tf

from bertfit.errors import InputFormatError
from bertfit.model.config import ACTIVATIONS, BertConfig
from bertfit.model.inputs import MASK, TYPE_IDS, WORD_IDS, normalize_inputs
from bertfit.model.layers import Dropout, LayerNorm, gelu


def activation(name: str):
    """The function a checkpoint's `hidden_act` names (see `model.config.ACTIVATIONS`).

    Examples:
    >>> round(float(activation("gelu_new")(tf.constant(1.0))), 4)  # GELU's tanh approximation
    0.8412
    """
    function, arguments = ACTIVATIONS[name]
    return functools.partial(getattr(keras.activations, function), **arguments)


def _feed_forward_activation(name: str):
    """`activation(name)`, with the exact GELU as `layers.gelu` (erf form, gradient written out)."""
    return gelu if name == "gelu" else activation(name)


def _dense(units: int, config: BertConfig, name: str, dtype, activation=None) -> keras.layers.Dense:
    return keras.layers.Dense(
        units,
        activation=activation,
        name=name,
        dtype=dtype,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range),
    )


def _embedding(rows: int, config: BertConfig, name: str, dtype) -> keras.layers.Embedding:
    return keras.layers.Embedding(
        rows,
        config.hidden_size,
        embeddings_initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range),
        name=name,
        dtype=dtype,
    )


def _layer_norm(config: BertConfig, name: str, dtype) -> LayerNorm:
    # Computed in float32 whatever the compute dtype, as Keras' LayerNormalization.
    return LayerNorm(epsilon=config.layer_norm_eps, name=name, dtype=dtype)


class BertEmbeddings(keras.layers.Layer):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)
        dtype = self.dtype_policy
        self.word_embeddings = _embedding(config.vocab_size, config, "word_embeddings", dtype)
        self.position_embeddings = _embedding(
            config.max_position_embeddings, config, "position_embeddings", dtype
        )
        self.token_type_embeddings = _embedding(
            config.type_vocab_size, config, "token_type_embeddings", dtype
        )
        self.layer_norm = _layer_norm(config, "layer_norm", self.dtype_policy)
        self.dropout = Dropout(config.hidden_dropout_prob, dtype=self.dtype_policy)
        self.hidden_size = config.hidden_size
        self.max_positions = config.max_position_embeddings

    def build(self, input_shape=None):
        for layer in (self.word_embeddings, self.position_embeddings, self.token_type_embeddings):
            layer.build((None, None))
        self.layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def call(self, word_ids, type_ids, training=False):
        length = word_ids.shape[1]
        if length is not None and length > self.max_positions:
            raise InputFormatError(
                f"The inputs are {length} tokens long but this encoder has "
                f"{self.max_positions} position embeddings (max_position_embeddings); pack "
                f"them to at most {self.max_positions} tokens (max_seq_length)."
            )
        # A slice, not a gather of position ids: XLA clamps an out-of-range gather index and
        # would return wrong numbers silently; a slice past the table fails the addition below.
        positions = self.position_embeddings.embeddings[: tf.shape(word_ids)[1]]
        x = (
            self.word_embeddings(word_ids)
            + tf.cast(positions, self.compute_dtype)[tf.newaxis]
            + self.token_type_embeddings(type_ids)
        )
        return self.dropout(self.layer_norm(x), training=training)


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

    def __init__(self, config: BertConfig, **kwargs):
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

    def call(self, x, attention_bias, training=False, cls_only=False):
        """`x`: [batch * seq, hidden], one row per token. `cls_only`: compute the output at
        each example's first token alone ([batch, hidden]), attending over every token as
        usual: the same numbers as those rows of the full output, for less work."""
        queries = _per_example(x, attention_bias)[:, 0] if cls_only else x
        attended = self.attention(x, attention_bias, training=training, queries=queries)
        attended = self.attention_output(attended)
        x = self.attention_layer_norm(queries + self.dropout(attended, training=training))
        feed_forward = self.output_dense(self.intermediate(x))
        return self.output_layer_norm(x + self.dropout(feed_forward, training=training))


@keras.saving.register_keras_serializable(package="bertfit")
class BertEncoder(keras.layers.Layer):
    """A BERT encoder: token ids in, contextual vectors out.

    Args:
        config: the architecture (`BertConfig`).
        random_init: False starts the weights at zero (all but the pooler's), for an encoder
            whose weights are loaded next.
        dtype: a Keras dtype policy name such as "float32" or "mixed_bfloat16".

    Call it with a dict of `input_word_ids`, `input_mask` and `input_type_ids` (int32,
    [batch, seq]; HF and KerasHub names work too). It returns a dict with `sequence_output`
    [batch, seq, hidden], `pooled_output` [batch, hidden] and `encoder_outputs`, one
    [batch, seq, hidden] tensor per layer. With `pooled_only=True` it returns `pooled_output`
    alone and computes the last layer at [CLS] only (the other positions of the last layer do
    not reach the pooler): the same numbers for about a sixth less work in a 6-layer model.

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
        self.transformer_layers = [
            TransformerLayer(config, name=f"layer_{i}", dtype=self.dtype_policy)
            for i in range(config.num_hidden_layers)
        ]
        self.pooler = _dense(
            config.hidden_size, config, "pooler", self.dtype_policy, activation="tanh"
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
            layer.build()
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
        # [batch, 1, 1, seq]: 0 where attended, a large negative where padded.
        attention_bias = (1.0 - mask[:, tf.newaxis, tf.newaxis, :]) * -1e9
        embedded = self.embeddings(inputs[WORD_IDS], inputs[TYPE_IDS], training=training)
        x = tf.reshape(embedded, [-1, self.config.hidden_size])  # one row per token
        encoder_outputs = []
        last = len(self.transformer_layers) - 1
        for i, layer in enumerate(self.transformer_layers):
            x = layer(x, attention_bias, training=training, cls_only=pooled_only and i == last)
            encoder_outputs.append(x)
        if pooled_only:  # the last layer computed the first tokens only
            return {"pooled_output": self.pooler(x)}
        encoder_outputs = [_per_example(rows, attention_bias) for rows in encoder_outputs]
        return {
            "sequence_output": encoder_outputs[-1],
            "pooled_output": self.pooler(encoder_outputs[-1][:, 0]),
            "encoder_outputs": encoder_outputs,
        }

    def named_variables(self) -> dict[str, keras.Variable]:
        """Every weight under its canonical bertfit name (the keys of `checkpoints.names`)."""
        emb = self.embeddings
        named = {
            "embeddings/word_embeddings": emb.word_embeddings.embeddings,
            "embeddings/position_embeddings": emb.position_embeddings.embeddings,
            "embeddings/token_type_embeddings": emb.token_type_embeddings.embeddings,
            "embeddings/layer_norm/gamma": emb.layer_norm.gamma,
            "embeddings/layer_norm/beta": emb.layer_norm.beta,
        }
        for i, layer in enumerate(self.transformer_layers):
            dense = {
                "attention/query": layer.attention.query,
                "attention/key": layer.attention.key,
                "attention/value": layer.attention.value,
                "attention/output": layer.attention_output,
                "intermediate": layer.intermediate,
                "output": layer.output_dense,
            }
            for name, d in dense.items():
                named[f"layer_{i}/{name}/kernel"] = d.kernel
                named[f"layer_{i}/{name}/bias"] = d.bias
            for name, norm in (
                ("attention/layer_norm", layer.attention_layer_norm),
                ("output/layer_norm", layer.output_layer_norm),
            ):
                named[f"layer_{i}/{name}/gamma"] = norm.gamma
                named[f"layer_{i}/{name}/beta"] = norm.beta
        named["pooler/kernel"] = self.pooler.kernel
        named["pooler/bias"] = self.pooler.bias
        return named

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(BertConfig(**config.pop("config")), **config)
