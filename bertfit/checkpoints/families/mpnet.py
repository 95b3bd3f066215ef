"""MPNet (`MPNetModel`): BERT's post-LayerNorm layers under their own names, RoBERTa's positions
(position ids from `padding_idx + 1`, transformers' `padding_idx` being 1 whatever the config's
`pad_token_id`), no token types, and a relative attention bias shared by every layer
(`bertfit.model.mpnet`). `MPNetModel` has a pooler; the task models (`MPNetFor...`) do not."""

from __future__ import annotations

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import HF_IGNORED_PREFIXES, Source, hf_table
from bertfit.model.config import BertConfig
from bertfit.model.mpnet import MPNetSettings

PADDING_IDX = 1  # transformers' MPNetEmbeddings.padding_idx

# BERT's state-dict names -> MPNet's, within a layer.
_RENAMED = {
    ".attention.self.query.": ".attention.attn.q.",
    ".attention.self.key.": ".attention.attn.k.",
    ".attention.self.value.": ".attention.attn.v.",
    ".attention.output.dense.": ".attention.attn.o.",
    ".attention.output.LayerNorm.": ".attention.LayerNorm.",
}


def read_config(values: dict) -> BertConfig:
    settings = MPNetSettings(
        relative_attention_num_buckets=int(values.get("relative_attention_num_buckets", 32))
    )
    return BertConfig.from_dict(
        {
            **values,
            "model_type": "mpnet",
            "type_vocab_size": 0,
            "position_offset": PADDING_IDX + 1,
            "pad_token_id": values.get("pad_token_id", 1),
            "variant": {"relative_attention_num_buckets": settings.relative_attention_num_buckets},
        }
    )


def _renamed(name: str) -> str:
    for bert, mpnet in _RENAMED.items():
        name = name.replace(bert, mpnet)
    return name


def table(config: BertConfig) -> dict[str, Source]:
    names = {
        ours: Source(tuple(_renamed(n) for n in source.names), source.to_encoder,
                     source.from_encoder)
        for ours, source in hf_table(config.num_hidden_layers).items()
        if ours != "embeddings/token_type_embeddings"
    }  # fmt: skip
    names["encoder/relative_attention_bias"] = Source(("encoder.relative_attention_bias.weight",))
    return names


FAMILY = Family(
    name="MPNet",
    model_types=("mpnet",),
    tokenizer="wordpiece",
    hf_class="MPNet",
    read_config=read_config,
    table=table,
    prefixes=("mpnet.",),
    ignored=HF_IGNORED_PREFIXES + ("lm_head.",),
)
