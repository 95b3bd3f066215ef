"""EuroBERT (`EuroBertModel`; EuroBERT-210m, -610m, -2.1B): Llama's pre-RMSNorm layers attending
both ways, with rotary positions, grouped key/value heads and a SwiGLU feed-forward
(`bertfit.model.eurobert`); the token table alone below them, a final RMSNorm above, no pooler.
Its checkpoints ship Llama 3's byte-level BPE tokenizer (`<|begin_of_text|> a <|end_of_text|>`).

`config.json` gives the rotary base as `rope_theta` (the released checkpoints) or
`rope_parameters` (transformers 5); both read as the same `BertConfig`.
"""

from __future__ import annotations

import dataclasses

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import Source, hf_layer
from bertfit.errors import CheckpointError
from bertfit.model.config import BertConfig
from bertfit.model.eurobert import EuroBertSettings

_DENSE = {
    "attention/query": "self_attn.q_proj",
    "attention/key": "self_attn.k_proj",
    "attention/value": "self_attn.v_proj",
    "attention/output": "self_attn.o_proj",
    "mlp/gate": "mlp.gate_proj",
    "mlp/up": "mlp.up_proj",
    "mlp/output": "mlp.down_proj",
}
_NORMS = {"attention/layer_norm": "input_layernorm", "mlp/layer_norm": "post_attention_layernorm"}


def _refuse(what: str) -> CheckpointError:
    return CheckpointError(
        f"this EuroBERT has {what}; bertfit loads EuroBERTs as they were released (heads that "
        "split the hidden size, grouped key/value heads, rotary embeddings of a fixed base)."
    )


def _rope_theta(values: dict) -> float:
    parameters = values.get("rope_parameters") or {}
    scaling = values.get("rope_scaling")
    if parameters.get("rope_type", parameters.get("type", "default")) != "default" or scaling:
        raise _refuse(f"scaled rotary embeddings ({scaling or parameters})")
    return float(parameters.get("rope_theta", values.get("rope_theta", 10_000.0)))


def read_config(values: dict) -> BertConfig:
    heads, hidden = values.get("num_attention_heads", 12), values.get("hidden_size", 768)
    head_dim = values.get("head_dim")
    if head_dim not in (None, hidden // heads):
        raise _refuse(f"head_dim {head_dim}, not hidden_size / num_attention_heads")
    key_value_heads = int(values.get("num_key_value_heads") or heads)
    if heads % key_value_heads:
        raise _refuse(
            f"num_key_value_heads {key_value_heads}, which does not divide its "
            f"{heads} attention heads"
        )
    settings = EuroBertSettings(
        num_key_value_heads=key_value_heads,
        rope_theta=_rope_theta(values),
        attention_bias=bool(values.get("attention_bias", False)),
        mlp_bias=bool(values.get("mlp_bias", False)),
    )
    pad_token_id = values.get("pad_token_id")  # null in some: their end of text pads
    return BertConfig.from_dict(
        {
            "vocab_size": 128256,
            "hidden_act": "silu",
            "max_position_embeddings": 8192,
            **values,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": float(values.get("attention_dropout", 0.0)),
            "layer_norm_eps": float(values.get("rms_norm_eps", 1e-5)),
            "type_vocab_size": 0,
            "model_type": "eurobert",
            "absolute_positions": False,
            "has_pooler": False,
            "pad_token_id": 128001 if pad_token_id is None else pad_token_id,
            "variant": dataclasses.asdict(settings),
        }
    )


def table(config: BertConfig) -> dict[str, Source]:
    names = {
        "embeddings/word_embeddings": Source(("embed_tokens.weight",)),
        "encoder/final_norm/gamma": Source(("norm.weight",)),
    }
    for i in range(config.num_hidden_layers):
        names |= hf_layer(i, f"layers.{i}", _DENSE, _NORMS)
    return names


FAMILY = Family(
    name="EuroBERT",
    model_types=("eurobert",),
    tokenizer="bpe",
    hf_class="EuroBert",
    read_config=read_config,
    table=table,
    prefixes=("model.",),
    # The masked-LM head and the task models' heads.
    ignored=("lm_head.", "dense.", "classifier.", "qa_outputs."),
    optional=(),
)
