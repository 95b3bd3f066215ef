"""`BertEncoder`: the one encoder every checkpoint format and family loads into.

Post-LayerNorm transformer as in Devlin et al. (2018) and Hugging Face's `BertModel`; the
families' differences are switches of `BertConfig` (factorised embeddings, position offsets, no
token types, shared layers, no pooler) or, for DeBERTa-v3, ModernBERT, MPNet, GTE, NomicBERT
and EuroBERT, their own layers (`FAMILY_LAYERS`, built from the family kit in `model/blocks.py`,
whose docstring is the contract a family's layers keep). Under a mixed dtype policy the matrix
work runs in the compute dtype while LayerNorm and the attention softmax run in float32.

Between the embeddings and the outputs the hidden states are one row per token, [batch * seq,
hidden], and only attention views them per example. On TensorFlow, Keras' Dense multiplies a 3-D
input through `tf.tensordot`, whose shape arithmetic (and its gradient's) was a quarter of the
training graph's ops; on rows it is one matrix product.
"""

from __future__ import annotations

import functools

import keras
from keras import ops

from bertfit.errors import ConfigError, InputFormatError
from bertfit.model import deberta, eurobert, modernbert, mpnet, rotary_glu
from bertfit.model.attention import IMPLEMENTATIONS
from bertfit.model.blocks import (
    FamilyLayers,
    TransformerLayer,
    dense,
    dense_variables,
    embedding,
    first_tokens,
    layer_norm,
    norm_variables,
    per_example,
    size,
)
from bertfit.model.config import BertConfig
from bertfit.model.inputs import (
    MASK,
    POSITIONS,
    STARTS,
    TYPE_IDS,
    WORD_IDS,
    is_packed,
    normalize_inputs,
)
from bertfit.model.layers import Dropout, take
from bertfit.model.remat import call_rematerialised


class BertEmbeddings(keras.layers.Layer):
    """Word + position + token-type embeddings, then LayerNorm and dropout, then (factorised
    embeddings: ALBERT, ELECTRA) a projection to the hidden size. Returns one row per token,
    [batch * seq, hidden].

    A family without a position table (`absolute_positions=False`) or without token types
    (`type_vocab_size=0`) leaves that table out; RoBERTa's positions start at
    `position_offset`; `norm_bias=False` leaves out the norm's bias (ModernBERT's, by its
    `FamilyLayers.norm_bias`), `norm=False` the norm (EuroBERT's, by its
    `FamilyLayers.embedding_norm`)."""

    def __init__(self, config: BertConfig, norm_bias: bool = True, norm: bool = True, **kwargs):
        super().__init__(**kwargs)
        dtype = self.dtype_policy
        width = config.embedding_width
        self.word_embeddings = embedding(config.vocab_size, width, config, "word_embeddings", dtype)
        self.position_embeddings = (
            embedding(config.max_position_embeddings, width, config, "position_embeddings", dtype)
            if config.absolute_positions
            else None
        )
        self.token_type_embeddings = (
            embedding(config.type_vocab_size, width, config, "token_type_embeddings", dtype)
            if config.type_vocab_size
            else None
        )
        self.layer_norm = layer_norm(config, "layer_norm", dtype, bias=norm_bias) if norm else None
        self.dropout = Dropout(config.hidden_dropout_prob, dtype=self.dtype_policy)
        self.projection = (
            dense(config.hidden_size, config, "projection", dtype)
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
        if self.layer_norm is not None:
            self.layer_norm.build((None, None, self.width))
        if self.projection is not None:
            self.projection.build((None, self.width))
        self.built = True

    def call(self, word_ids, type_ids, training=False, positions=None):
        """`positions` [batch, seq]: each token's position in its example (a packed batch);
        None: the tokens' places in their row."""
        length = word_ids.shape[1]
        if length is not None and self.max_length is not None and length > self.max_length:
            raise InputFormatError(
                f"The inputs are {length} tokens long but this encoder has {self.max_length} "
                f"positions (its position table, or the longest input it was trained for); "
                f"pack them to at most {self.max_length} tokens (max_seq_length)."
            )
        x = self.word_embeddings(word_ids)
        if self.position_embeddings is not None:
            start = self.position_offset
            table = self.position_embeddings.embeddings
            if positions is None:
                # A slice, not a gather of position ids: XLA clamps an out-of-range gather
                # index and would return wrong numbers silently; a slice past the table fails
                # the addition below.
                rows = ops.expand_dims(table[start : start + size(word_ids, 1)], 0)
            else:  # a packed row's positions are below its length, checked above
                rows = take(table, positions + start, axis=0)
            x += ops.cast(rows, self.compute_dtype)
        if self.token_type_embeddings is not None:
            x += self.token_type_embeddings(type_ids)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        rows = ops.reshape(self.dropout(x, training=training), (-1, self.width))
        return rows if self.projection is None else self.projection(rows)

    def named_variables(self) -> dict[str, keras.Variable]:
        named = {f"{table.name}": table.embeddings for table in self._tables()}
        if self.layer_norm is not None:
            named |= norm_variables("layer_norm", self.layer_norm)
        if self.projection is not None:
            named |= dense_variables("projection", self.projection)
        return named


def padding_bias(mask):
    """[batch, 1, 1, seq]: 0 where a key is a token, a large negative where it is padding.
    expand_dims, not [:, newaxis, newaxis, :]: LiteRT has no builtin for a new-axis slice of a
    tensor whose length is known only at run time (the LiteRT export pads to the batch's
    bucket)."""
    mask = ops.cast(mask, "float32")
    return (1.0 - ops.expand_dims(ops.expand_dims(mask, 1), 1)) * -1e9


def segment_bias(segments):
    """A packed batch's [batch, 1, seq, seq]: 0 where query and key belong to one example (or
    are both padding), a large negative elsewhere, so attention never crosses examples.
    `segments` [batch, seq] numbers each token's example in its row (0 on padding).

    Examples:
    >>> bias = segment_bias(ops.convert_to_tensor([[1, 1, 2, 0]]))
    >>> (ops.convert_to_numpy(bias)[0, 0] == 0).astype(int).tolist()
    [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    """
    same = ops.equal(ops.expand_dims(segments, 2), ops.expand_dims(segments, 1))
    return ops.expand_dims(ops.where(same, 0.0, -1e9), 1)


BERT_LAYERS = FamilyLayers(TransformerLayer, packs=lambda config: True)

# model_type -> the layers of a family whose layers differ from BERT's (see `blocks.FamilyLayers`
# and the layer contract in `model/blocks.py`); every other family has `BERT_LAYERS`.
FAMILY_LAYERS: dict[str, FamilyLayers] = {
    "deberta-v2": deberta.LAYERS,
    "eurobert": eurobert.LAYERS,
    "modernbert": modernbert.LAYERS,
    "mpnet": mpnet.LAYERS,
    "gte": rotary_glu.LAYERS,
    "nomic_bert": rotary_glu.LAYERS,
}


def family_layers(config: BertConfig) -> FamilyLayers:
    """The layers of `config`'s family: its entry in `FAMILY_LAYERS`, else BERT's."""
    return FAMILY_LAYERS.get(config.model_type, BERT_LAYERS)


def check_packs(config: BertConfig, name: str) -> None:
    """Refuses `--packing` for an encoder whose layers cannot keep a packed row's examples
    apart (`FamilyLayers.packs`: DeBERTa-v2's convolution runs across them)."""
    if not family_layers(config).packs(config):
        raise ConfigError(
            f"--packing: the {config.model_type} encoder of {name} cannot keep packed examples "
            "apart (its layers mix neighbouring tokens outside attention); BERT, RoBERTa, XLM-R, "
            "ALBERT, ELECTRA, DistilBERT, ModernBERT and DeBERTa-v3 pack. Leave --packing out."
        )


def _transformer_layers(
    config: BertConfig, layer_class: type[keras.layers.Layer], dtype
) -> list[keras.layers.Layer]:
    """The encoder's layers, one per layer, or one shared by all (ALBERT)."""
    if config.share_layers:
        shared = layer_class(config, name="layer_0", dtype=dtype)
        return [shared] * config.num_hidden_layers
    return [
        layer_class(config, name=f"layer_{i}", dtype=dtype, index=i)
        for i in range(config.num_hidden_layers)
    ]


@keras.saving.register_keras_serializable(package="bertfit")
class BertEncoder(keras.layers.Layer):
    """An encoder of any supported family (see `BertConfig`): token ids in, contextual vectors
    out.

    Args:
        config: the architecture (`BertConfig`).
        random_init: False starts the weights at zero (all but the pooler's), for an encoder
            whose weights are loaded next.
        dtype: a Keras dtype policy name such as "float32" or "mixed_bfloat16".

    `remat` (False unless set, e.g. by `--remat`): in training, recompute each layer's
    activations in the backward pass instead of keeping them (`model/remat.py`): about a
    third more compute for a layer's input kept per layer instead of all its activations.

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

    A packed batch (`--packing`: several examples a row, `model/inputs.py`) adds
    `input_positions` and `example_starts`; attention then stays within each example, and
    `pooled_output` and `default` have one row per example slot, [batch * slots, hidden].

    Examples:
    >>> config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
    ...                     num_attention_heads=2, intermediate_size=64)
    >>> encoder = BertEncoder(config)
    >>> outputs = encoder({"input_word_ids": [[2, 7, 3]], "input_mask": [[1, 1, 1]],
    ...                    "input_type_ids": [[0, 0, 0]]})
    >>> tuple(outputs["pooled_output"].shape)
    (1, 32)
    """

    def __init__(self, config: BertConfig, random_init: bool = True, **kwargs):
        kwargs.setdefault("name", "bert_encoder")
        super().__init__(**kwargs)
        self.config = config
        self.remat = False
        family = family_layers(config)
        self.embeddings = BertEmbeddings(
            config,
            norm_bias=family.norm_bias(config),
            norm=family.embedding_norm,
            name="embeddings",
            dtype=self.dtype_policy,
        )
        self.transformer_layers = _transformer_layers(config, family.layer, self.dtype_policy)
        self.parts = (
            None
            if family.parts is None
            else family.parts(config, name="encoder_parts", dtype=self.dtype_policy)
        )
        self.pooler = (
            dense(config.hidden_size, config, "pooler", self.dtype_policy, activation="tanh")
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
        packed = is_packed(inputs)
        attention_bias = (segment_bias if packed else padding_bias)(inputs[MASK])
        x = self.embeddings(
            inputs[WORD_IDS], inputs[TYPE_IDS], training=training, positions=inputs.get(POSITIONS)
        )
        context = None if self.parts is None else self.parts.context(inputs, training=training)
        encoder_outputs = []
        last = len(self.transformer_layers) - 1
        for i, layer in enumerate(self.transformer_layers):
            cls_only = pooled_only and i == last and layer.supports_cls_only
            if cls_only and packed:  # the examples' first tokens are at their starts
                takes_starts = getattr(layer, "supports_packed_cls_only", False)
                cls_only = inputs[STARTS] if takes_starts else False
            call = layer
            if self.remat and training:  # recomputed in the backward pass (`model/remat.py`)
                call = functools.partial(call_rematerialised, layer)
            x = call(x, attention_bias, training=training, cls_only=cls_only, context=context)
            encoder_outputs.append(x)
        if self.parts is not None:
            x = encoder_outputs[-1] = self.parts.finish(x)
        if cls_only is not False:  # the last layer computed the first tokens alone
            first = x
        elif packed:
            first = first_tokens(x, inputs[STARTS], size(attention_bias, -1))
        else:
            first = per_example(x, attention_bias)[:, 0]
        if pooled_only:
            return {"pooled_output": self.pool(first)}
        encoder_outputs = [per_example(rows, attention_bias) for rows in encoder_outputs]
        outputs = {"sequence_output": encoder_outputs[-1], "encoder_outputs": encoder_outputs}
        outputs["default"] = self.pool(first)  # TF Hub's whole-input output
        if self.pooler is not None:
            outputs["pooled_output"] = outputs["default"]
        return outputs

    def use_attention(self, implementation: str) -> None:
        """Computes every layer's attention as `implementation` says: "auto", "fused" (Keras'
        `dot_product_attention`) or "explicit" (`model/attention.py`); "auto" unless set,
        e.g. by `--attention`. Set before the model is traced (a traced graph keeps its
        choice)."""
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"attention {implementation!r} not in {IMPLEMENTATIONS}")
        for layer in self._flatten_layers(include_self=False):
            if hasattr(layer, "attention_implementation"):
                layer.attention_implementation = implementation

    def pool(self, first_tokens):
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
            named |= dense_variables("pooler", self.pooler)
        return named

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(BertConfig(**config.pop("config")), **config)
