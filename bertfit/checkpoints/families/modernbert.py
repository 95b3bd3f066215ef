"""ModernBERT (`ModernBertModel`): pre-LayerNorm layers with a fused query/key/value projection,
rotary position embeddings, alternating global and sliding-window attention and a GeGLU
feed-forward (`bertfit.model.modernbert`); no position table, no token types, no pooler.

`config.json` comes in two spellings: the released checkpoints' (`global_rope_theta`,
`local_rope_theta`, `global_attn_every_n_layers`) and transformers 5's (`rope_parameters` per
layer type, `layer_types`); both read as the same `BertConfig`.
"""

from __future__ import annotations

import dataclasses

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import Source, transposed
from bertfit.errors import CheckpointError
from bertfit.model.config import BertConfig
from bertfit.model.modernbert import ModernBertSettings

_GLOBAL, _LOCAL = "full_attention", "sliding_attention"  # transformers' layer types


def _rope_theta(values: dict, layer_type: str, old_key: str, default: float | None) -> float | None:
    parameters = (values.get("rope_parameters") or {}).get(layer_type) or {}
    rope_type = parameters.get("rope_type", parameters.get("type", "default"))
    scaling = values.get("rope_scaling")
    if rope_type != "default" or scaling:
        raise CheckpointError(
            f"this ModernBERT scales its rotary embeddings ({scaling or parameters}); bertfit "
            "loads ModernBERTs with the default rotary embeddings, as the released ones have."
        )
    theta = parameters.get("rope_theta", values.get(old_key, default))
    return None if theta is None else float(theta)


def _global_every(values: dict, num_layers: int) -> int:
    """`global_attn_every_n_layers`, or the period of `layer_types` (global at 0, n, 2n...)."""
    layer_types = values.get("layer_types")
    if not layer_types:
        return int(values.get("global_attn_every_n_layers", 3))
    for every in range(1, num_layers + 1):
        expected = [_LOCAL if i % every else _GLOBAL for i in range(num_layers)]
        if list(layer_types) == expected:
            return every
    raise CheckpointError(
        f"this ModernBERT's layer_types {layer_types} do not alternate as global attention "
        "every n layers (0, n, 2n, ...); bertfit loads that pattern only, as the released "
        "ModernBERTs have."
    )


def read_config(values: dict) -> BertConfig:
    num_layers = values.get("num_hidden_layers", 22)
    global_theta = _rope_theta(values, _GLOBAL, "global_rope_theta", 160_000.0)
    # Old configs may leave `local_rope_theta` null: the local layers then use the global base.
    local_theta = _rope_theta(values, _LOCAL, "local_rope_theta", 10_000.0)
    pooling = values.get("classifier_pooling", "cls")
    if pooling not in ("cls", "mean"):
        raise CheckpointError(f"classifier_pooling {pooling!r}: expected 'cls' or 'mean'.")
    settings = ModernBertSettings(
        global_rope_theta=global_theta,
        local_rope_theta=global_theta if local_theta is None else local_theta,
        local_attention=int(values.get("local_attention", 128)),
        global_attn_every_n_layers=_global_every(values, num_layers),
        norm_bias=bool(values.get("norm_bias", False)),
        attention_bias=bool(values.get("attention_bias", False)),
        mlp_bias=bool(values.get("mlp_bias", False)),
        mlp_dropout=float(values.get("mlp_dropout", 0.0)),
        classifier_pooling=pooling,
        max_sequence_length=int(values.get("max_position_embeddings", 8192)),
    )
    pad_token_id = values.get("pad_token_id")
    return BertConfig(
        vocab_size=values.get("vocab_size", 50368),
        hidden_size=values.get("hidden_size", 768),
        num_hidden_layers=num_layers,
        num_attention_heads=values.get("num_attention_heads", 12),
        intermediate_size=values.get("intermediate_size", 1152),
        hidden_act=values.get("hidden_activation", "gelu"),
        hidden_dropout_prob=float(values.get("embedding_dropout", 0.0)),
        attention_probs_dropout_prob=float(values.get("attention_dropout", 0.0)),
        max_position_embeddings=settings.max_sequence_length,
        type_vocab_size=0,
        layer_norm_eps=float(values.get("norm_eps", 1e-5)),
        initializer_range=values.get("initializer_range", 0.02),
        model_type="modernbert",
        absolute_positions=False,
        has_pooler=False,
        pad_token_id=50283 if pad_token_id is None else pad_token_id,
        variant=dataclasses.asdict(settings),
    )


def _norm(prefix: str) -> dict[str, Source]:
    return {"gamma": Source((f"{prefix}.weight",)), "beta": Source((f"{prefix}.bias",))}


def _dense(prefix: str) -> dict[str, Source]:
    return {"kernel": transposed(f"{prefix}.weight"), "bias": Source((f"{prefix}.bias",))}


def table(config: BertConfig) -> dict[str, Source]:
    """Canonical name -> `ModernBertModel` state-dict key (biases listed whether or not the
    config has them: only the encoder's variables are looked up)."""
    names = {"embeddings/word_embeddings": Source(("embeddings.tok_embeddings.weight",))}
    parts = {
        "embeddings/layer_norm": _norm("embeddings.norm"),
        "encoder/final_norm": _norm("final_norm"),
    }
    for i in range(config.num_hidden_layers):
        layer = f"layers.{i}"
        parts |= {
            f"layer_{i}/attention/layer_norm": _norm(f"{layer}.attn_norm"),
            f"layer_{i}/attention/qkv": _dense(f"{layer}.attn.Wqkv"),
            f"layer_{i}/attention/output": _dense(f"{layer}.attn.Wo"),
            f"layer_{i}/mlp/layer_norm": _norm(f"{layer}.mlp_norm"),
            f"layer_{i}/mlp/input": _dense(f"{layer}.mlp.Wi"),
            f"layer_{i}/mlp/output": _dense(f"{layer}.mlp.Wo"),
        }
    for ours, sources in parts.items():
        names |= {f"{ours}/{p}": source for p, source in sources.items()}
    return names


FAMILY = Family(
    name="ModernBERT",
    model_types=("modernbert",),
    tokenizer="bpe",
    hf_class="ModernBert",
    read_config=read_config,
    table=table,
    prefixes=("model.",),
    # The masked-LM head (`head.dense`, `head.norm`, `decoder`) and the classifiers' heads.
    ignored=("head.", "decoder.", "classifier.", "qa_outputs."),
    optional=(),
)
