"""Reading the parts of a Hugging Face `tokenizer.json` that every tokenizer kind shares: the
special tokens written in text (`added_tokens`), the pair template (`post_processor`) and the
flattened normalizer and pre-tokenizer sequences."""

from __future__ import annotations

from bertfit.errors import CheckpointError


def flatten(component: dict | None, key: str) -> list[dict]:
    """A normalizer or pre-tokenizer as a flat list of steps (`Sequence`s unrolled).

    Examples:
    >>> flatten({"type": "Sequence", "normalizers": [{"type": "NFC"}]}, "normalizers")
    [{'type': 'NFC'}]
    """
    if component is None:
        return []
    if component.get("type") == "Sequence":
        return [step for part in component[key] for step in flatten(part, key)]
    return [component]


def template(post_processor: dict | None) -> dict:
    """The pair template as `pack_inputs` takes it: the `cls`/`sep` tokens, separators between
    the segments of a pair, and the second segment's type id (BERT's when absent).

    Examples:
    >>> template({"type": "RobertaProcessing", "cls": ["<s>", 0], "sep": ["</s>", 2]})
    {'cls_token': '<s>', 'sep_token': '</s>', 'pair_separators': 2, 'second_type_id': 0}
    """
    kind = (post_processor or {}).get("type")
    if kind in ("RobertaProcessing", "BertProcessing"):
        roberta = kind == "RobertaProcessing"
        return {
            "cls_token": post_processor["cls"][0],
            "sep_token": post_processor["sep"][0],
            "pair_separators": 2 if roberta else 1,
            "second_type_id": 0 if roberta else 1,
        }
    if kind == "TemplateProcessing":
        return _template_processing(post_processor)
    if kind is None:
        return {}
    raise CheckpointError(
        f"tokenizer.json's post_processor {kind!r} is not supported; bertfit packs with "
        "TemplateProcessing, RobertaProcessing or BertProcessing templates."
    )


def _template_processing(post_processor: dict) -> dict:
    """`[CLS] $A [SEP] $B:1 [SEP]:1` (or `<s> $A </s> </s> $B </s>`) read item by item."""
    pair = post_processor["pair"]
    kinds = [_template_item(item) for item in pair]
    a, b = kinds.index("A"), kinds.index("B")
    if a != 1 or b != len(kinds) - 2 or len(set(kinds[b + 1 :] + kinds[a + 1 : b])) != 1:
        raise CheckpointError(
            f"tokenizer.json's pair template {' '.join(kinds)} is not '[CLS] $A [SEP]... $B "
            "[SEP]'; bertfit cannot pack it."
        )
    return {
        "cls_token": kinds[0],
        "sep_token": kinds[-1],
        "pair_separators": b - a - 1,
        "second_type_id": pair[b]["Sequence"]["type_id"],
    }


def _template_item(item: dict) -> str:
    """ "A" or "B" for a sequence, else the special token's name."""
    if "Sequence" in item:
        return item["Sequence"]["id"]
    return item["SpecialToken"]["id"]


def added_tokens(spec: dict) -> list[dict]:
    """`added_tokens` as `{"content", "id", "lstrip", "rstrip", "special"}` dicts."""
    keys = ("content", "id", "lstrip", "rstrip", "special")
    return [{key: token.get(key, False) for key in keys} for token in spec.get("added_tokens", [])]
