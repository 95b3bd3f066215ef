"""The encoder families bertfit loads from Hugging Face directories: how each family's
`config.json` reads as a `BertConfig`, and where each weight lives in its state dict.

A family is a `Family`: a config translation, a name table (canonical name → `Source`, see
`checkpoints.names`) and the state-dict prefixes its task models add. Everything else (the
encoder's layers, the tokenizer) follows from the `BertConfig` and the checkpoint's own
tokenizer files.

Examples:
>>> family_of({"model_type": "roberta"}).name
'RoBERTa'
>>> sorted(SUPPORTED)[:3]
['albert', 'bert', 'camembert']
"""

from __future__ import annotations

from pathlib import Path

from bertfit.checkpoints.families import (
    albert,
    bert,
    deberta,
    distilbert,
    electra,
    eurobert,
    gte,
    modernbert,
    mpnet,
    nomic_bert,
    roberta,
)
from bertfit.checkpoints.families.family import Family
from bertfit.errors import CheckpointError

# Every family bertfit loads from Hugging Face directories, in the order messages name them; one
# module per family (docs/adding_a_family.md).
FAMILIES: tuple[Family, ...] = (
    bert.FAMILY,
    electra.FAMILY,
    distilbert.FAMILY,
    albert.FAMILY,
    *roberta.FAMILIES,
    modernbert.FAMILY,
    eurobert.FAMILY,
    deberta.FAMILY,
    mpnet.FAMILY,
    gte.FAMILY,
    nomic_bert.FAMILY,
)

# model_type -> its family.
SUPPORTED: dict[str, Family] = {
    model_type: family for family in FAMILIES for model_type in family.model_types
}


def supported_names() -> str:
    """The supported families, as a sentence part: "BERT, ELECTRA, ..."."""
    return ", ".join(dict.fromkeys(family.name for family in SUPPORTED.values()))


def family_of(config: dict, where: Path | str = "config.json") -> Family:
    """The family of a Hugging Face `config.json` dict; an unknown `model_type` is refused in
    one sentence. Without a `model_type`, its `architectures` decide when they name one family
    (see `family_from_architectures`); with neither, BERT (Google's `bert_config.json`)."""
    model_type = config.get("model_type")
    if model_type is None:
        return family_from_architectures(config.get("architectures"), where) or SUPPORTED["bert"]
    if not isinstance(model_type, str) or model_type not in SUPPORTED:
        raise CheckpointError(
            f"{where}: this is a {model_type!r} model (config.json's model_type), which bertfit "
            f"does not support. Supported families: {supported_names()}."
        )
    return SUPPORTED[model_type]


def family_from_architectures(architectures, where: Path | str = "config.json") -> Family | None:
    """The one family that a config.json's `architectures` (transformers class names such as
    "AlbertForMaskedLM") all belong to; None when there are none; refused when they name no
    supported family or several.

    Examples:
    >>> family_from_architectures(["XLMRobertaForSequenceClassification"]).name
    'XLM-RoBERTa'
    """
    if not architectures:
        return None
    names = architectures if isinstance(architectures, list) else [architectures]
    found = {_family_of_class(name) for name in names}
    if len(found) != 1 or None in found:
        raise CheckpointError(
            f"{where} has no model_type, and its architectures {names} do not name one family "
            f'bertfit supports ({supported_names()}). Add the model\'s "model_type" (e.g. '
            '"bert", "roberta", "albert") to config.json.'
        )
    return found.pop()


def _family_of_class(name) -> Family | None:
    """The family whose class prefix `name` has, followed by "Model" or "For..."."""
    if not isinstance(name, str):
        return None
    for family in SUPPORTED.values():
        rest = name.removeprefix(family.hf_class)
        if rest != name and (rest in ("Model", "PreTrainedModel") or rest.startswith("For")):
            return family
    return None
