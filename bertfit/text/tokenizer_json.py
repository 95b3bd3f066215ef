"""Reading the parts of a Hugging Face `tokenizer.json` that every tokenizer kind shares: the
special tokens written in text (`added_tokens`), the pair template (`post_processor`), the
padding token and the flattened normalizer and pre-tokenizer sequences; what bertfit accepts of
a Unigram or BPE model; and writing one for GPT-2's byte-level BPE (RoBERTa's `vocab.json` +
`merges.txt`). No TensorFlow: the in-graph tokenizers and the host one (`bertfit.text.host`)
read a file through the same functions."""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from bertfit.errors import CheckpointError

# The regexes of the `Split` pre-tokenizers (before a ByteLevel that splits no more) bertfit's
# byte-level BPE rebuilds: Llama 3's, which EuroBERT's tokenizer keeps.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPLIT_PATTERNS = (LLAMA3_SPLIT,)


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


def packing(spec: Mapping, **overrides) -> dict:
    """What a tokenizer.json packs with, as `pack_inputs` names it: the `cls_token`,
    `sep_token`, `pair_separators` and `second_type_id` of its post_processor (none when it adds
    no special tokens) and the `pad_token` of its padding; `overrides` that are not None win.

    Examples:
    >>> processor = {"type": "BertProcessing", "cls": ["[CLS]", 1], "sep": ["[SEP]", 2]}
    >>> found = packing({"post_processor": processor}, pad_token="[PAD]")
    >>> found["cls_token"], found["pad_token"], found["pair_separators"], found["second_type_id"]
    ('[CLS]', '[PAD]', 1, 1)
    """
    found = {
        "pad_token": (spec.get("padding") or {}).get("pad_token"),
        **template(spec.get("post_processor")),
    }
    found.update({name: value for name, value in overrides.items() if value is not None})
    return found


def with_template(spec: Mapping, packing: Mapping, ids: Mapping[str, int]) -> dict:
    """`spec` whose `post_processor` and `padding` say `packing` (`cls_token`, `sep_token`,
    `pair_separators`, `second_type_id`, `pad_token`; `ids` their ids), so that
    `packing(spec)` reads them back: what a tokenizer.json saved with its settings holds. A
    packing without a template (`cls_token` None) keeps the spec's post_processor.

    Examples:
    >>> settings = {"cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>",
    ...             "pair_separators": 2, "second_type_id": 0}
    >>> ids = {"<s>": 0, "<pad>": 1, "</s>": 2}
    >>> packing(with_template({}, settings, ids)) == settings
    True
    """
    out = dict(spec)
    if packing.get("pad_token") is not None:
        padding = {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None,
                   "pad_type_id": 0, **(spec.get("padding") or {})}  # fmt: skip
        pad = packing["pad_token"]
        out["padding"] = {**padding, "pad_token": pad, "pad_id": ids[pad]}
    cls, sep = packing.get("cls_token"), packing.get("sep_token")
    if cls is None:
        return out
    second = packing.get("second_type_id", 1)
    separators = [{"SpecialToken": {"id": sep, "type_id": 0}}] * packing.get("pair_separators", 1)
    pair = [{"SpecialToken": {"id": cls, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
            *separators, {"Sequence": {"id": "B", "type_id": second}},
            {"SpecialToken": {"id": sep, "type_id": second}}]  # fmt: skip
    out["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [pair[0], pair[1], separators[0]],
        "pair": pair,
        "special_tokens": {
            token: {"id": token, "ids": [ids[token]], "tokens": [token]} for token in (cls, sep)
        },
    }
    return out


def default_pad_token(cls_token: str | None, known: Collection[str]) -> str | None:
    """A byte-level BPE's padding token when its files name none: the first of `<pad>`,
    `[PAD]`, `<|padding|>`, `<|endoftext|>` it knows (`[PAD]` first beside a `[CLS]`-style
    `cls_token`); None when it knows none of them.

    Examples:
    >>> default_pad_token("[CLS]", {"<pad>", "[PAD]"}), default_pad_token("<s>", {"<pad>"})
    ('[PAD]', '<pad>')
    """
    candidates = ["<pad>", "[PAD]", "<|padding|>", "<|endoftext|>"]
    if (cls_token or "").startswith("["):  # BERT-style names: [PAD]
        candidates.insert(0, candidates.pop(1))
    return next((token for token in candidates if token in known), None)


def check_unigram(model: Mapping) -> None:
    """A tokenizer.json's Unigram `model` as bertfit tokenizes it: a list of [piece, score]
    pairs, an `unk_id` among them, and no `byte_fallback`."""
    vocab = model.get("vocab")
    if not isinstance(vocab, list) or not all(
        isinstance(entry, list | tuple) and len(entry) == 2 and isinstance(entry[0], str)
        and isinstance(entry[1], int | float) and not isinstance(entry[1], bool)
        for entry in vocab
    ):  # fmt: skip
        raise CheckpointError(
            "its Unigram model's vocab is not a list of [piece, score] pairs; restore the "
            "file from the checkpoint's source."
        )
    unk_id = model.get("unk_id")
    if not isinstance(unk_id, int) or isinstance(unk_id, bool) or not 0 <= unk_id < len(vocab):
        raise CheckpointError(
            f"its Unigram model's unk_id {unk_id!r} is not the id of a piece (0 to "
            f"{len(vocab) - 1}); restore the file from the checkpoint's source."
        )
    if model.get("byte_fallback"):
        raise CheckpointError(
            "tokenizer.json's Unigram model uses byte_fallback, which bertfit's "
            "SentencePiece tokenizer does not support yet."
        )


def is_byte_level(spec: Mapping) -> bool:
    """Whether a BPE tokenizer.json is GPT-2's byte-level kind (a ByteLevel pre-tokenizer)
    rather than a SentencePiece-style BPE over characters (mmBERT's, Gemma's, Llama 2's).

    Examples:
    >>> is_byte_level({"pre_tokenizer": {"type": "ByteLevel"}}), is_byte_level({})
    (True, False)
    """
    steps = flatten(spec.get("pre_tokenizer"), "pretokenizers")
    return any(step.get("type") == "ByteLevel" for step in steps)


def bpe_settings(spec: Mapping) -> dict:
    """The `BPEConfig` fields a tokenizer.json's BPE model, pre-tokenizer and normalizer set
    (`unk_token`, `fuse_unk`, `ignore_merges`, `byte_fallback`, and `add_prefix_space`,
    `use_regex`, `split_pattern`, `nfc` of a byte-level BPE or `prepend_metaspace` of a
    SentencePiece-style one: `is_byte_level`).

    Raises:
        CheckpointError: they describe something bertfit's BPE does not rebuild (another
            model or pre-tokenizer, BPE dropout, a subword prefix, ...).
    """
    model = _model_settings(spec.get("model") or {})
    if not is_byte_level(spec):
        return {**model, **_metaspace_settings(spec)}
    if model["byte_fallback"]:
        raise CheckpointError(
            "tokenizer.json's BPE has byte_fallback=true beside a ByteLevel pre-tokenizer; "
            "bertfit reads byte fallback in SentencePiece-style BPEs only (no pre-tokenizer, "
            "spaces written \u2581 by the normalizer: mmBERT, Gemma)."
        )
    return {
        **model,
        **_pre_tokenizer_settings(spec.get("pre_tokenizer")),
        "nfc": _normalizer_is_nfc(spec.get("normalizer")),
    }


def _model_settings(model: Mapping) -> dict:
    if model.get("type", "BPE") != "BPE" or "merges" not in model:
        raise CheckpointError(
            f"tokenizer.json has a {model.get('type')!r} model; ByteLevelBPETokenizer reads BPE "
            "models only (WordPiece checkpoints use BertTokenizer)."
        )
    if model.get("dropout") not in (None, 0, 0.0):
        raise CheckpointError(
            f"tokenizer.json's BPE has dropout={model['dropout']}: random merges are not "
            "supported; set it to null."
        )
    for name in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(name):
            raise CheckpointError(
                f"tokenizer.json's BPE has {name}={model[name]!r}: a WordPiece-like BPE, which "
                "bertfit does not read (only byte-level BPE and SentencePiece-style BPE)."
            )
    return {
        "unk_token": model.get("unk_token"),
        "fuse_unk": bool(model.get("fuse_unk")),
        "ignore_merges": bool(model.get("ignore_merges")),
        "byte_fallback": bool(model.get("byte_fallback")),
    }


def _pre_tokenizer_settings(pre_tokenizer: Mapping | None) -> dict:
    """ByteLevel alone (GPT-2's split, or none), or a known `Split` then a ByteLevel that
    splits no more (Llama 3's: `SPLIT_PATTERNS`)."""
    steps = flatten(pre_tokenizer, "pretokenizers") if pre_tokenizer else []
    split = steps[0] if len(steps) == 2 and steps[0].get("type") == "Split" else None
    byte_level = steps[-1] if steps and len(steps) == 1 + (split is not None) else None
    pattern = (split or {}).get("pattern", {}).get("Regex")
    if split is not None and (
        pattern not in SPLIT_PATTERNS
        or split.get("behavior") != "Isolated"
        or split.get("invert")
        or (byte_level or {}).get("use_regex", True)
    ):
        byte_level = None
    if not byte_level or byte_level.get("type") != "ByteLevel":
        raise CheckpointError(
            f"tokenizer.json's pre_tokenizer is {json.dumps(pre_tokenizer)[:120]}; only the "
            "ByteLevel pre-tokenizer (GPT-2/RoBERTa/ModernBERT), or Llama 3's Split before it "
            "(EuroBERT), is supported."
        )
    return {
        "add_prefix_space": bool(byte_level.get("add_prefix_space", True)),
        "use_regex": bool(byte_level.get("use_regex", True)),
        "split_pattern": pattern,
    }


_METASPACE = "\u2581"  # SentencePiece's "▁", which stands for a space
_SPACES_AS_METASPACE = {"type": "Replace", "pattern": {"String": " "}, "content": _METASPACE}
_PREPEND_METASPACE = {"type": "Prepend", "prepend": _METASPACE}
# transformers 5's GemmaTokenizer writes this pre-tokenizer; after the normalizer has written
# every space as "▁" it splits nothing.
_SPLIT_ON_SPACES = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                    "invert": False}  # fmt: skip


def _metaspace_settings(spec: Mapping) -> dict:
    """A SentencePiece-style BPE: spaces written "▁" by a Replace normalizer (Gemma's,
    mmBERT's), a "▁" prepended first (Llama 2's), and no pre-tokenizer that splits."""
    steps = flatten(spec.get("normalizer"), "normalizers")
    prepend = _PREPEND_METASPACE in steps
    if sorted(map(json.dumps, steps)) != sorted(
        map(json.dumps, [_SPACES_AS_METASPACE] + [_PREPEND_METASPACE] * prepend)
    ):
        raise CheckpointError(
            f"tokenizer.json's normalizer is {json.dumps(spec.get('normalizer'))[:160]}; a BPE "
            "without a ByteLevel pre-tokenizer must write spaces as \u2581 with a Replace "
            "normalizer (mmBERT, Gemma), after a Prepend of \u2581 or not (Llama 2)."
        )
    pre_tokenizer = spec.get("pre_tokenizer")
    if pre_tokenizer not in (None, _SPLIT_ON_SPACES):
        raise CheckpointError(
            f"tokenizer.json's pre_tokenizer is {json.dumps(pre_tokenizer)[:120]}; bertfit's "
            "BPE reads the ByteLevel pre-tokenizer (GPT-2/RoBERTa/ModernBERT), Llama 3's Split "
            "before it (EuroBERT), or none with spaces written \u2581 by the normalizer "
            "(mmBERT, Gemma)."
        )
    return {"prepend_metaspace": prepend, "add_prefix_space": False, "use_regex": False}


def _normalizer_is_nfc(normalizer: Mapping | None) -> bool:
    if normalizer is None:
        return False
    steps = normalizer.get("normalizers") if normalizer.get("type") == "Sequence" else [normalizer]
    kinds = [step.get("type") for step in steps]
    if kinds in ([], ["NFC"]):
        return kinds == ["NFC"]
    raise CheckpointError(
        f"tokenizer.json's normalizer is {kinds}; ByteLevelBPETokenizer supports none or NFC."
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


def byte_level_bpe(
    vocab: Mapping[str, int],
    merges: Sequence[Sequence[str]],
    added: Sequence[Mapping],
    *,
    add_prefix_space: bool,
    use_regex: bool = True,
    split_pattern: str | None = None,
) -> dict:
    """A tokenizer.json (parsed) of GPT-2's byte-level BPE, with no normalizer, template or
    padding: what `tokenizers.Tokenizer.from_str` and `ByteLevelBPETokenizer.from_tokenizer_json`
    read.

    Args:
        vocab: token to id.
        merges: the merges in rank order, as `(a, b)` pairs.
        added: the added tokens, `{"content", "id", "lstrip", "rstrip", "normalized",
            "special"}` each.
        add_prefix_space: the ByteLevel pre-tokenizer's option of that name.
        use_regex: split with the GPT-2 regex.
        split_pattern: a `Split` pre-tokenizer's regex before the ByteLevel (Llama 3's), or None.
    """
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": add_prefix_space,
        "trim_offsets": True,
        "use_regex": use_regex,
    }
    pre_tokenizer = byte_level
    if split_pattern is not None:
        split = {"type": "Split", "pattern": {"Regex": split_pattern}, "behavior": "Isolated",
                 "invert": False}  # fmt: skip
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [split, byte_level]}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"single_word": False, **token} for token in added],
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": {**byte_level, "add_prefix_space": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": dict(vocab),
            "merges": [list(pair) for pair in merges],
        },
    }


def read_merges(path: str | os.PathLike) -> list[tuple[str, ...]]:
    """The merges of a `merges.txt` in rank order, each split on its space (the `#version`
    line and blank lines skipped)."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    return [tuple(line.split(" ")) for line in lines if line and not line.startswith("#version")]


def from_bpe_files(
    vocab: Mapping[str, int],
    merges: Sequence[Sequence[str]],
    *,
    special_tokens: Sequence[str],
    mask_token: str | None,
    add_prefix_space: bool,
) -> dict:
    """The tokenizer.json (parsed) of RoBERTa's classic `vocab.json` + `merges.txt`: the
    `special_tokens` the vocab has are kept whole in text, `mask_token` taking the spaces
    before it (RoBERTa's `lstrip`); no template or padding (`packing` names them).

    Examples:
    >>> spec = from_bpe_files({"<s>": 0, "<mask>": 1, "a": 2}, [], special_tokens=["<s>",
    ...     "<mask>", "<pad>"], mask_token="<mask>", add_prefix_space=False)
    >>> [(t["content"], t["id"], t["lstrip"]) for t in spec["added_tokens"]]
    [('<s>', 0, False), ('<mask>', 1, True)]
    """
    added = [
        {"content": token, "id": vocab[token], "lstrip": token == mask_token, "rstrip": False,
         "normalized": False, "special": True}
        for token in dict.fromkeys(special_tokens)
        if token in vocab
    ]  # fmt: skip
    return byte_level_bpe(vocab, merges, added, add_prefix_space=add_prefix_space)
