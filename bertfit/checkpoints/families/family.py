"""`Family`: how one encoder family's Hugging Face checkpoints read as a `BertConfig` and where
each of its weights lives in their state dicts. Each module of `checkpoints.families` defines its
family's (`FAMILY`, or `FAMILIES` for several that share a layout)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from bertfit.checkpoints.names import Source
from bertfit.model.config import BertConfig


@dataclasses.dataclass(frozen=True)
class Family:
    """One encoder family as Hugging Face stores it.

    Args:
        name: the family's name as people write it ("RoBERTa").
        model_types: the `model_type` values of its `config.json`.
        tokenizer: the kind of tokenizer its checkpoints ship ("wordpiece", "sentencepiece",
            "bpe"), to warn of another model's tokenizer files beside its weights.
        other_tokenizers: the other kinds some of its checkpoints ship (GTE's English
            checkpoints: BERT's WordPiece; its multilingual one: XLM-R's SentencePiece).
        hf_class: the prefix of its transformers classes ("Roberta" in `RobertaModel`,
            `RobertaForSequenceClassification`), read from `architectures` when a config.json
            has no `model_type`.
        read_config: `config.json`'s dict → `BertConfig`.
        table: the `BertConfig` → canonical name → `Source` in the state dict (without prefix).
        prefixes: what task models put before the encoder's keys ("roberta.").
        ignored: state-dict key prefixes that are known not to be encoder weights (heads).
        optional: canonical names a checkpoint may lack (left as initialised, and reported).
    """

    name: str
    model_types: tuple[str, ...]
    tokenizer: str
    hf_class: str
    read_config: Callable[[dict], BertConfig]
    table: Callable[[BertConfig], dict[str, Source]]
    prefixes: tuple[str, ...]
    ignored: tuple[str, ...] = ()
    optional: tuple[str, ...] = ("pooler/kernel", "pooler/bias")
    other_tokenizers: tuple[str, ...] = ()

    @property
    def tokenizers(self) -> tuple[str, ...]:
        """Every kind of tokenizer its checkpoints ship."""
        return (self.tokenizer, *self.other_tokenizers)
