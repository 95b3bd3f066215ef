"""EuroBERT (`EuroBertModel`): Llama's pre-RMSNorm layers attending both ways, with rotary
positions, grouped key/value heads and a SwiGLU feed-forward (`bertfit.model.eurobert`); the
token table alone below them, a final RMSNorm above, no pooler. Its checkpoints ship a Llama-3
byte-level BPE tokenizer (`<|begin_of_text|> a <|end_of_text|>`).

`config.json` gives the rotary base as `rope_theta` (the released checkpoints) or
`rope_parameters` (transformers 5); both read as the same `BertConfig`.
"""

from __future__ import annotations

import dataclasses

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import Source, transposed
from bertfit.errors import CheckpointError
from bertfit.model.config import BertConfig
from bertfit.model.eurobert import EuroBertSettings


def _rope_theta(values: dict) -> float:
    parameters = values.get("rope_parameters") or {}
    scaling = values.get("rope_scaling")
    rope_type = parameters.get("rope_type", parameters.get("type", "default"))
    if rope_type != "default" or scaling:
        raise CheckpointError(
            f"this EuroBERT scales its rotary embeddings ({scaling or parameters}); bertfit "
            "loads EuroBERTs with the default rotary embeddings, as the released ones have."
        )
    return float(parameters.get("rope_theta", values.get("rope_theta", 10_000.0)))


def read_config(values: dict) -> BertConfig:
    hidden = values.get("hidden_size", 768)
    heads = values.get("num_attention_heads", 12)
    head_dim = values.get("head_dim")
    if head_dim not in (None, hidden // heads):
        raise CheckpointError(
            f"this EuroBERT has head_dim {head_dim}, not hidden_size / num_attention_heads "
            f"({hidden} / {heads}); bertfit loads EuroBERTs whose heads split the hidden size, "
            "as the released ones do."
        )
    settings = EuroBertSettings(
        num_key_value_heads=int(values.get("num_key_value_heads") or heads),
        rope_theta=_rope_theta(values),
        attention_bias=bool(values.get("attention_bias", False)),
        mlp_bias=bool(values.get("mlp_bias", False)),
        max_sequence_length=int(values.get("max_position_embeddings", 8192)),
    )
    pad_token_id = values.get("pad_token_id")
    return BertConfig(
        vocab_size=values.get("vocab_size", 128256),
        hidden_size=hidden,
        num_hidden_layers=values.get("num_hidden_layers", 12),
        num_attention_heads=heads,
        intermediate_size=values.get("intermediate_size", 3072),
        hidden_act=values.get("hidden_act", "silu"),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=float(values.get("attention_dropout", 0.0)),
        max_position_embeddings=settings.max_sequence_length,
        type_vocab_size=0,
        layer_norm_eps=float(values.get("rms_norm_eps", 1e-5)),
        initializer_range=values.get("initializer_range", 0.02),
        model_type="eurobert",
        absolute_positions=False,
        has_pooler=False,
        pad_token_id=128001 if pad_token_id is None else pad_token_id,
        variant=dataclasses.asdict(settings),
    )


def table(config: BertConfig) -> dict[str, Source]:
    """Canonical name -> `EuroBertModel` state-dict key (biases listed whether or not the
    config has them: only the encoder's variables are looked up)."""
    names = {
        "embeddings/word_embeddings": Source(("embed_tokens.weight",)),
        "encoder/final_norm/gamma": Source(("norm.weight",)),
    }
    for i in range(config.num_hidden_layers):
        layer = f"layers.{i}"
        dense = {
            "attention/query": "self_attn.q_proj",
            "attention/key": "self_attn.k_proj",
            "attention/value": "self_attn.v_proj",
            "attention/output": "self_attn.o_proj",
            "mlp/gate": "mlp.gate_proj",
            "mlp/up": "mlp.up_proj",
            "mlp/output": "mlp.down_proj",
        }
        for ours, theirs in dense.items():
            names[f"layer_{i}/{ours}/kernel"] = transposed(f"{layer}.{theirs}.weight")
            names[f"layer_{i}/{ours}/bias"] = Source((f"{layer}.{theirs}.bias",))
        for ours, theirs in (("attention", "input"), ("mlp", "post_attention")):
            names[f"layer_{i}/{ours}/layer_norm/gamma"] = Source(
                (f"{layer}.{theirs}_layernorm.weight",)
            )
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
