"""NomicBERT (`NomicBertModel`; nomic-embed-text-v1, -v1.5, nomic-bert-2048): BERT's embeddings
without a position table, post-LayerNorm layers with a fused query/key/value projection (`Wqkv`),
rotary attention and a SwiGLU feed-forward (`fc11` up, `fc12` gate, `fc2`), no biases
(`bertfit.model.rotary_glu`), no pooler in the base model.

`config.json` comes in two spellings, both read here: transformers 5's (`hidden_size`,
`rope_parameters`, ...) and the GPT-2-style one of Nomic's own code the checkpoints shipped with
(`n_embd`, `n_layer`, `rotary_emb_base`, `rotary_emb_fraction`, `qkv_proj_bias`, ...). Settings
of Nomic's code that no released encoder uses (pre-LayerNorm, RMSNorm, interleaved or scaled
rotary embeddings, parallel blocks, mixture-of-experts layers) are refused in one sentence.
"""

from __future__ import annotations

import dataclasses

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import Source, hf_embeddings, hf_layer
from bertfit.errors import CheckpointError
from bertfit.model.config import BertConfig
from bertfit.model.gated_mlp import SPLIT
from bertfit.model.rotary_glu import RotaryGluSettings

_DENSE = {
    "attention/qkv": "attn.Wqkv",
    "attention/output": "attn.out_proj",
    "mlp/up": "mlp.fc11",
    "mlp/gate": "mlp.fc12",
    "mlp/output": "mlp.fc2",
}
_NORMS = {"attention/layer_norm": "norm1", "output/layer_norm": "norm2"}
# Nomic's spelling -> transformers' (the original NomicBertConfig is GPT-2's).
_NAMES = {
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_inner": "intermediate_size",
    "n_positions": "max_position_embeddings",
    "layer_norm_epsilon": "layer_norm_eps",
    "resid_pdrop": "hidden_dropout_prob",
    "attn_pdrop": "attention_probs_dropout_prob",
}
# Settings of Nomic's code that its released encoders leave off, and what each means.
_UNSUPPORTED = {
    "prenorm": "pre-LayerNorm layers (prenorm)",
    "use_rms_norm": "RMSNorm (use_rms_norm)",
    "rotary_emb_interleaved": "interleaved rotary embeddings (rotary_emb_interleaved)",
    "rotary_scaling_factor": "scaled rotary embeddings (rotary_scaling_factor)",
    "parallel_block": "parallel attention and MLP blocks (parallel_block)",
    "causal": "causal attention (causal)",
    "num_experts": "mixture-of-experts layers (num_experts)",
}


def _refuse(what: str) -> CheckpointError:
    return CheckpointError(
        f"this NomicBERT uses {what}; bertfit loads NomicBERT encoders as Nomic released "
        "them (post-LayerNorm, SwiGLU, rotary embeddings of a fixed base)."
    )


def _activation(values: dict) -> str:
    if "hidden_act" in values:
        return values["hidden_act"]
    function = values.get("activation_function", "swiglu")
    if function != "swiglu":
        raise _refuse(f"the {function!r} feed-forward (activation_function)")
    return "silu"


def _theta(values: dict) -> float:
    parameters = values.get("rope_parameters") or {}
    if parameters.get("rope_type", parameters.get("type", "default")) != "default":
        raise _refuse(f"scaled rotary embeddings ({parameters})")
    return float(parameters.get("rope_theta", values.get("rotary_emb_base", 1000.0)))


def read_config(values: dict) -> BertConfig:
    for key, what in _UNSUPPORTED.items():
        if values.get(key):
            raise _refuse(what)
    values = {_NAMES.get(key, key): value for key, value in values.items()}
    heads, hidden = values.get("num_attention_heads", 12), values.get("hidden_size", 768)
    if values.get("intermediate_size") is None:  # GPT-2's n_inner null: four times hidden
        values["intermediate_size"] = 4 * hidden
    head_dim = values.get("head_dim")
    if head_dim is not None and head_dim * heads != hidden:
        raise _refuse(f"heads of {head_dim} x {heads} != hidden_size {hidden} (head_dim)")
    fraction = float(values.get("rotary_emb_fraction", 1.0))
    if not 0 < fraction <= 1:
        raise _refuse(f"rotary_emb_fraction {fraction} (no rotary positions)")
    settings = RotaryGluSettings(
        rope_theta=_theta(values),
        rotary_fraction=fraction,
        qkv_bias=bool(values.get("qkv_proj_bias", False)),
        attention_output_bias=bool(values.get("qkv_proj_bias", False)),
        mlp_layout=SPLIT,
        mlp_input_bias=bool(values.get("mlp_fc1_bias", False)),
        mlp_output_bias=bool(values.get("mlp_fc2_bias", False)),
    )
    return BertConfig.from_dict(
        {
            "vocab_size": 30528,
            "hidden_act": _activation(values),
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "max_position_embeddings": 2048,
            **{key: value for key, value in values.items() if key != "hidden_act"},
            "model_type": "nomic_bert",
            "absolute_positions": False,
            "has_pooler": False,
            "pad_token_id": values.get("pad_token_id", 0),
            "variant": dataclasses.asdict(settings),
        }
    )


def table(config: BertConfig) -> dict[str, Source]:
    names = hf_embeddings(("word_embeddings", "token_type_embeddings"), layer_norm="emb_ln")
    for i in range(config.num_hidden_layers):
        names |= hf_layer(i, f"encoder.layers.{i}", _DENSE, _NORMS)
    return names


FAMILY = Family(
    name="NomicBERT",
    model_types=("nomic_bert",),
    tokenizer="wordpiece",
    hf_class="NomicBert",
    read_config=read_config,
    table=table,
    prefixes=("nomic_bert.", "bert."),
    # The pooler of NomicBertForSequenceClassification, and the task models' heads.
    ignored=("pooler.", "cls.", "lm_head.", "classifier."),
    optional=(),
)
