"""DeBERTa-v2 and DeBERTa-v3 (`DebertaV2Model`, `model_type` "deberta-v2"): BERT's embeddings
(v3: no position table, no token types), DeBERTa's layers (`bertfit.model.deberta`) and the
encoder's relative position table. DeBERTa (v1, `model_type` "deberta") is another architecture
and is not supported.

`config.json` defaults are DebertaV2Config's where BERT's differ: `layer_norm_eps` 1e-7,
`type_vocab_size` 0, `position_biased_input` true, no relative attention."""

from __future__ import annotations

import numpy as np

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import Source, hf_embeddings, hf_layer, hf_norm
from bertfit.errors import CheckpointError
from bertfit.model.config import BertConfig
from bertfit.model.deberta import DebertaSettings

_DENSE = {
    "attention/query": "attention.self.query_proj",
    "attention/key": "attention.self.key_proj",
    "attention/value": "attention.self.value_proj",
    "attention/position_key": "attention.self.pos_key_proj",
    "attention/position_query": "attention.self.pos_query_proj",
    "attention/output": "attention.output.dense",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
}
_NORMS = {
    "attention/layer_norm": "attention.output.LayerNorm",
    "output/layer_norm": "output.LayerNorm",
}


def _terms(value) -> list[str]:
    """`pos_att_type` as a list: older config files write "p2c|c2p"."""
    if value is None:
        return []
    if isinstance(value, str):
        return [term.strip() for term in value.lower().split("|") if term.strip()]
    return [str(term).strip().lower() for term in value]


def read_config(values: dict) -> BertConfig:
    hidden = values["hidden_size"]
    embedding_size = values.get("embedding_size") or hidden
    if embedding_size != hidden:
        raise CheckpointError(
            f"this DeBERTa has embedding_size {embedding_size} != hidden_size {hidden}; bertfit "
            "loads DeBERTa models whose embeddings are as wide as the hidden states (every "
            "released DeBERTa-v2/v3)."
        )
    heads = values["num_attention_heads"]
    head_size = values.get("attention_head_size")
    if head_size is not None and head_size * heads != hidden:
        raise CheckpointError(
            f"this DeBERTa has attention_head_size {head_size} x {heads} heads != hidden_size "
            f"{hidden}; bertfit supports heads that split the hidden size."
        )
    groups = values.get("conv_groups", 1)
    if values.get("conv_kernel_size", 0) > 0 and groups != 1:
        raise CheckpointError(
            f"this DeBERTa's convolution has conv_groups {groups}; bertfit supports 1."
        )
    max_positions = values.get("max_position_embeddings", 512)
    max_relative = values.get("max_relative_positions", -1)
    norm = [part.strip() for part in str(values.get("norm_rel_ebd", "none")).lower().split("|")]
    settings = DebertaSettings(
        relative_attention=bool(values.get("relative_attention", False)),
        position_buckets=values.get("position_buckets", -1),
        max_relative_positions=max_relative if max_relative >= 1 else max_positions,
        pos_att_type=_terms(values.get("pos_att_type")),
        share_att_key=bool(values.get("share_att_key", False)),
        norm_rel_ebd="layer_norm" in norm,
        conv_kernel_size=values.get("conv_kernel_size", 0),
        conv_act=values.get("conv_act", "tanh"),
    )
    return BertConfig.from_dict(
        {
            **values,
            "model_type": "deberta-v2",
            "max_position_embeddings": max_positions,
            "type_vocab_size": values.get("type_vocab_size", 0),
            "layer_norm_eps": values.get("layer_norm_eps", 1e-7),
            "embedding_size": None,
            "position_offset": 0,
            "absolute_positions": bool(values.get("position_biased_input", True)),
            "share_layers": False,
            "has_pooler": False,
            "pad_token_id": values.get("pad_token_id", 0) or 0,
            "variant": settings.to_dict(),
        }
    )


def _conv_kernel(*names: str) -> Source:
    """A PyTorch Conv1d weight [out, in, width] ↔ a Keras Conv1D kernel [width, in, out]."""
    swap = lambda a: np.transpose(a, (2, 1, 0))  # noqa: E731
    return Source(names, to_encoder=swap, from_encoder=swap)


def table(config: BertConfig) -> dict[str, Source]:
    settings = DebertaSettings(**config.variant)
    tables = ["word_embeddings"]
    if config.absolute_positions:
        tables.append("position_embeddings")
    if config.type_vocab_size:
        tables.append("token_type_embeddings")
    names = hf_embeddings(tuple(tables))
    terms = settings.pos_att_type if settings.relative_attention else ()
    dense = dict(_DENSE)
    if settings.share_att_key or "c2p" not in terms:
        del dense["attention/position_key"]
    if settings.share_att_key or "p2c" not in terms:
        del dense["attention/position_query"]
    for i in range(config.num_hidden_layers):
        names.update(hf_layer(i, f"encoder.layer.{i}", dense, _NORMS))
    if settings.conv_kernel_size > 0:
        names["layer_0/conv/kernel"] = _conv_kernel("encoder.conv.conv.weight")
        names["layer_0/conv/bias"] = Source(("encoder.conv.conv.bias",))
        for p in ("gamma", "beta"):
            names[f"layer_0/conv/layer_norm/{p}"] = hf_norm("encoder.conv.LayerNorm", p)
    if settings.relative_attention:
        names["encoder/relative_embeddings"] = Source(("encoder.rel_embeddings.weight",))
        if settings.norm_rel_ebd:
            for p in ("gamma", "beta"):
                names[f"encoder/relative_layer_norm/{p}"] = hf_norm("encoder.LayerNorm", p)
    return names


FAMILY = Family(
    name="DeBERTa-v3",
    model_types=("deberta-v2",),
    tokenizer="sentencepiece",
    hf_class="DebertaV2",
    read_config=read_config,
    table=table,
    prefixes=("deberta.",),
    ignored=(
        "embeddings.position_ids",
        # v3 checkpoints may keep an unused absolute table (HF ignores it on load too)
        "embeddings.position_embeddings.",
        "pooler.",
        "classifier.",
        "qa_outputs.",
        "cls.",
        "lm_predictions.",
        "mask_predictions.",
    ),
    optional=(),
)
