"""Where each encoder weight lives in each checkpoint format: one table per format.

Canonical names are `BertEncoder.named_variables()` keys. A format's table maps each canonical name
to the name in that format's files and a `Transform` that turns the stored array into the encoder's
layout (PyTorch stores dense kernels as [out, in], so they are transposed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

OPTIONAL = ("pooler/kernel", "pooler/bias")  # sentence-embedding checkpoints may drop the pooler

DENSE = (
    "attention/query",
    "attention/key",
    "attention/value",
    "attention/output",
    "intermediate",
    "output",
)
LAYER_NORMS = ("attention/layer_norm", "output/layer_norm")


def canonical_names(num_layers: int) -> list[str]:
    """All encoder weight names for a BERT with `num_layers` layers, in a stable order."""
    names = [
        f"embeddings/{e}"
        for e in ("word_embeddings", "position_embeddings", "token_type_embeddings")
    ]
    names += ["embeddings/layer_norm/gamma", "embeddings/layer_norm/beta"]
    for i in range(num_layers):
        for d in DENSE:
            names += [f"layer_{i}/{d}/kernel", f"layer_{i}/{d}/bias"]
        for n in LAYER_NORMS:
            names += [f"layer_{i}/{n}/gamma", f"layer_{i}/{n}/beta"]
    return names + ["pooler/kernel", "pooler/bias"]


@dataclasses.dataclass(frozen=True)
class Source:
    """A stored tensor's name(s) and how to bring it into the encoder's layout."""

    names: tuple[str, ...]  # first is the one written; the others are older spellings
    to_encoder: Callable[[np.ndarray], np.ndarray] = lambda a: a
    from_encoder: Callable[[np.ndarray], np.ndarray] = lambda a: a


def transposed(*names: str) -> Source:
    """A [out, in] torch Linear weight (the first of `names`) as a Keras [in, out] kernel."""
    return Source(names, to_encoder=np.transpose, from_encoder=np.transpose)


# ---- Google's layer parts, in TF1 variable scopes; HF `BertModel` ported them name for name ----

_GOOGLE_DENSE = {
    "attention/query": "attention/self/query",
    "attention/key": "attention/self/key",
    "attention/value": "attention/self/value",
    "attention/output": "attention/output/dense",
    "intermediate": "intermediate/dense",
    "output": "output/dense",
}
_GOOGLE_NORMS = {
    "attention/layer_norm": "attention/output/LayerNorm",
    "output/layer_norm": "output/LayerNorm",
}


# ---- Hugging Face (`BertModel` state dict; keys may carry a "bert." prefix) ----

_HF_DENSE = {ours: theirs.replace("/", ".") for ours, theirs in _GOOGLE_DENSE.items()}
_HF_NORMS = {ours: theirs.replace("/", ".") for ours, theirs in _GOOGLE_NORMS.items()}


def hf_norm(prefix: str, param: str) -> Source:
    """A LayerNorm's `param` ("gamma" or "beta") below `prefix`: Hugging Face's `weight`/`bias`,
    or the `gamma`/`beta` of older checkpoints."""
    new, old = ("weight", "gamma") if param == "gamma" else ("bias", "beta")
    return Source((f"{prefix}.{new}", f"{prefix}.{old}"))


# A Hugging Face BertModel's word embeddings (below its "bert." prefix in a task model)
HF_WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


def hf_embeddings(
    tables: tuple[str, ...], layer_norm: str = "embeddings.LayerNorm"
) -> dict[str, Source]:
    """Canonical name → Hugging Face key of each embedding table of `tables`
    (`embeddings.<table>.weight`) and of the embeddings' LayerNorm (below `layer_norm`)."""
    table = {f"embeddings/{e}": Source((f"embeddings.{e}.weight",)) for e in tables}
    for p in ("gamma", "beta"):
        table[f"embeddings/layer_norm/{p}"] = hf_norm(layer_norm, p)
    return table


def hf_layer(
    index: int, prefix: str, dense: dict[str, str], norms: dict[str, str]
) -> dict[str, Source]:
    """Canonical name → Hugging Face key of the weights of layer `index`, whose keys start with
    `prefix`: each Dense of `dense` (ours → theirs) as its transposed weight and its bias, each
    LayerNorm of `norms` as its gamma and beta."""
    table = {}
    for ours, theirs in dense.items():
        table[f"layer_{index}/{ours}/kernel"] = transposed(f"{prefix}.{theirs}.weight")
        table[f"layer_{index}/{ours}/bias"] = Source((f"{prefix}.{theirs}.bias",))
    for ours, theirs in norms.items():
        for p in ("gamma", "beta"):
            table[f"layer_{index}/{ours}/{p}"] = hf_norm(f"{prefix}.{theirs}", p)
    return table


def hf_table(num_layers: int) -> dict[str, Source]:
    """Canonical name → Hugging Face `BertModel` state-dict key (without the "bert." prefix)."""
    table = hf_embeddings(("word_embeddings", "position_embeddings", "token_type_embeddings"))
    for i in range(num_layers):
        table |= hf_layer(i, f"encoder.layer.{i}", _HF_DENSE, _HF_NORMS)
    table["pooler/kernel"] = transposed("pooler.dense.weight")
    table["pooler/bias"] = Source(("pooler.dense.bias",))
    return table


# Tensors a HF checkpoint holds that are not encoder weights: known, so not "unexpected".
HF_IGNORED_PREFIXES = ("embeddings.position_ids", "cls.", "classifier.", "qa_outputs.")


# ---- Google's original TF1 BERT (`modeling.py`; also TF1 Hub modules built from it) ----


def tf1_table(num_layers: int, prefix: str = "bert/") -> dict[str, Source]:
    """Canonical name → Google TF1 variable name. Kernels are [in, out] as in Keras."""
    table = {
        f"embeddings/{e}": Source((f"{prefix}embeddings/{e}",))
        for e in ("word_embeddings", "position_embeddings", "token_type_embeddings")
    }
    for p in ("gamma", "beta"):
        table[f"embeddings/layer_norm/{p}"] = Source((f"{prefix}embeddings/LayerNorm/{p}",))
    for i in range(num_layers):
        layer = f"{prefix}encoder/layer_{i}"
        for ours, theirs in _GOOGLE_DENSE.items():
            for p in ("kernel", "bias"):
                table[f"layer_{i}/{ours}/{p}"] = Source((f"{layer}/{theirs}/{p}",))
        for ours, theirs in _GOOGLE_NORMS.items():
            for p in ("gamma", "beta"):
                table[f"layer_{i}/{ours}/{p}"] = Source((f"{layer}/{theirs}/{p}",))
    for p in ("kernel", "bias"):
        table[f"pooler/{p}"] = Source((f"{prefix}pooler/dense/{p}",))
    return table


# Google TF1 checkpoints also hold pre-training heads, the step counter and Adam slots.
TF1_IGNORED_PREFIXES = (
    "cls/",
    "global_step",
    "output_weights",
    "output_bias",
    "bad_steps",
    "loss_scale",
)


# ---- TF2 Model Garden (`official.nlp.modeling.networks.BertEncoder`) ----
# Attention uses EinsumDense: query/key/value kernels [hidden, heads, head_size] with biases
# [heads, head_size]; the attention output kernel is [heads, head_size, hidden].


def _heads_in(num_heads: int):
    """A [hidden, heads, head_size] kernel or a [heads, head_size] bias ↔ [hidden(, hidden)]."""

    def to_encoder(a):
        return a.reshape(-1) if a.ndim == 2 else a.reshape(a.shape[0], -1)

    def from_encoder(a):
        return a.reshape(num_heads, -1) if a.ndim == 1 else a.reshape(a.shape[0], num_heads, -1)

    return to_encoder, from_encoder


def _heads_out(num_heads: int):
    """The attention output kernel [heads, head_size, hidden] ↔ [hidden, hidden]."""
    return (lambda a: a.reshape(-1, a.shape[-1]), lambda a: a.reshape(num_heads, -1, a.shape[-1]))


def _model_garden_table(
    num_layers: int,
    num_heads: int,
    embeddings: dict[str, tuple[str, ...]],
    layer_names: Callable[[int], tuple[str, ...]],
    parts: dict[str, str],
    pooler: tuple[str, ...],
    projection: tuple[str, ...] = (),
) -> dict[str, Source]:
    table = {
        f"embeddings/{ours}": Source(tuple(f"{n}/embeddings" for n in theirs))
        for ours, theirs in embeddings.items()
        if ours != "layer_norm"
    }
    for p in ("gamma", "beta"):
        table[f"embeddings/layer_norm/{p}"] = Source(
            tuple(f"{n}/{p}" for n in embeddings["layer_norm"])
        )
    heads_in, heads_out = _heads_in(num_heads), _heads_out(num_heads)
    for i in range(num_layers):
        prefixes = layer_names(i)
        for ours, theirs in parts.items():
            names = lambda p: tuple(f"{layer}/{theirs}/{p}" for layer in prefixes)  # noqa: B023,E731
            if ours.endswith("layer_norm"):
                for p in ("gamma", "beta"):
                    table[f"layer_{i}/{ours}/{p}"] = Source(names(p))
            elif ours in ("attention/query", "attention/key", "attention/value"):
                for p in ("kernel", "bias"):
                    table[f"layer_{i}/{ours}/{p}"] = Source(names(p), *heads_in)
            elif ours == "attention/output":
                table[f"layer_{i}/{ours}/kernel"] = Source(names("kernel"), *heads_out)
                table[f"layer_{i}/{ours}/bias"] = Source(names("bias"))
            else:
                for p in ("kernel", "bias"):
                    table[f"layer_{i}/{ours}/{p}"] = Source(names(p))
    for p in ("kernel", "bias"):
        table[f"pooler/{p}"] = Source(tuple(f"{n}/{p}" for n in pooler))
        if projection:  # factorised embeddings (ALBERT, ELECTRA): an EinsumDense "...x,xy->...y"
            table[f"embeddings/projection/{p}"] = Source(tuple(f"{n}/{p}" for n in projection))
    return table


def tf2_checkpoint_table(
    num_layers: int, num_heads: int, *, projection: bool = False, shared: bool = False
) -> dict[str, Source]:
    """Canonical name → `tf.train.Checkpoint` object path of a Model Garden `BertEncoder`
    (`projection`: with an `embedding_width` other than the hidden size, as ELECTRA's) or
    `AlbertEncoder` (`shared`: one transformer layer, stored once, as `layer_0`).

    Paths are relative to the encoder object and lack "/.ATTRIBUTES/VARIABLE_VALUE". The first
    spelling is the subclassed encoder's attributes; the second the functional encoder's
    `layer_with_weights-N` (embeddings 0-3, the embedding projection when there is one, the
    transformer layers, then the pooler).
    """
    shift = 4 + int(projection)
    layers = 1 if shared else num_layers
    return _model_garden_table(
        layers,
        num_heads,
        embeddings={
            "word_embeddings": ("_embedding_layer", "layer_with_weights-0"),
            "position_embeddings": ("_position_embedding_layer", "layer_with_weights-1"),
            "token_type_embeddings": ("_type_embedding_layer", "layer_with_weights-2"),
            "layer_norm": ("_embedding_norm_layer", "layer_with_weights-3"),
        },
        layer_names=lambda i: (f"_transformer_layers/{i}", f"layer_with_weights-{shift + i}"),
        parts={
            "attention/query": "_attention_layer/_query_dense",
            "attention/key": "_attention_layer/_key_dense",
            "attention/value": "_attention_layer/_value_dense",
            "attention/output": "_attention_layer/_output_dense",
            "attention/layer_norm": "_attention_layer_norm",
            "intermediate": "_intermediate_dense",
            "output": "_output_dense",
            "output/layer_norm": "_output_layer_norm",
        },
        pooler=("_pooler_layer", f"layer_with_weights-{shift + layers}"),
        projection=("_embedding_projection", "layer_with_weights-4") if projection else (),
    )


def tf2_variable_table(
    num_layers: int,
    num_heads: int,
    scope: str = "",
    *,
    projection: bool = False,
    shared: bool = False,
) -> dict[str, Source]:
    """Canonical name → `tf.Variable.name` (without ":0") in a Model Garden encoder.

    These are the names TF Hub's TF2 BERT SavedModels hold, and the names bertfit's own
    `convert --to tf-hub` writes. `scope` is what comes before them when the encoder was built
    inside another object's name scope ("bert_encoder_v2/" for an `EncoderConfig(type="bert_v2")`
    export); see `tf2_variable_scope`. `projection`: factorised embeddings
    (`embedding_projection`, as TF Hub's ELECTRA and ALBERT have); `shared`: an `AlbertEncoder`,
    whose one layer is `transformer/...` (no index), named `layer_0` here.
    """
    table = _model_garden_table(
        1 if shared else num_layers,
        num_heads,
        embeddings={
            "word_embeddings": ("word_embeddings",),
            "position_embeddings": ("position_embedding",),
            "token_type_embeddings": ("type_embeddings",),
            "layer_norm": ("embeddings/layer_norm",),
        },
        layer_names=(lambda i: ("transformer",))
        if shared
        else (lambda i: (f"transformer/layer_{i}",)),
        parts={
            "attention/query": "self_attention/query",
            "attention/key": "self_attention/key",
            "attention/value": "self_attention/value",
            "attention/output": "self_attention/attention_output",
            "attention/layer_norm": "self_attention_layer_norm",
            "intermediate": "intermediate",
            "output": "output",
            "output/layer_norm": "output_layer_norm",
        },
        pooler=("pooler_transform",),
        projection=("embedding_projection",) if projection else (),
    )
    if not scope:
        return table
    return {
        canonical: dataclasses.replace(source, names=tuple(scope + n for n in source.names))
        for canonical, source in table.items()
    }


TF2_WORD_EMBEDDINGS = "word_embeddings/embeddings"
TF2_FIRST_QUERY = "transformer/layer_0/self_attention/query/kernel"
TF2_SHARED_QUERY = "transformer/self_attention/query/kernel"  # AlbertEncoder's one layer
TF2_PROJECTION = "embedding_projection/kernel"
TF2_POOLER = "pooler_transform/kernel"


def tf2_variable_scope(names) -> str | None:
    """The scope Model Garden encoder variables sit in: "" for `BertEncoder`, a name scope such
    as "bert_encoder_v2/" for an encoder built inside another Keras object; None if the names
    are not a Model Garden encoder's. The scope is just a name, so any one is accepted when the
    first layer's query kernel sits in it too."""
    names = set(names)
    found = [
        name.removesuffix(TF2_WORD_EMBEDDINGS)
        for name in names
        if name == TF2_WORD_EMBEDDINGS or name.endswith("/" + TF2_WORD_EMBEDDINGS)
    ]
    for scope in sorted(found, key=len):
        if scope + TF2_FIRST_QUERY in names:
            return scope
    return None


def tf2_encoder_scope(names) -> str | None:
    """As `tf2_variable_scope`, for every Model Garden encoder: a `BertEncoder` (first layer
    `transformer/layer_0/...`) or an `AlbertEncoder` (its one layer `transformer/...`)."""
    names = set(names)
    scope = tf2_variable_scope(names)
    if scope is not None:
        return scope
    found = [
        name.removesuffix(TF2_WORD_EMBEDDINGS)
        for name in names
        if name == TF2_WORD_EMBEDDINGS or name.endswith("/" + TF2_WORD_EMBEDDINGS)
    ]
    return next((s for s in sorted(found, key=len) if s + TF2_SHARED_QUERY in names), None)


def tf2_family(names, scope: str = "") -> str:
    """The family a Model Garden encoder's variable names show: "ALBERT" (`AlbertEncoder`: one
    shared layer), "ELECTRA" (`BertEncoder` with an `embedding_projection`, as TF Hub's ELECTRA
    exports) or "BERT". An ELECTRA whose embedding width is its hidden size (ELECTRA-base,
    -large) has exactly BERT's names and architecture, and reads as BERT."""
    names = set(names)
    if scope + TF2_SHARED_QUERY in names:
        return "ALBERT"
    return "ELECTRA" if scope + TF2_PROJECTION in names else "BERT"


# ---- Google's original TF1 ALBERT (google-research/albert `modeling.py`) ----
# One layer, stored once under transformer/group_0/inner_group_0 and applied num_hidden_layers
# times; kernels are stored 2-D ([in, out]) as in BERT's TF1 checkpoints.

_ALBERT_DENSE = {
    "attention/query": "attention_1/self/query",
    "attention/key": "attention_1/self/key",
    "attention/value": "attention_1/self/value",
    "attention/output": "attention_1/output/dense",
    "intermediate": "ffn_1/intermediate/dense",
    "output": "ffn_1/intermediate/output/dense",
}
_ALBERT_NORMS = {"attention/layer_norm": "LayerNorm", "output/layer_norm": "LayerNorm_1"}
TF1_ALBERT_LAYER = "encoder/transformer/group_0/inner_group_0/"
TF1_ALBERT_PROJECTION = "encoder/embedding_hidden_mapping_in/"


def tf1_albert_table(prefix: str = "bert/") -> dict[str, Source]:
    """Canonical name → Google TF1 ALBERT variable name (one group of one shared layer)."""
    table = dict(tf1_table(0, prefix))
    for p in ("kernel", "bias"):
        table[f"embeddings/projection/{p}"] = Source((f"{prefix}{TF1_ALBERT_PROJECTION}{p}",))
    layer = prefix + TF1_ALBERT_LAYER
    for ours, theirs in _ALBERT_DENSE.items():
        for p in ("kernel", "bias"):
            table[f"layer_0/{ours}/{p}"] = Source((f"{layer}{theirs}/{p}",))
    for ours, theirs in _ALBERT_NORMS.items():
        for p in ("gamma", "beta"):
            table[f"layer_0/{ours}/{p}"] = Source((f"{layer}{theirs}/{p}",))
    return table


def tf1_family(names, prefix: str = "bert/") -> str:
    """ "ALBERT" when Google's names hold ALBERT's shared layer, else "BERT"."""
    marker = prefix + TF1_ALBERT_LAYER
    return "ALBERT" if any(n.startswith(marker) for n in names) else "BERT"


def google_table(family: str, num_layers: int, prefix: str = "bert/") -> dict[str, Source]:
    return tf1_albert_table(prefix) if family == "ALBERT" else tf1_table(num_layers, prefix)


def identify(names) -> str | None:
    """Which naming scheme a set of stored names follows: "hf", "tf1", "tf2-variables" or None."""
    names = set(names)
    if "bert/embeddings/word_embeddings" in names:
        return "tf1"
    if tf2_encoder_scope(names) is not None:
        return "tf2-variables"
    if {HF_WORD_EMBEDDINGS, f"bert.{HF_WORD_EMBEDDINGS}"} & names:
        return "hf"
    return None
