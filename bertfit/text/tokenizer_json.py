"""Reading the parts of a Hugging Face `tokenizer.json` that every tokenizer kind shares: the
special tokens written in text (`added_tokens`), the pair template (`post_processor`) and the
flattened normalizer and pre-tokenizer sequences."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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


def template(processor: Mapping | None) -> dict:
    """The pair template as `pack_inputs` takes it: the `cls`/`sep` tokens, the separators
    between the segments of a pair and the second segment's type id; {} when the
    post_processor adds no special tokens (none, or ByteLevel's alone).

    Examples:
    >>> template({"type": "RobertaProcessing", "cls": ["<s>", 0], "sep": ["</s>", 2]})
    {'cls_token': '<s>', 'sep_token': '</s>', 'pair_separators': 2, 'second_type_id': 0}
    """
    if processor and processor.get("type") == "Sequence":  # e.g. [ByteLevel, Template]
        steps = [p for p in processor.get("processors", []) if p.get("type") != "ByteLevel"]
        processor = steps[0] if len(steps) == 1 else processor if steps else None
    kind = None if processor is None else processor.get("type")
    if kind in (None, "ByteLevel"):  # adds no special tokens
        return {}
    if kind in ("RobertaProcessing", "BertProcessing"):
        roberta = kind == "RobertaProcessing"
        return {
            "cls_token": processor["cls"][0],
            "sep_token": processor["sep"][0],
            "pair_separators": 2 if roberta else 1,
            "second_type_id": 0 if roberta else 1,
        }
    if kind == "TemplateProcessing":
        return _template_processing(processor)
    raise CheckpointError(
        f"tokenizer.json's post_processor {kind!r} is not supported; use RobertaProcessing, "
        "BertProcessing or a TemplateProcessing of the form [CLS] $A [SEP] ($B [SEP])."
    )


def _template_processing(processor: Mapping) -> dict:
    """The settings of a TemplateProcessing `[CLS] $A [SEP]` / `[CLS] $A [SEP]... $B:t [SEP]:t`."""
    names = processor.get("special_tokens", {})
    single = _template_items(processor["single"], names)
    pair = _template_items(processor.get("pair") or [], names)
    unsupported = CheckpointError(
        f"tokenizer.json's TemplateProcessing {processor.get('single')} / "
        f"{processor.get('pair')} is not of the form [CLS] $A [SEP] ($B [SEP]); it is not "
        "supported."
    )
    if [item for item, _ in single][1:2] != [("A", None)] or any(t for _, t in single):
        raise unsupported
    cls, sep = single[0][0], single[-1][0]
    if len(single) != 3 or cls[0] != "special" or sep[0] != "special":
        raise unsupported
    settings = {"cls_token": cls[1], "sep_token": sep[1]}
    if not pair:
        return {**settings, "pair_separators": 1, "second_type_id": 1}
    separators = len(pair) - 4  # [CLS] $A [SEP]... $B [SEP]
    expected = [cls, ("A", None)] + [sep] * separators + [("B", None), sep]
    second = pair[-2][1]
    types = [t for _, t in pair]
    if separators < 1 or [item for item, _ in pair] != expected:
        raise unsupported
    if any(types[:-2]) or types[-1] != second:
        raise unsupported
    return {**settings, "pair_separators": separators, "second_type_id": second}


def _template_items(items: Sequence[Mapping], names: Mapping) -> list[tuple[tuple, int]]:
    """A template as `(("special", token) or (sequence, None), type_id)` items."""
    out = []
    for item in items:
        if "SpecialToken" in item:
            special = item["SpecialToken"]
            tokens = names.get(special["id"], {}).get("tokens") or [special["id"]]
            if len(tokens) != 1:
                tokens = [None]  # several tokens for one name: not a [CLS]/[SEP] template
            out.append((("special", tokens[0]), special.get("type_id", 0)))
        else:
            out.append(((item["Sequence"]["id"], None), item["Sequence"].get("type_id", 0)))
    return out


def added_tokens(spec: dict) -> list[dict]:
    """`added_tokens` as `{"content", "id", "lstrip", "rstrip", "special"}` dicts."""
    keys = ("content", "id", "lstrip", "rstrip", "special")
    return [{key: token.get(key, False) for key in keys} for token in spec.get("added_tokens", [])]
