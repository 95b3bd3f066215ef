"""ALBERT (`AlbertModel`): factorised embeddings (`embedding_size` → hidden through
`embedding_hidden_mapping_in`) and one layer whose weights every layer shares."""

from __future__ import annotations

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import (
    HF_IGNORED_PREFIXES,
    Source,
    hf_embeddings,
    hf_layer,
    transposed,
)
from bertfit.errors import CheckpointError
from bertfit.model.config import BertConfig

_LAYER = "encoder.albert_layer_groups.0.albert_layers.0"
_DENSE = {
    "attention/query": "attention.query",
    "attention/key": "attention.key",
    "attention/value": "attention.value",
    "attention/output": "attention.dense",
    "intermediate": "ffn",
    "output": "ffn_output",
}
_NORMS = {
    "attention/layer_norm": "attention.LayerNorm",
    "output/layer_norm": "full_layer_layer_norm",
}


def read_config(values: dict) -> BertConfig:
    groups, inner = values.get("num_hidden_groups", 1), values.get("inner_group_num", 1)
    if (groups, inner) != (1, 1):
        raise CheckpointError(
            f"this ALBERT has num_hidden_groups={groups}, inner_group_num={inner}; bertfit "
            "loads ALBERTs with one shared layer (1, 1), as every released ALBERT has."
        )
    return BertConfig.from_dict(
        {
            **values,
            "model_type": "albert",
            "embedding_size": values.get("embedding_size", 128),
            "share_layers": True,
            "hidden_act": values.get("hidden_act", "gelu_new"),
        }
    )


def table(config: BertConfig) -> dict[str, Source]:
    names = hf_embeddings(("word_embeddings", "position_embeddings", "token_type_embeddings"))
    names["embeddings/projection/kernel"] = transposed("encoder.embedding_hidden_mapping_in.weight")
    names["embeddings/projection/bias"] = Source(("encoder.embedding_hidden_mapping_in.bias",))
    names |= hf_layer(0, _LAYER, _DENSE, _NORMS)
    names["pooler/kernel"] = transposed("pooler.weight")
    names["pooler/bias"] = Source(("pooler.bias",))
    return names


FAMILY = Family(
    name="ALBERT",
    model_types=("albert",),
    tokenizer="sentencepiece",
    hf_class="Albert",
    read_config=read_config,
    table=table,
    prefixes=("albert.",),
    ignored=HF_IGNORED_PREFIXES + ("predictions.", "sop_classifier."),
)
