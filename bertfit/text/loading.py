"""The tokenizer a checkpoint folder ships, whatever its family: WordPiece, SentencePiece or
byte-level BPE, read from the files it has.

In order of preference: `tokenizer.json` (all that transformers 5 saves), `vocab.txt`,
`spiece.model` / `sentencepiece.bpe.model` / `spm.model`, `vocab.json` + `merges.txt`. Special
tokens come from the files (`tokenizer_config.json`, `special_tokens_map.json`, tokenizer.json's
`added_tokens` and `post_processor`); config.json's `model_type` picks the family's template only
when the files do not say. Casing comes from the checkpoint, never from its path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bertfit.errors import CheckpointError

SENTENCEPIECE_FILES = ("spiece.model", "sentencepiece.bpe.model", "spm.model")
LOOKED_FOR = ("tokenizer.json", "vocab.txt", *SENTENCEPIECE_FILES, "vocab.json + merges.txt")

# What transformers 5 builds from a sentencepiece file, per family (tokenization_<family>.py):
# special tokens, the pair template, and whether pieces shift for fairseq's first four ids.
_FAMILIES = {
    "xlm-roberta": {
        "cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
        "mask_token": "<mask>", "pair_separators": 2, "second_type_id": 0, "fairseq": True,
    },
    "albert": {
        "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "<pad>", "unk_token": "<unk>",
        "mask_token": "[MASK]", "pair_separators": 1, "second_type_id": 1, "fairseq": False,
    },
    "deberta-v2": {
        "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
        "mask_token": "[MASK]", "pair_separators": 1, "second_type_id": 1, "fairseq": False,
    },
}  # fmt: skip
_FAMILY_OF_FILE = {
    "sentencepiece.bpe.model": "xlm-roberta",
    "spiece.model": "albert",
    "spm.model": "deberta-v2",
}
_FAMILY_ALIASES = {
    "camembert": "xlm-roberta",
    "deberta-v3": "deberta-v2",
    "xlm_roberta": "xlm-roberta",
}
_KINDS = {"WordPiece": "wordpiece", "Unigram": "sentencepiece", "BPE": "bpe"}


def tokenizer_kind(folder: str | os.PathLike) -> str | None:
    """The kind of tokenizer `folder` ships ("wordpiece", "sentencepiece" or "bpe"), read from
    the file names (and tokenizer.json's model type) without building it; `None` if none.

    Examples:
    >>> tokenizer_kind("/nonexistent") is None
    True
    """
    path = Path(folder)
    if (path / "tokenizer.json").is_file():
        model = json.loads((path / "tokenizer.json").read_text("utf-8")).get("model", {})
        return _KINDS.get(model.get("type"))
    if (path / "vocab.txt").is_file():
        return "wordpiece"
    if any((path / name).is_file() for name in SENTENCEPIECE_FILES):
        return "sentencepiece"
    if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
        return "bpe"
    return None


def load_tokenizer(
    folder: str | os.PathLike,
    *,
    lower_case: bool | None = None,
    strip_accents: bool | None = None,
    model_type: str | None = None,
):
    """The in-graph tokenizer of a checkpoint folder: a `BertTokenizer`,
    `SentencePieceTokenizer` or `ByteLevelBPETokenizer`, each with `tokenize`, `__call__`,
    `pack`, `special_ids`, `vocab_size`, `kind` and `save`.

    Args:
        folder: the checkpoint (or run) folder.
        lower_case: overrides the checkpoint's casing (WordPiece only).
        strip_accents: overrides the checkpoint's accent stripping (WordPiece only).
        model_type: config.json's `model_type` ("xlm-roberta", "albert", "deberta-v2", ...);
            picks the special tokens and pair template when the files do not say. Read from
            `folder/config.json` when not given.

    Raises:
        CheckpointError: the folder has none of the tokenizer files, or they are malformed.

    Examples:
    >>> from bertfit.checkpoints.registry import resolve
    >>> tokenizer = load_tokenizer(resolve("minilm-l6"))
    >>> tokenizer.kind, tokenizer.tokenize(["Hello, world!"]).to_list()
    ('wordpiece', [[7592, 1010, 2088, 999]])
    """
    path = Path(folder)
    model_type = model_type or _config_model_type(path)
    config = _read_json(path / "tokenizer_config.json")
    if (path / "tokenizer.json").is_file():
        spec = _read_json(path / "tokenizer.json")
        return _from_tokenizer_json(spec, config, lower_case, strip_accents)
    if (path / "vocab.txt").is_file():
        from bertfit.text.tokenizer import BertTokenizer

        return BertTokenizer.from_pretrained_dir(path, lower_case, strip_accents)
    for name in SENTENCEPIECE_FILES:
        if (path / name).is_file():
            family = _family(model_type) or _FAMILY_OF_FILE[name]
            return _from_sentencepiece_file(path / name, family, config, path)
    if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
        from bertfit.text.bpe import ByteLevelBPETokenizer

        return ByteLevelBPETokenizer.from_files(
            path / "vocab.json", path / "merges.txt", **_special_tokens(config, path)
        )
    raise CheckpointError(
        f"{path} has no tokenizer: looked for {', '.join(LOOKED_FOR)}. Pass the folder of a "
        "Hugging Face checkpoint that ships its tokenizer files."
    )


def _from_tokenizer_json(spec: dict, config: dict, lower_case, strip_accents):
    kind = (spec.get("model") or {}).get("type")
    if kind == "WordPiece":
        from bertfit.text.tokenizer import BertTokenizer

        overrides = {"lower_case": lower_case, "strip_accents": strip_accents}
        return BertTokenizer.from_tokenizer_json(spec, config, **overrides)
    if kind == "Unigram":
        from bertfit.text.sentencepiece import SentencePieceTokenizer

        pad = config.get("pad_token")
        pad = pad.get("content") if isinstance(pad, dict) else pad
        return SentencePieceTokenizer.from_tokenizer_json(spec, pad_token=pad)
    if kind == "BPE":
        from bertfit.text.bpe import ByteLevelBPETokenizer

        return ByteLevelBPETokenizer.from_tokenizer_json(spec)
    raise CheckpointError(
        f"tokenizer.json's model is {kind!r}; bertfit tokenizes WordPiece, Unigram and BPE."
    )


def _from_sentencepiece_file(file: Path, family: str, config: dict, folder: Path):
    """What transformers 5 builds from a bare sentencepiece file for `family`."""
    from bertfit.text.sentencepiece import SentencePieceTokenizer, parse_model_proto

    defaults = _FAMILIES[family]
    specials = {**{k: v for k, v in defaults.items() if k.endswith("_token")},
                **_special_tokens(config, folder)}  # fmt: skip
    model = parse_model_proto(file.read_bytes())
    if model["model_type"] != 1:
        raise CheckpointError(
            f"{file} is a sentencepiece model of type {model['model_type']}, not Unigram (1); "
            "bertfit tokenizes Unigram sentencepiece models."
        )
    vocab = [(piece, score) for piece, score, _ in model["pieces"]]
    if defaults["fairseq"]:  # fairseq's <s> <pad> </s> <unk>, then the pieces after spm's 3
        vocab = [(specials[k], 0.0) for k in ("cls_token", "pad_token", "sep_token", "unk_token")]
        vocab += [(piece, score) for piece, score, _ in model["pieces"][3:]]
    tokens = [piece for piece, _ in vocab]
    for name in ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token"):
        if specials[name] not in tokens:
            vocab.append((specials[name], 0.0))
            tokens.append(specials[name])
    spec = {
        "model": {"type": "Unigram", "unk_id": tokens.index(specials["unk_token"]), "vocab": vocab},
        "normalizer": {
            "type": "Sequence",
            "normalizers": _family_normalizers(family, model, config),
        },
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": _family_pre_tokenizers(family)},
        "added_tokens": [
            {"content": specials[name], "lstrip": False, "rstrip": False, "special": True}
            for name in ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token")
        ],
    }
    return SentencePieceTokenizer.from_tokenizer_json(
        spec,
        cls_token=specials["cls_token"],
        sep_token=specials["sep_token"],
        pad_token=specials["pad_token"],
        pair_separators=defaults["pair_separators"],
        second_type_id=defaults["second_type_id"],
    )


def _family_normalizers(family: str, model: dict, config: dict) -> list[dict]:
    import base64

    charsmap = model["normalizer"].get("precompiled_charsmap", b"")
    precompiled = (
        [{"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()}]
        if charsmap
        else []
    )
    if family == "albert":
        steps = [
            {"type": "Replace", "pattern": {"String": q}, "content": '"'} for q in ("``", "''")
        ]
        if not config.get("keep_accents", False):
            steps += [{"type": "NFKD"}, {"type": "StripAccents"}]
        if config.get("do_lower_case", True):
            steps.append({"type": "Lowercase"})
        return steps + precompiled
    if family == "deberta-v2":
        steps = [{"type": "Lowercase"}] if config.get("do_lower_case", False) else []
        return steps + [
            {"type": "Replace", "pattern": {"Regex": r"\s{2,}|[\n\r\t]"}, "content": " "},
            {"type": "NFC"},
            {"type": "Strip", "strip_left": False, "strip_right": True},
        ]
    return precompiled


def _family_pre_tokenizers(family: str) -> list[dict]:
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                 "split": True}  # fmt: skip
    return [metaspace] if family == "deberta-v2" else [{"type": "WhitespaceSplit"}, metaspace]


def _family(model_type: str | None) -> str | None:
    if model_type is None:
        return None
    name = _FAMILY_ALIASES.get(model_type, model_type)
    return name if name in _FAMILIES else None


def _config_model_type(folder: Path) -> str | None:
    return _read_json(folder / "config.json").get("model_type")


def _special_tokens(config: dict, folder: Path) -> dict:
    """`*_token` entries of tokenizer_config.json over special_tokens_map.json, as strings."""
    merged = {**_read_json(folder / "special_tokens_map.json"), **config}
    tokens = {}
    for name in ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token",
                 "bos_token", "eos_token"):  # fmt: skip
        token = merged.get(name)
        token = token.get("content") if isinstance(token, dict) else token
        if isinstance(token, str):
            tokens[name] = token
    return tokens


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text("utf-8"))
    except json.JSONDecodeError as error:
        raise CheckpointError(
            f"{path}:{error.lineno}:{error.colno}: not valid JSON ({error.msg}); restore the "
            "file from the checkpoint's source."
        ) from error
