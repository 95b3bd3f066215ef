"""The family kit: the blocks every encoder family's layers are built from, and the contract a
family's layers keep with `BertEncoder`.

`BertEncoder` (`model/encoder.py`) is BERT's embeddings, a stack of layers and an optional
pooler. BERT, ELECTRA, DistilBERT, ALBERT and RoBERTa use BERT's layer (`TransformerLayer`); a
family whose layers differ (DeBERTa-v3: `model/deberta.py`, ModernBERT: `model/modernbert.py`,
MPNet: `model/mpnet.py`, GTE and NomicBERT: `model/rotary_glu.py`, EuroBERT: `model/eurobert.py`)
writes its own layer class from these blocks, describes it as a `FamilyLayers` and registers it
in `encoder.FAMILY_LAYERS` under its `model_type`. docs/adding_a_family.md walks through adding
one. The blocks import nothing from the encoder or the families, so every family imports them
without a cycle.

Larger parts of the kit have modules of their own: rotary position embeddings
(`model/rotary.py`), gated feed-forwards (GLU variants: `model/gated_mlp.py`), relative
position buckets (`model/relative_positions.py`), RMSNorm (`model/norms.py`),
sliding-window attention computed in the band (`model/local_attention.py`) and attention
itself, fused or written out (`model/attention.py`: every family's attention goes through
it); `SelfAttention` takes grouped key/value heads (`num_key_value_heads`) and projections
without biases.

The layer contract
------------------
A family's layer class (`FamilyLayers.layer`):

- is built as `layer_class(config, name="layer_<i>", dtype=policy, index=i)`: `config` the
  `BertConfig` (the family's own settings in `config.variant`), `index` its place in the stack
  (ALBERT's shared layer is built once, as `layer_0`). `build()` with no argument creates every
  weight: the encoder is built before it sees an input.
- is called as `layer(x, attention_bias, training=, cls_only=, context=)` and returns its output
  rows:
  - `x`: the hidden states as token rows, [batch * seq, hidden], in the compute dtype
    (`per_example` views them as [batch, seq, hidden]); on rows a Dense is one matrix product;
  - `attention_bias`: [batch, 1, 1, seq], float32: 0 where the key is a token, -1e9 where it is
    padding, added to the attention logits before the softmax; for a packed batch (several
    examples per row, `--packing`; only of a family whose `FamilyLayers.packs` says so)
    [batch, 1, seq, seq]: 0 where query and key belong to one example, -1e9 elsewhere;
  - `cls_only` (asked only of a class with `supports_cls_only = True`, of the last layer, when
    the pooled vector alone is wanted): return each example's first token alone, [batch, hidden];
    for a packed batch (only of a class with `supports_packed_cls_only = True`) it is the
    example starts [batch, slots] instead of True, and the rows returned are those tokens',
    [batch * slots, hidden] (`first_token_queries` gives them and their attention bias);
  - `context`: what the family's parts' `context` returned for this call (None without parts).
- runs its matrix products in the compute dtype, and its layer norms (`layer_norm`) and softmax
  in float32, under a mixed dtype policy;
- names its weights in `named_variables()`: canonical name (below `layer_<i>/`) -> variable.
  These names are the keys of the family's name table (`checkpoints/families/<family>.py`), which
  maps each to its tensor in the family's checkpoints; a weight that is BERT's keeps BERT's name
  ("attention/query", "intermediate", "output/layer_norm", ...).

A family's parts outside its layers (`FamilyLayers.parts`, a `FamilyParts` subclass; DeBERTa's
relative position table, ModernBERT's final norm) are built as `parts_class(config,
name="encoder_parts", dtype=policy)`; `context(inputs, training=)` runs once per call before the
layers (`inputs`: the dict of `model.inputs` names; a packed batch's `input_positions` among
them), `finish(x)` turns the last layer's rows
into the encoder's output rows, and `named_variables()` names its weights below `encoder/`.

Keras' attribute names and layer names decide the names of the variables in saved runs,
checkpoints and exports: once a family has shipped, they do not change.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import keras
from keras import ops

from bertfit.model.attention import AUTO, attend
from bertfit.model.config import ACTIVATIONS, BertConfig
from bertfit.model.layers import (
    Dropout,
    LayerNorm,
    dynamic_shape,
    gelu,
    gelu_tanh,
    take,
)

# Hugging Face's names of GELU's tanh approximation (`ACTIVATIONS`).
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")


def _bias_always(config: BertConfig) -> bool:
    return True


def _packs_never(config: BertConfig) -> bool:
    return False


@dataclasses.dataclass(frozen=True)
class FamilyLayers:
    """What a family puts into `BertEncoder` besides BERT's embeddings and pooler.

    Args:
        layer: the layer class, one instance per layer (see the layer contract above).
        parts: the family's weights and per-call work outside its layers (a `FamilyParts`
            subclass), or None.
        norm_bias: whether the family's layer norms have a bias, read from the config; the
            embeddings' norm follows it (ModernBERT's norms have none by default).
        embedding_norm: False: the embeddings are not normalised (EuroBERT's pre-norm layers
            normalise their inputs themselves).
        packs: whether the layers keep the examples of a packed row apart (`--packing`), read
            from the config: they mix tokens only through attention under the
            [batch, 1, seq, seq] bias, and positions enter through the embeddings'
            `input_positions` or as distances within the row (equal to those within an
            example). False unless a family says so.
    """

    layer: type[keras.layers.Layer]
    parts: type[FamilyParts] | None = None
    norm_bias: Callable[[BertConfig], bool] = _bias_always
    embedding_norm: bool = True
    packs: Callable[[BertConfig], bool] = _packs_never


def activation(name: str):
    """The function a checkpoint's `hidden_act` names (see `model.config.ACTIVATIONS`).

    Examples:
    >>> gelu_new = activation("gelu_new")  # GELU's tanh approximation
    >>> round(float(gelu_new(ops.convert_to_tensor(1.0))), 4)
    0.8412
    """
    function, arguments = ACTIVATIONS[name]
    return functools.partial(getattr(keras.activations, function), **arguments)


def feed_forward_activation(name: str):
    """`activation(name)`, with the GELUs as `layers.gelu` (erf form) and `layers.gelu_tanh`
    (tanh form), whose gradients are written out (fewer graph ops to train).

    Examples:
    >>> feed_forward_activation("gelu_new") is gelu_tanh
    True
    """
    if name == "gelu":
        return gelu
    return gelu_tanh if name in TANH_GELUS else activation(name)


def dense(
    units: int,
    config: BertConfig,
    name: str,
    dtype,
    activation=None,
    use_bias: bool = True,
) -> keras.layers.Dense:
    """A Dense layer initialised as the family's checkpoints were (truncated normal of
    `initializer_range`). Call it on token rows: on a 3-D input Keras multiplies through
    `tensordot` (on TensorFlow), whose shape arithmetic costs many graph ops.

    Examples:
    >>> config = BertConfig(hidden_size=8, num_attention_heads=2)
    >>> layer = dense(4, config, "intermediate", "float32", use_bias=False)
    >>> layer.build((None, 8)); [w.name for w in layer.weights]
    ['kernel']
    """
    return keras.layers.Dense(
        units,
        activation=activation,
        use_bias=use_bias,
        name=name,
        dtype=dtype,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range),
    )


def embedding(
    rows: int, width: int, config: BertConfig, name: str, dtype
) -> keras.layers.Embedding:
    """An embedding table of `rows` x `width`, initialised as `dense`'s kernels."""
    return keras.layers.Embedding(
        rows,
        width,
        embeddings_initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range),
        name=name,
        dtype=dtype,
    )


def layer_norm(config: BertConfig, name: str, dtype, bias: bool = True) -> LayerNorm:
    """A layer norm over the last axis with the config's epsilon, computed in float32 whatever
    the compute dtype (as Keras' LayerNormalization); `bias=False`: no beta (ModernBERT).

    Examples:
    >>> norm = layer_norm(BertConfig(hidden_size=8, num_attention_heads=2), "ln", "float32",
    ...                   bias=False)
    >>> norm.build((None, 8)); [w.name for w in norm.weights]
    ['gamma']
    """
    return LayerNorm(epsilon=config.layer_norm_eps, center=bias, name=name, dtype=dtype)


def dense_variables(name: str, layer) -> dict[str, keras.Variable]:
    """A Dense (or Conv1D) layer's weights under `name/kernel` and `name/bias` (if it has one),
    for `named_variables`; with LoRA on (`model.lora`) the frozen kernel and the adapters
    under `name/lora_a` and `name/lora_b` (`layer.kernel` is then the merged tensor); an int8
    kernel (`model.int8`) with its scales under `name/kernel_scale`."""
    if getattr(layer, "lora_enabled", False):
        named = {
            f"{name}/kernel": layer._kernel,
            f"{name}/lora_a": layer.lora_kernel_a,
            f"{name}/lora_b": layer.lora_kernel_b,
        }
    else:
        named = {f"{name}/kernel": layer.kernel}
    if getattr(layer, "quantization_mode", None) == "int8":
        named[f"{name}/kernel_scale"] = layer.kernel_scale
    if layer.bias is not None:
        named[f"{name}/bias"] = layer.bias
    return named


def norm_variables(name: str, norm: LayerNorm) -> dict[str, keras.Variable]:
    """A layer norm's weights under `name/gamma` and `name/beta` (if it has one)."""
    named = {f"{name}/gamma": norm.gamma}
    if norm.beta is not None:
        named[f"{name}/beta"] = norm.beta
    return named


def size(tensor, axis: int):
    """The size of `tensor` along `axis`: a Python int when static (XLA's shapes), else a
    scalar tensor.

    Examples:
    >>> size(ops.zeros([2, 3]), 1)
    3
    """
    return tensor.shape[axis] or dynamic_shape(tensor)[axis]


def per_example(rows, attention_bias):
    """The token rows [batch * seq, hidden] as [batch, seq, hidden], seq taken from the
    [batch, 1, 1, seq] attention bias.

    Examples:
    >>> tuple(per_example(ops.zeros([6, 4]), ops.zeros([2, 1, 1, 3])).shape)
    (2, 3, 4)
    """
    return ops.reshape(rows, (-1, size(attention_bias, -1), rows.shape[-1]))


def first_tokens(rows, starts, length):
    """Each example's first token in a packed batch: `rows` [batch * seq, hidden] at
    `starts` [batch, slots] (within each row of `length` tokens) as [batch * slots, hidden].

    Examples:
    >>> rows = ops.reshape(ops.arange(8, dtype="float32"), (8, 1))  # 2 rows of 4 tokens
    >>> first = first_tokens(rows, ops.convert_to_tensor([[0, 3], [0, 2]]), 4)
    >>> ops.convert_to_numpy(first)[:, 0].tolist()
    [0.0, 3.0, 4.0, 6.0]
    """
    row_offsets = ops.expand_dims(ops.arange(size(starts, 0), dtype="int32") * length, 1)
    return take(rows, ops.reshape(starts + row_offsets, (-1,)), axis=0)


def first_token_queries(x, attention_bias, cls_only):
    """The queries of a layer computing each example's first token alone (`cls_only`), and
    their attention bias: row 0 of each example ([batch, hidden], the bias as it is), or for
    a packed batch, whose `cls_only` is its example starts [batch, slots], those tokens
    ([batch * slots, hidden]) and the bias's rows at them ([batch, 1, slots, seq])."""
    if cls_only is True:
        return per_example(x, attention_bias)[:, 0], attention_bias
    length = size(attention_bias, -1)
    bias_rows = ops.reshape(attention_bias, (-1, length))  # one per query token
    bias = first_tokens(bias_rows, cls_only, length)
    return first_tokens(x, cls_only, length), ops.reshape(bias, (size(cls_only, 0), 1, -1, length))


def split_heads(rows, batch_size, num_heads: int, head_size: int):
    """Token rows [batch * seq, heads * head_size] as [batch, heads, seq, head_size].

    Examples:
    >>> tuple(split_heads(ops.zeros([6, 8]), 2, num_heads=4, head_size=2).shape)
    (2, 4, 3, 2)
    """
    per_head = ops.reshape(rows, (batch_size, -1, num_heads, head_size))
    return ops.transpose(per_head, (0, 2, 1, 3))


def merge_heads(per_head, hidden_size: int):
    """[batch, heads, seq, head_size] as token rows [batch * seq, heads * head_size]."""
    return ops.reshape(ops.transpose(per_head, (0, 2, 1, 3)), (-1, hidden_size))


class SelfAttention(keras.layers.Layer):
    """BERT's multi-head self-attention (query, key and value projections; the output projection
    is the layer's) with an additive padding mask; softmax in float32.

    Args:
        config: the sizes (`num_attention_heads` query heads), dropout and initialisation.
        num_key_value_heads: fewer key/value heads than query heads (a divisor of them):
            grouped-query attention (Ainslie et al., 2023; Llama's and EuroBERT's), each
            key/value head shared by `num_attention_heads / num_key_value_heads` consecutive
            query heads, as transformers' `repeat_kv` shares them. None: one per query head.
        use_bias: whether the projections have biases.

    `attention_implementation` (`model/attention.py`; `BertEncoder.use_attention` sets it):
    "auto", "fused" (Keras' `dot_product_attention`) or "explicit".

    Examples:
    >>> config = BertConfig(hidden_size=8, num_attention_heads=4)
    >>> attention = SelfAttention(config, num_key_value_heads=2, use_bias=False)
    >>> attention.build()
    >>> [tuple(layer.kernel.shape) for layer in (attention.query, attention.key)]
    [(8, 8), (8, 4)]
    >>> tuple(attention(ops.ones([6, 8]), ops.zeros([2, 1, 1, 3])).shape)
    (6, 8)
    """

    attention_implementation = AUTO

    def __init__(
        self,
        config: BertConfig,
        num_key_value_heads: int | None = None,
        use_bias: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = num_key_value_heads or self.num_heads
        if self.num_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads {self.num_key_value_heads} does not divide "
                f"num_attention_heads {self.num_heads}."
            )
        self.head_size = config.head_size
        self.hidden_size = config.hidden_size
        dtype = self.dtype_policy
        shared = self.num_key_value_heads * self.head_size
        self.query = dense(config.hidden_size, config, "query", dtype, use_bias=use_bias)
        self.key = dense(shared, config, "key", dtype, use_bias=use_bias)
        self.value = dense(shared, config, "value", dtype, use_bias=use_bias)
        self.dropout = Dropout(config.attention_probs_dropout_prob, dtype=dtype)

    def build(self, input_shape=None):
        for layer in (self.query, self.key, self.value):
            layer.build((None, self.hidden_size))
        self.built = True

    def named_variables(self) -> dict[str, keras.Variable]:
        """The projections' weights under `attention/query`, `attention/key` and
        `attention/value` (a layer's names: the output projection is the layer's)."""
        named = {}
        for layer in (self.query, self.key, self.value):
            named |= dense_variables(f"attention/{layer.name}", layer)
        return named

    def _heads(self, rows, batch_size, num_heads=None):
        return split_heads(rows, batch_size, num_heads or self.num_heads, self.head_size)

    def position(self, q, k, context):
        """The queries [batch, heads, seq, head_size] and keys [batch, kv_heads, seq,
        head_size] with their positions applied: as they are here (BERT's positions are added
        to its embeddings); a family with relative positions (rotary ones, say) overrides
        this."""
        return q, k

    def score_bias(self, context):
        """A float32 bias added to the attention logits, [1 or batch, heads, seq, seq] (query,
        key): none here; a family whose attention adds one by relative position (MPNet's
        learned bias per distance bucket) overrides this."""
        return None

    def call(self, x, attention_bias, training=False, queries=None, context=None):
        """`x`: the token rows [batch * seq, hidden]. `queries`: the rows that attend, the
        first ones of each example, the same number per example (default: all of `x`); keys
        and values are always every row of `x`. `context`: the encoder's per-call context,
        for `position` and `score_bias`. Returns one row per query."""
        queries = x if queries is None else queries
        batch_size = size(attention_bias, 0)
        q = self._heads(self.query(queries), batch_size)
        k = self._heads(self.key(x), batch_size, self.num_key_value_heads)
        v = self._heads(self.value(x), batch_size, self.num_key_value_heads)
        q, k = self.position(q, k, context)
        bias = self.score_bias(context)
        if bias is not None and queries is not x:
            bias = bias[..., : size(q, 2), :]
        return attend(
            q,
            k,
            v,
            attention_bias,
            bias=bias,
            dropout=self.dropout,
            training=training,
            implementation=self.attention_implementation,
        )


class TransformerLayer(keras.layers.Layer):
    """One post-LayerNorm BERT layer: attention, add & norm, feed-forward, add & norm.

    A family whose layer is BERT's but for its attention subclasses it with another
    `attention_class` (a `SelfAttention` subclass); one that cannot compute a lone first token
    (`cls_only`) sets `supports_cls_only = False`, one whose attention cannot take a packed
    batch's (its `position` reads the queries' places) `supports_packed_cls_only = False`."""

    attention_class = SelfAttention
    supports_cls_only = True
    supports_packed_cls_only = True

    def __init__(self, config: BertConfig, index: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.attention = self.attention_class(config, name="attention", dtype=self.dtype_policy)
        self.attention_output = dense(
            config.hidden_size, config, "attention_output", self.dtype_policy
        )
        self.attention_layer_norm = layer_norm(config, "attention_layer_norm", self.dtype_policy)
        self.intermediate = dense(
            config.intermediate_size,
            config,
            "intermediate",
            self.dtype_policy,
            feed_forward_activation(config.hidden_act),
        )
        self.output_dense = dense(config.hidden_size, config, "output", self.dtype_policy)
        self.output_layer_norm = layer_norm(config, "output_layer_norm", self.dtype_policy)
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
        each example's first token alone ([batch, hidden]; a packed batch's example starts:
        [batch * slots, hidden]), attending over every token as usual: the same numbers as
        those rows of the full output, for less work."""
        queries, bias = x, attention_bias
        if cls_only is not False:
            queries, bias = first_token_queries(x, attention_bias, cls_only)
        attended = self.attention(x, bias, training=training, queries=queries, context=context)
        attended = self.attention_output(attended)
        x = self.attention_layer_norm(queries + self.dropout(attended, training=training))
        feed_forward = self.output_dense(self.intermediate(x))
        return self.output_layer_norm(x + self.dropout(feed_forward, training=training))

    def named_variables(self) -> dict[str, keras.Variable]:
        """The layer's weights under their canonical names (below `layer_<i>/`)."""
        named = self.attention.named_variables()
        for name, layer in (
            ("attention/output", self.attention_output),
            ("intermediate", self.intermediate),
            ("output", self.output_dense),
        ):
            named |= dense_variables(name, layer)
        named |= norm_variables("attention/layer_norm", self.attention_layer_norm)
        named |= norm_variables("output/layer_norm", self.output_layer_norm)
        return named


class FamilyParts(keras.layers.Layer):
    """The base of a family's parts outside its layers (`FamilyLayers.parts`): no weights, no
    per-call context, the last layer's rows unchanged. A family overrides what it needs."""

    def __init__(self, config: BertConfig, **kwargs):
        super().__init__(**kwargs)

    def build(self, input_shape=None):
        self.built = True

    def context(self, inputs: dict, training=False):
        """What every layer of this call gets as `context` (once per call, before the layers)."""
        return None

    def finish(self, x):
        """The encoder's output rows from the last layer's."""
        return x

    def named_variables(self) -> dict[str, keras.Variable]:
        """The parts' weights under their canonical names (below `encoder/`)."""
        return {}
