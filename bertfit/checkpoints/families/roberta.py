"""RoBERTa, XLM-RoBERTa and CamemBERT (`RobertaModel`): BERT's layers and names, position ids
that start after the padding index (`padding_idx + 1`), one token type."""

from __future__ import annotations

from bertfit.checkpoints.families.family import Family
from bertfit.checkpoints.names import HF_IGNORED_PREFIXES, hf_table
from bertfit.model.config import BertConfig


def read_config(model_type: str):
    def read(values: dict) -> BertConfig:
        pad = values.get("pad_token_id", 1)
        return BertConfig.from_dict(
            {**values, "model_type": model_type, "pad_token_id": pad, "position_offset": pad + 1}
        )

    return read


def _family(name: str, model_type: str, tokenizer: str, hf_class: str) -> Family:
    return Family(
        name=name,
        model_types=(model_type,),
        tokenizer=tokenizer,
        hf_class=hf_class,
        read_config=read_config(model_type),
        table=lambda config: hf_table(config.num_hidden_layers),
        prefixes=("roberta.",),
        ignored=HF_IGNORED_PREFIXES + ("lm_head.",),
    )


FAMILIES = (
    _family("RoBERTa", "roberta", "bpe", "Roberta"),
    _family("XLM-RoBERTa", "xlm-roberta", "sentencepiece", "XLMRoberta"),
    _family("CamemBERT", "camembert", "sentencepiece", "Camembert"),
)
