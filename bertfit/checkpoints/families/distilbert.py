"""DistilBERT (`DistilBertModel`): BERT's post-LayerNorm layers under their own names and config
keys, no token types, no pooler."""

from __future__ import annotations

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import Source, hf_embeddings, hf_layer
from bertfit.model.config import BertConfig

_DENSE = {
    "attention/query": "attention.q_lin",
    "attention/key": "attention.k_lin",
    "attention/value": "attention.v_lin",
    "attention/output": "attention.out_lin",
    "intermediate": "ffn.lin1",
    "output": "ffn.lin2",
}
_NORMS = {"attention/layer_norm": "sa_layer_norm", "output/layer_norm": "output_layer_norm"}


def read_config(values: dict) -> BertConfig:
    return BertConfig(
        vocab_size=values["vocab_size"],
        hidden_size=values["dim"],
        num_hidden_layers=values["n_layers"],
        num_attention_heads=values["n_heads"],
        intermediate_size=values["hidden_dim"],
        hidden_act=values.get("activation", "gelu"),
        hidden_dropout_prob=values.get("dropout", 0.1),
        attention_probs_dropout_prob=values.get("attention_dropout", 0.1),
        max_position_embeddings=values.get("max_position_embeddings", 512),
        type_vocab_size=0,
        layer_norm_eps=1e-12,
        initializer_range=values.get("initializer_range", 0.02),
        model_type="distilbert",
        has_pooler=False,
        pad_token_id=values.get("pad_token_id", 0),
    )


def table(config: BertConfig) -> dict[str, Source]:
    names = hf_embeddings(("word_embeddings", "position_embeddings"))
    for i in range(config.num_hidden_layers):
        names |= hf_layer(i, f"transformer.layer.{i}", _DENSE, _NORMS)
    return names


FAMILY = Family(
    name="DistilBERT",
    model_types=("distilbert",),
    tokenizer="wordpiece",
    hf_class="DistilBert",
    read_config=read_config,
    table=table,
    prefixes=("distilbert.",),
    ignored=("vocab_", "pre_classifier.", "classifier.", "qa_outputs.", "embeddings.position_ids"),
)
