"""BERT (`BertModel`; Google's `bert_config.json` too): the table its relatives start from."""

from __future__ import annotations

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import HF_IGNORED_PREFIXES, hf_table
from bertfit.model.config import BertConfig


def read_config(values: dict) -> BertConfig:
    return BertConfig.from_dict({**values, "model_type": "bert"})


FAMILY = Family(
    name="BERT",
    model_types=("bert",),
    tokenizer="wordpiece",
    hf_class="Bert",
    read_config=read_config,
    table=lambda config: hf_table(config.num_hidden_layers),
    prefixes=("bert.",),
    ignored=HF_IGNORED_PREFIXES,
)
