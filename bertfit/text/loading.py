"""The tokenizer a checkpoint folder ships, whatever its family: WordPiece, SentencePiece or
byte-level BPE, read from the files it has.

In order of preference: `tokenizer.json` (all that transformers 5 saves), `vocab.txt`,
`spiece.model` / `sentencepiece.bpe.model` / `spm.model`, `vocab.json` + `merges.txt`. Special
tokens come from the files (`tokenizer_config.json`, `special_tokens_map.json`, tokenizer.json's
`added_tokens` and `post_processor`); config.json's `model_type` picks the family's template only
when the files do not say. Casing comes from the checkpoint, never from its path.

Reading is apart from building, and needs no TensorFlow: `read_tokenizer_files` decides what
tokenizer the folder ships and with which settings (a `TokenizerFiles`); `load_tokenizer` builds
it in the graph, `bertfit.text.host.load_host_tokenizer` on the host with Hugging Face's
`tokenizers`, so both follow one reading of the files.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from bertfit.errors import BertfitError, CheckpointError, CheckpointWarning
from bertfit.text import tokenizer_json, wordpiece
from bertfit.text.vocab_map import VOCAB_MAP_FILE, read_vocab_map
from bertfit.text.wordpiece import TokenizerConfig

_T = TypeVar("_T")

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
        model = _read_json(path / "tokenizer.json").get("model")
        return _KINDS.get(model.get("type")) if isinstance(model, dict) else None
    if (path / "vocab.txt").is_file():
        return "wordpiece"
    if any((path / name).is_file() for name in SENTENCEPIECE_FILES):
        return "sentencepiece"
    if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
        return "bpe"
    return None


def bpe_style(folder: str | os.PathLike) -> str | None:
    """Which BPE `folder` ships: "byte-level" (GPT-2's, RoBERTa's, ModernBERT's), "byte
    fallback" (SentencePiece-style: mmBERT's, Gemma's) or None (not a BPE).

    Examples:
    >>> bpe_style("/nonexistent") is None
    True
    """
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():  # vocab.json + merges.txt: GPT-2's byte-level BPE
        return "byte-level" if tokenizer_kind(folder) == "bpe" else None
    spec = _read_json(path)  # once: Gemma's tokenizer.json is tens of megabytes
    model = spec.get("model")
    if not isinstance(model, dict) or _KINDS.get(model.get("type")) != "bpe":
        return None
    return "byte-level" if tokenizer_json.is_byte_level(spec) else "byte fallback"


@dataclasses.dataclass(frozen=True)
class TokenizerFiles:
    """What tokenizer a checkpoint folder ships, and with which settings, read from its files
    without building it: what the in-graph tokenizer (`build_in_graph`) and the host one
    (`bertfit.text.host.HostTokenizer.from_files`) are both built from.

    Args:
        file: the file it is built from (`vocab.json` for vocab.json + merges.txt); errors
            name it.
        kind: "wordpiece", "sentencepiece" or "bpe".
        vocab: WordPiece's tokens in id order.
        config: WordPiece's casing and special tokens, the overrides applied.
        spec: SentencePiece's and BPE's Hugging Face tokenizer.json (parsed): the folder's own,
            or one written from its sentencepiece or vocab.json + merges.txt files, complete
            enough for `tokenizers.Tokenizer.from_str`.
        packing: SentencePiece's and BPE's special tokens and template (`cls_token`,
            `sep_token`, `pad_token`, `pair_separators`, `second_type_id`); a tokenizer
            without a template (a BPE whose tokenizer.json adds no special tokens) has
            `cls_token` None.
        kept: a pruned vocabulary's kept ids (`bertfit.text.vocab_map`), or None.
    """

    file: Path
    kind: str
    vocab: list[str] | None = None
    config: TokenizerConfig | None = None
    spec: dict | None = None
    packing: dict = dataclasses.field(default_factory=dict)
    kept: np.ndarray | None = None


def read_tokenizer_files(
    folder: str | os.PathLike,
    *,
    lower_case: bool | None = None,
    strip_accents: bool | None = None,
    model_type: str | None = None,
) -> TokenizerFiles:
    """The tokenizer of a checkpoint folder, as its files describe it; the arguments are
    `load_tokenizer`'s.

    Raises:
        CheckpointError: the folder has none of the tokenizer files, or they are malformed.

    Examples:
    >>> from bertfit.checkpoints.registry import resolve
    >>> files = read_tokenizer_files(resolve("minilm-l6"))
    >>> files.file.name, files.kind, files.config.lower_case, len(files.vocab)
    ('tokenizer.json', 'wordpiece', True, 30522)
    """
    path = Path(folder)
    model_type = model_type or _config_model_type(path)
    config = _read_json(path / "tokenizer_config.json")
    file = _tokenizer_file(path)

    def read() -> TokenizerFiles:
        if file.name == "tokenizer.json":
            return _tokenizer_json(file, _read_json(file), config, lower_case, strip_accents)
        if file.name == "vocab.txt":
            return vocab_txt_files(path, lower_case, strip_accents, model_type)
        if file.name in SENTENCEPIECE_FILES:
            family = _family(model_type) or _FAMILY_OF_FILE[file.name]
            return _sentencepiece_file(file, family, config, path)
        return _bpe_files(path, config)

    return with_vocab_map(named_errors(file, read), path)


def with_vocab_map(files: TokenizerFiles, folder: str | os.PathLike) -> TokenizerFiles:
    """`files` with the pruned vocabulary of `folder`'s `vocab_map.npy`, when it has one
    (beside a WordPiece vocabulary: the only kind `bertfit distill --prune-vocab` prunes)."""
    if not (Path(folder) / VOCAB_MAP_FILE).is_file():
        return files
    if files.kind != "wordpiece":
        raise CheckpointError(
            f"{Path(folder) / VOCAB_MAP_FILE}: a pruned vocabulary beside a {files.kind} "
            "tokenizer; bertfit prunes WordPiece vocabularies only. Remove the file or restore "
            "the tokenizer files it was written with."
        )
    return dataclasses.replace(files, kept=read_vocab_map(folder, len(files.vocab)))


def vocab_txt_files(
    folder: str | os.PathLike,
    lower_case: bool | None = None,
    strip_accents: bool | None = None,
    model_type: str | None = None,
) -> TokenizerFiles:
    """The WordPiece tokenizer of a folder's `vocab.txt` and `tokenizer_config.json`, with the
    special tokens and pair template of `model_type`'s tokenizer class where they do not say
    (`wordpiece.FAMILY_DEFAULTS`: MPNet's)."""
    defaults = wordpiece.FAMILY_DEFAULTS.get(model_type or "")
    tokens, settings = wordpiece.from_folder(folder, lower_case, strip_accents, defaults)
    return TokenizerFiles(Path(folder) / "vocab.txt", "wordpiece", tokens, settings)


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
    files = read_tokenizer_files(
        folder, lower_case=lower_case, strip_accents=strip_accents, model_type=model_type
    )
    return build_in_graph(files)


def build_in_graph(files: TokenizerFiles):
    """The in-graph tokenizer `files` describe (see `load_tokenizer`)."""
    import tensorflow as tf

    def build():
        if files.kept is not None:
            from bertfit.text.pruned import PrunedTokenizer

            whole = build_in_graph(dataclasses.replace(files, kept=None))
            return PrunedTokenizer(whole, files.kept)
        if files.kind == "wordpiece":
            from bertfit.text.tokenizer import BertTokenizer

            return BertTokenizer(files.vocab, **dataclasses.asdict(files.config))
        if files.kind == "sentencepiece":
            from bertfit.text.sentencepiece import SentencePieceTokenizer

            return SentencePieceTokenizer.from_tokenizer_json(files.spec, **files.packing)
        if tokenizer_json.is_byte_level(files.spec):
            from bertfit.text.bpe import ByteLevelBPETokenizer as BPETokenizer
        else:
            from bertfit.text.byte_fallback import ByteFallbackBPETokenizer as BPETokenizer
        return BPETokenizer.from_tokenizer_json(files.spec, **files.packing)

    return named_errors(files.file, build, tf.errors.OpError)


def _tokenizer_file(path: Path) -> Path:
    """The file `load_tokenizer` builds from (`vocab.json` for vocab.json + merges.txt): the
    first in `LOOKED_FOR` that `path` has, passing over a tokenizer.json that holds only the
    special tokens when a sentencepiece file is beside it (said in a warning)."""
    found = [
        path / name
        for name in ("tokenizer.json", "vocab.txt", *SENTENCEPIECE_FILES)
        if (path / name).is_file()
    ]
    if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
        found.append(path / "vocab.json")
    if not found:
        raise CheckpointError(
            f"{path} has no tokenizer: looked for {', '.join(LOOKED_FOR)}. Pass the folder of a "
            "Hugging Face checkpoint that ships its tokenizer files."
        )
    model_file = next((f for f in found if f.name in SENTENCEPIECE_FILES), None)
    if found[0].name == "tokenizer.json" and model_file and _only_special_tokens(found[0]):
        warnings.warn(
            CheckpointWarning(
                f"{found[0]} holds only the special tokens in its Unigram vocab (transformers 5 "
                "writes that for a SentencePiece tokenizer built with vocab_file=), so bertfit "
                f"tokenizes with {model_file} beside it. Delete that tokenizer.json, or save it "
                "again from the original checkpoint, to silence this.",
                code="model-tokenizer-passed-over",
            ),
            stacklevel=3,
        )
        return model_file
    return found[0]


def _only_special_tokens(file: Path) -> bool:
    """Whether a tokenizer.json's Unigram vocab is its added (special) tokens and no more."""
    spec = _read_json(file)
    model = spec.get("model")
    if not isinstance(model, dict) or model.get("type") != "Unigram":
        return False
    vocab = model.get("vocab") if isinstance(model.get("vocab"), list) else []
    added = {t.get("content") for t in spec.get("added_tokens") or [] if isinstance(t, dict)}
    return all(isinstance(entry, list) and entry and entry[0] in added for entry in vocab)


def named_errors(file: Path, build: Callable[[], _T], *errors: type[Exception]) -> _T:
    """`build()`; whatever is wrong with `file` ends in one `CheckpointError` that names it
    (never a traceback from the JSON's shape, or from the `errors` of the library that
    builds the tokenizer: TensorFlow's ops, `tokenizers`)."""
    try:
        return build()
    except BertfitError as error:
        message = str(error)
        raise CheckpointError(
            message if message.startswith(str(file)) else f"{file}: {message}"
        ) from error
    except (LookupError, TypeError, ValueError, AttributeError, *errors) as error:
        raise CheckpointError(
            f"{file}: not a tokenizer file bertfit can read ({type(error).__name__}: "
            f"{str(error)[:200]}). Restore it from the checkpoint's source."
        ) from error


def _tokenizer_json(file: Path, spec: dict, config: dict, lower_case, strip_accents):
    """A tokenizer.json, with tokenizer_config.json's special tokens and the casing overrides."""
    kind = (spec.get("model") or {}).get("type")
    if kind == "WordPiece":
        overrides = {"lower_case": lower_case, "strip_accents": strip_accents}
        return TokenizerFiles(
            file, "wordpiece", *wordpiece.from_tokenizer_json(spec, config, **overrides)
        )
    pad = config.get("pad_token")
    pad = pad.get("content") if isinstance(pad, dict) else pad
    if kind == "Unigram":
        tokenizer_json.check_unigram(spec["model"])
        return TokenizerFiles(
            file, "sentencepiece", spec=spec, packing=tokenizer_json.packing(spec, pad_token=pad)
        )
    if kind == "BPE":
        tokenizer_json.bpe_settings(spec)  # what bertfit's BPE tokenizers do not rebuild
        packing = {"cls_token": None, "sep_token": None,
                   **tokenizer_json.packing(spec, pad_token=pad)}  # fmt: skip
        if packing["pad_token"] is None:
            known = {*spec["model"]["vocab"], *(t["content"] for t in spec.get("added_tokens", []))}
            packing["pad_token"] = tokenizer_json.default_pad_token(packing["cls_token"], known)
        return TokenizerFiles(file, "bpe", spec=spec, packing=packing)
    raise CheckpointError(
        f"tokenizer.json's model is {kind!r}; bertfit tokenizes WordPiece, Unigram and BPE."
    )


def _bpe_files(path: Path, config: dict) -> TokenizerFiles:
    """RoBERTa's `vocab.json` + `merges.txt`, with the special tokens and `add_prefix_space`
    of `tokenizer_config.json` / `special_tokens_map.json` (RoBERTa's by default)."""
    specials = {"cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>",
                "unk_token": "<unk>", "mask_token": "<mask>"}  # fmt: skip
    specials.update({k: v for k, v in _special_tokens(config, path).items() if k in specials})
    vocab = _read_json(path / "vocab.json")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in vocab.values()):
        raise CheckpointError(
            f"{path / 'vocab.json'}: expected a JSON object of token to id (a whole number "
            "from 0); restore the file from the checkpoint's source."
        )
    spec = tokenizer_json.from_bpe_files(
        vocab,
        tokenizer_json.read_merges(path / "merges.txt"),
        special_tokens=list(specials.values()),
        mask_token=specials["mask_token"],
        add_prefix_space=bool(config.get("add_prefix_space", False)),
    )
    packing = {name: specials[name] for name in ("cls_token", "sep_token", "pad_token")}
    packing.update(pair_separators=2, second_type_id=0)  # <s> a </s></s> b </s>
    return TokenizerFiles(path / "vocab.json", "bpe", spec=spec, packing=packing)


def _sentencepiece_file(file: Path, family: str, config: dict, folder: Path) -> TokenizerFiles:
    """What transformers 5 builds from a bare sentencepiece file for `family`."""
    from bertfit.text.sentencepiece_proto import parse_model_proto

    defaults = _FAMILIES[family]
    specials = {**{k: v for k, v in defaults.items() if k.endswith("_token")},
                **_special_tokens(config, folder)}  # fmt: skip
    model = parse_model_proto(file.read_bytes())
    if model.trainer_spec.model_type != model.trainer_spec.UNIGRAM:
        raise CheckpointError(
            f"{file} is a sentencepiece model of type {model.trainer_spec.model_type}, not "
            "Unigram (1); bertfit tokenizes Unigram sentencepiece models."
        )
    if model.trainer_spec.byte_fallback:  # its ids for unknown characters would differ
        raise CheckpointError(
            f"{file} is a sentencepiece model with byte_fallback, which bertfit's "
            "SentencePiece tokenizer does not support yet: it would give <unk> where "
            "sentencepiece gives byte pieces. Use a checkpoint whose tokenizer has no byte "
            "fallback."
        )
    vocab = [(piece.piece, piece.score) for piece in model.pieces]
    if defaults["fairseq"]:  # fairseq's <s> <pad> </s> <unk>, then the pieces after spm's 3
        vocab = [(specials[k], 0.0) for k in ("cls_token", "pad_token", "sep_token", "unk_token")]
        vocab += [(piece.piece, piece.score) for piece in model.pieces[3:]]
    tokens = [piece for piece, _ in vocab]
    names = ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token")
    for name in names:
        if specials[name] not in tokens:
            vocab.append((specials[name], 0.0))
            tokens.append(specials[name])
    charsmap = model.normalizer_spec.precompiled_charsmap
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": tokens.index(specials[name]),
                "content": specials[name],
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for name in names
        ],  # fmt: skip
        "normalizer": {
            "type": "Sequence",
            "normalizers": _family_normalizers(family, charsmap, config),
        },
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": _family_pre_tokenizers(family)},
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "Unigram",
            "unk_id": tokens.index(specials["unk_token"]),
            "vocab": vocab,
            "byte_fallback": False,
        },
    }
    packing = {name: specials[name] for name in ("cls_token", "sep_token", "pad_token")}
    packing.update({k: defaults[k] for k in ("pair_separators", "second_type_id")})
    return TokenizerFiles(file, "sentencepiece", spec=spec, packing=packing)


def _family_normalizers(family: str, charsmap: bytes, config: dict) -> list[dict]:
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
    model_type = _read_json(folder / "config.json").get("model_type")
    return model_type if isinstance(model_type, str) else None


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
    """The JSON object in `path` ({} when there is no such file)."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text("utf-8"))
    except json.JSONDecodeError as error:
        raise CheckpointError(
            f"{path}:{error.lineno}:{error.colno}: not valid JSON ({error.msg}); restore the "
            "file from the checkpoint's source."
        ) from error
    except (UnicodeDecodeError, RecursionError) as error:
        raise CheckpointError(
            f"{path}: not a JSON file bertfit can read ({error}); restore the file from the "
            "checkpoint's source."
        ) from error
    if not isinstance(value, dict):
        raise CheckpointError(
            f"{path}: expected a JSON object, found a {type(value).__name__}; restore the "
            "file from the checkpoint's source."
        )
    return value
