"""GTE (`GteModel`; Alibaba's gte-base-en-v1.5, gte-large-en-v1.5, gte-multilingual-base):
BERT's embeddings without a position table, post-LayerNorm layers with rotary attention and a
gated feed-forward (`bertfit.model.rotary_glu`), no pooler in the base model.

`config.json` comes in two spellings, both read here: transformers 5's (`model_type` "gte",
`rope_parameters`) and the one of Alibaba's own code the checkpoints shipped with (`model_type`
"new", `rope_theta`, `rope_scaling`). Both write the same state dict (transformers converts it
on loading): a fused `qkv_proj`, a fused `up_gate_proj` (the up half, then the gate half). Their
`rope_scaling` of type "ntk" (gte-large-en-v1.5, gte-multilingual-base) is Alibaba's fixed
NTK-aware scaling, which transformers 5 does not compute; bertfit does (`model/rotary.py`)."""

from __future__ import annotations

import dataclasses

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import Source, hf_embeddings, hf_layer
from bertfit.errors import CheckpointError
from bertfit.model.config import BertConfig
from bertfit.model.gated_mlp import UP_GATE
from bertfit.model.rotary_glu import RotaryGluSettings

_DENSE = {
    "attention/qkv": "attention.qkv_proj",
    "attention/output": "attention.o_proj",
    "mlp/input": "mlp.up_gate_proj",
    "mlp/output": "mlp.down_proj",
}
_NORMS = {"attention/layer_norm": "attn_ln", "output/layer_norm": "mlp_ln"}


def _refuse(what: str) -> CheckpointError:
    return CheckpointError(
        f"this GTE {what}; bertfit loads GTE checkpoints as Alibaba released them (rotary "
        "positions, packed query/key/value, LayerNorm)."
    )


def _rope(values: dict) -> tuple[float, float]:
    """(rope theta, NTK factor) from either spelling of config.json."""
    parameters = dict(values.get("rope_parameters") or values.get("rope_scaling") or {})
    kind = parameters.get("rope_type", parameters.get("type", "default"))
    theta = parameters.get("rope_theta", values.get("rope_theta", 160_000.0))
    if kind == "default":
        return float(theta), 1.0
    if kind == "ntk" and parameters.get("mixed_b") is None:
        return float(theta), float(parameters.get("factor", 1.0))
    raise _refuse(f"scales its rotary embeddings as {parameters}")


def read_config(values: dict) -> BertConfig:
    if values.get("position_embedding_type", "rope") != "rope":
        raise _refuse(f"has position_embedding_type {values['position_embedding_type']!r}")
    if values.get("layer_norm_type", "layer_norm") != "layer_norm":
        raise _refuse(f"has layer_norm_type {values['layer_norm_type']!r}")
    if values.get("logn_attention_scale") or values.get("logn_attention_clip1"):
        raise _refuse("scales its attention by log(length) (logn_attention_scale)")
    if not values.get("pack_qkv", True):
        raise _refuse("stores its queries, keys and values apart (pack_qkv false)")
    theta, ntk_factor = _rope(values)
    hidden_dropout = float(values.get("hidden_dropout_prob", 0.1))
    settings = RotaryGluSettings(
        rope_theta=theta, ntk_factor=ntk_factor, mlp_layout=UP_GATE, mlp_dropout=hidden_dropout
    )
    return BertConfig.from_dict(
        {
            "vocab_size": 250048,
            "type_vocab_size": 1,
            "attention_probs_dropout_prob": 0.0,
            "max_position_embeddings": 8192,
            **values,
            "model_type": "gte",
            "absolute_positions": False,
            "has_pooler": False,
            "pad_token_id": values.get("pad_token_id", 1),
            "variant": dataclasses.asdict(settings),
        }
    )


def table(config: BertConfig) -> dict[str, Source]:
    names = hf_embeddings(("word_embeddings", "token_type_embeddings"))
    for i in range(config.num_hidden_layers):
        names |= hf_layer(i, f"encoder.layer.{i}", _DENSE, _NORMS)
    return names


FAMILY = Family(
    name="GTE",
    model_types=("gte", "new"),
    tokenizer="sentencepiece",
    hf_class="Gte",
    read_config=read_config,
    table=table,
    prefixes=("gte.", "new."),
    # The pooler of GteForSequenceClassification, and the task models' heads.
    ignored=("pooler.", "lm_head.", "classifier.", "qa_outputs."),
    optional=(),
    other_tokenizers=("wordpiece",),
)
