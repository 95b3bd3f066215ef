"""WordPiece's vocabulary and settings, read from a checkpoint's files without TensorFlow: what
`BertTokenizer` (in the graph) and `bertfit.text.host` (on the host) both build from.

A `vocab.txt` (one token a line, the line number is the id) with its `tokenizer_config.json`,
or a `tokenizer.json` with a WordPiece model: either way a list of tokens and a
`TokenizerConfig` (casing, accents, CJK handling, special tokens, the longest word).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

from bertfit.errors import CheckpointError
from bertfit.text import tokenizer_json


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
    """How a `BertTokenizer` normalizes text; saved next to `vocab.txt` to rebuild it.

    Args:
        lower_case: lowercase the text (uncased checkpoints).
        strip_accents: remove accents; `None` follows `lower_case`, as in Hugging Face.
        tokenize_chinese_chars: make every CJK ideograph its own word.
        unk_token: the token for words the vocabulary cannot spell.
        cls_token: the token that starts every packed sequence.
        sep_token: the token that ends each segment.
        pad_token: the token that fills packed sequences up to their length.
        mask_token: the masked-language-model token; kept whole when it occurs in text.
        max_chars_per_word: longer words become `unk_token`.
        pair_separators: `sep_token`s between the two segments of a pair (BERT 1; MPNet 2:
            `<s> a </s></s> b </s>`).
        second_type_id: the type id of a pair's second segment (BERT 1; MPNet 0).

    Examples:
    >>> config = TokenizerConfig(lower_case=False)
    >>> dataclasses.asdict(config)["lower_case"]
    False
    """

    lower_case: bool = True
    strip_accents: bool | None = None
    tokenize_chinese_chars: bool = True
    unk_token: str = "[UNK]"
    cls_token: str = "[CLS]"
    sep_token: str = "[SEP]"
    pad_token: str = "[PAD]"
    mask_token: str = "[MASK]"
    max_chars_per_word: int = 100
    pair_separators: int = 1
    second_type_id: int = 1

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """The tokens that stay whole when written in a text."""
        return (self.unk_token, self.cls_token, self.sep_token, self.pad_token, self.mask_token)


def from_folder(
    path: str | os.PathLike,
    lower_case: bool | None = None,
    strip_accents: bool | None = None,
    defaults: dict | None = None,
) -> tuple[list[str], TokenizerConfig]:
    """The tokens and settings of a Hugging Face model folder's `vocab.txt` and
    `tokenizer_config.json`.

    Args:
        path: the folder.
        lower_case: overrides `do_lower_case` from `tokenizer_config.json`.
        strip_accents: overrides `strip_accents` from `tokenizer_config.json`.
        defaults: `TokenizerConfig` fields of the family's tokenizer class where the files do
            not say (MPNet's special tokens and pair template: `FAMILY_DEFAULTS`); BERT's
            when None.
    """
    folder = Path(path)
    if not (folder / "vocab.txt").is_file():
        raise CheckpointError(
            f"{folder} has no vocab.txt; pass the folder of a BERT checkpoint "
            "that ships its WordPiece vocabulary."
        )
    config = {**(defaults or {}), **read_tokenizer_config(folder)}
    if lower_case is not None:
        config["lower_case"] = lower_case
    if strip_accents is not None:
        config["strip_accents"] = strip_accents
    return read_vocab(folder / "vocab.txt"), TokenizerConfig(**config)


def from_tokenizer_json(
    spec: dict, config: dict | None = None, **overrides
) -> tuple[list[str], TokenizerConfig]:
    """The tokens and settings a Hugging Face `tokenizer.json` (parsed) with a `WordPiece`
    model describes: its vocab, its `BertNormalizer` settings and special tokens.

    Examples:
    >>> spec = {"model": {"vocab": {"[UNK]": 0, "a": 1}, "max_input_chars_per_word": "100"}}
    >>> from_tokenizer_json(spec)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    bertfit.errors.CheckpointError: its WordPiece max_input_chars_per_word is '100', not a ...

    Args:
        spec: the parsed tokenizer.json.
        config: the parsed tokenizer_config.json, for special tokens it alone names.
        **overrides: `TokenizerConfig` fields that win over the files (`None` is ignored).
    """
    model = spec["model"]
    ids = model["vocab"]
    if sorted(ids.values()) != list(range(len(ids))):  # any int, in any order, once each
        raise CheckpointError(
            "its WordPiece vocab does not give the ids 0 to "
            f"{len(ids) - 1} once each; restore the file from the checkpoint's source."
        )
    vocab = sorted(ids, key=ids.get)
    settings = {"unk_token": model.get("unk_token", "[UNK]")}
    settings["max_chars_per_word"] = chars = model.get("max_input_chars_per_word", 100)
    if not isinstance(chars, int) or isinstance(chars, bool) or chars < 1:
        raise CheckpointError(
            f"its WordPiece max_input_chars_per_word is {chars!r}, not a whole number of at "
            "least 1; restore the file from the checkpoint's source."
        )
    normalizer = spec.get("normalizer") or {}
    if normalizer.get("type") == "BertNormalizer":
        settings["lower_case"] = normalizer.get("lowercase", True)
        settings["strip_accents"] = normalizer.get("strip_accents")
        settings["tokenize_chinese_chars"] = normalizer.get("handle_chinese_chars", True)
    template = tokenizer_json.template(spec.get("post_processor"))
    settings.update(template)
    pad = (spec.get("padding") or {}).get("pad_token")
    settings.update({"pad_token": pad} if pad else {})
    names = ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token")
    settings.update({k: v for k, v in _config_tokens(config or {}).items() if k in names})
    settings.update({k: v for k, v in overrides.items() if v is not None})
    return vocab, TokenizerConfig(**settings)


def save(directory: str | os.PathLike, tokens: Sequence[str], config: TokenizerConfig) -> None:
    """Writes `vocab.txt` and `tokenizer_config.json`, from which `from_folder` reads the
    tokens and the config back (what a WordPiece tokenizer's `save` writes, in the graph or
    on the host)."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in tokens), "utf-8")
    names = {"lower_case": "do_lower_case", "max_chars_per_word": "max_chars_per_word"}
    values = {names.get(key, key): value for key, value in dataclasses.asdict(config).items()}
    (folder / "tokenizer_config.json").write_text(json.dumps(values, indent=2), "utf-8")


# What a family's tokenizer class builds from a bare `vocab.txt` where BERT's `BertTokenizer`
# differs (transformers' `MPNetTokenizer`: RoBERTa's special tokens and pair template around
# BERT's WordPiece); `tokenizer_config.json`'s tokens win over these.
FAMILY_DEFAULTS = {
    "mpnet": {
        "cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "[UNK]",
        "mask_token": "<mask>", "pair_separators": 2, "second_type_id": 0,
    },
}  # fmt: skip


def read_vocab(path: str | os.PathLike) -> list[str]:
    """Hugging Face's `load_vocab`: universal newlines, strip only the '\\n'."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f.readlines()]


def capitalised_tokens(tokens: Sequence[str]) -> list[str]:
    """The tokens with a capital letter, special tokens (`[CLS]`, `<s>`) left out.

    Examples:
    >>> capitalised_tokens(["[CLS]", "<s>", "the", "The", "##S"])
    ['The', '##S']
    """
    return [
        t
        for t in tokens
        if t != t.lower()
        and not (t.startswith("[") and t.endswith("]"))
        and not (t.startswith("<") and t.endswith(">"))
    ]


def guess_lower_case(tokens: Sequence[str]) -> bool:
    """Whether a vocab belongs to an uncased model: it has (almost) no capitalised tokens.

    Examples:
    >>> guess_lower_case(["[CLS]", "the", "film"]), guess_lower_case([*"ABCDEFGHIJ", "the"])
    (True, False)
    """
    return len(capitalised_tokens(tokens)) < max(10, len(tokens) // 100)


def read_tokenizer_config(folder: str | os.PathLike) -> dict:
    """The `TokenizerConfig` fields that a Hugging Face `tokenizer_config.json` in `folder`
    sets (`do_lower_case` as `lower_case`, ...); {} without one."""
    path = Path(folder) / "tokenizer_config.json"
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    config = {}
    for ours, theirs in [
        ("lower_case", "do_lower_case"),
        ("strip_accents", "strip_accents"),
        ("tokenize_chinese_chars", "tokenize_chinese_chars"),
    ]:
        if theirs in raw:
            config[ours] = raw[theirs]
    config.update(_config_tokens(raw))
    for name in ("max_chars_per_word", "pair_separators", "second_type_id"):  # bertfit's `save`
        if isinstance(raw.get(name), int) and not isinstance(raw[name], bool):
            config[name] = raw[name]
    return config


def _config_tokens(raw: dict) -> dict[str, str]:
    """The special tokens a tokenizer_config.json names (a serialized AddedToken's content)."""
    config = {}
    for name in ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token"):
        token = raw.get(name)
        if isinstance(token, dict):  # a serialized AddedToken
            token = token.get("content")
        if isinstance(token, str):
            config[name] = token
    return config
