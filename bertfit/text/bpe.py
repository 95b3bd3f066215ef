"""Byte-level BPE (GPT-2, RoBERTa, ModernBERT) inside the TensorFlow graph, id for id like
Hugging Face's fast tokenizer.

The pipeline rebuilds the Rust `tokenizers` crate's `AddedVocabulary`, `ByteLevel`
pre-tokenizer and `BPE` model from TensorFlow ops, so it runs in `tf.data`, in a `tf.function`
and in an exported SavedModel (the vocabulary and merges are constants in the graph):

1. Added tokens written in the text (`<s>`, `<mask>`, ...) stay whole; one with `lstrip`
   (RoBERTa's `<mask>`) or `rstrip` swallows the whitespace on that side. Tokens with
   `normalized: false` are found in the raw text, the others after the normalizer (NFC or none).
2. `add_prefix_space` puts a space before every piece of text that does not start with one.
3. The GPT-2 split
   `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`.
   RE2 has no lookahead: a whitespace run followed by a non-space is first cut before its last
   character (exactly what `\\s+(?!\\S)` does), then each part is split without the lookahead.
   `\\s` is Unicode's White_Space, as in Oniguruma (not RE2's ASCII `\\s`).
4. Each word's UTF-8 bytes become symbols of the GPT-2 byte alphabet (`Ġ` for a space).
5. BPE: in every word, the adjacent pair with the lowest merge rank is merged, all its
   non-overlapping occurrences left to right, until no pair has a rank. All words of a batch go
   through one `tf.while_loop` together, each distinct word once.

Speed on 2 CPU cores shared with other work: all 12,752 Rotten Tomatoes texts in one call take
0.24-0.45 s (28,000-53,000 texts/s; HF's fast tokenizer 0.6-2.2 s there); through `tf.data`,
batches of 32 give 2,900-5,200 texts/s (~1.5 ms fixed a batch), batches of 256 7,000-11,600.
Most of the time is the regex splitting; the merge loop takes ~20%.

A SavedModel holding the tokenizer loads with plain `tf.saved_model.load`; with an NFC normalizer
(ModernBERT) it uses tensorflow-text's normalize op, so `import tensorflow_text` first, as for
`BertTokenizer`.

Known differences from Hugging Face:
- Letters and numbers (`\\p{L}`, `\\p{N}`) follow RE2's Unicode tables in TensorFlow, the Rust
  crate Oniguruma's. Of all 1,112,064 code points, 5,004 split differently, every one of them
  assigned only in Unicode 15 or later (e.g. U+1C89, U+A7CB, U+105C0-U+105F3); whitespace and
  all older characters match.
- Text that is not valid UTF-8 (only possible for bytes/tensors; HF takes `str`) has its bad
  bytes replaced by U+FFFD first.
- Merge lists in which a merge's parts are made by a *later* merge (never written by a BPE
  trainer) can merge in a different order than the Rust priority queue.
- An `lstrip` added token right after an added token made of whitespace, both found in the same
  pass, takes that whitespace here; the Rust crate leaves it to the first token.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from bertfit.errors import CheckpointError, InputFormatError
from bertfit.text import ops, tokenizer_json
from bertfit.text.base import InGraphTokenizer

# Unicode White_Space: Oniguruma's `\s` in the Rust crate's regex, and Rust's `is_whitespace`.
_WS = (
    r"\t\n\x0b\x0c\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}"
    r"\x{3000}"
)
_LAST_SPACE = rf"([{_WS}]+)([{_WS}][^{_WS}])"  # cut a run before the space that starts a word
_GPT2_SPLIT = (
    r"'s|'t|'re|'ve|'m|'ll|'d"
    rf"| ?\p{{L}}+| ?\p{{N}}+| ?[^{_WS}\p{{L}}\p{{N}}]+|[{_WS}]+"
)
# Llama 3's split (`tokenizer_json.LLAMA3_SPLIT`) in RE2. Its `\s*[\r\n]+` takes a run up to
# its last line break first, so a run is cut before its last character only when that one is
# not a line break (then `\s+(?!\S)` leaves it to the word after).
_NOT_NEWLINE_WS = _WS.replace(r"\n", "").replace(r"\r", "")
_LLAMA3_CUT = rf"([{_WS}]+)([{_NOT_NEWLINE_WS}][^{_WS}])"
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    rf"| ?[^{_WS}\p{{L}}\p{{N}}]+[\r\n]*|[{_WS}]*[\r\n]+|[{_WS}]+"
)
# (cut, split) of each pre-tokenizer split: GPT-2's (ByteLevel's `use_regex`) and the `Split`
# patterns of `tokenizer_json.SPLIT_PATTERNS`.
_GPT2 = (_LAST_SPACE, _GPT2_SPLIT)
_SPLITS = {tokenizer_json.LLAMA3_SPLIT: (_LLAMA3_CUT, _LLAMA3_SPLIT)}
_BREAK = b"\xff"  # never in valid UTF-8: marks where to split
_NO_RANK = np.iinfo(np.int64).max


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes
    for the code points from U+0100 on, in byte order.

    Examples:
    >>> alphabet = bytes_to_unicode()
    >>> alphabet[ord("a")], alphabet[ord(" ")], alphabet[ord("\\n")], len(set(alphabet.values()))
    ('a', 'Ġ', 'Ċ', 256)
    """
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    alphabet = {b: chr(b) for b in kept}
    others = [b for b in range(256) if b not in alphabet]
    alphabet.update({b: chr(256 + i) for i, b in enumerate(others)})
    return dict(sorted(alphabet.items()))


@dataclasses.dataclass(frozen=True)
class AddedToken:
    """A token the text is split on before BPE, as in a tokenizer.json's `added_tokens`.

    Args:
        content: the token's text.
        id: its id.
        special: a special token (`<s>`, `<mask>`); only informative here.
        lstrip: the token swallows the whitespace before it.
        rstrip: the token swallows the whitespace after it.
        normalized: found in the normalized text (after NFC) rather than the raw text.
    """

    content: str
    id: int
    special: bool = True
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = False


_MAX_ID = 2**31 - 1  # ids are int32 in the graph


@dataclasses.dataclass(frozen=True)
class BPEConfig:
    """Everything but the vocabulary and merges that decides a `ByteLevelBPETokenizer`'s ids.

    Args:
        added_tokens: the tokens kept whole when written in a text.
        add_prefix_space: put a space before every piece of text that lacks one.
        use_regex: split with the GPT-2 regex (False: each piece of text is one word).
        split_pattern: split first with this `Split` pre-tokenizer's regex (one of
            `tokenizer_json.SPLIT_PATTERNS`: Llama 3's), with `use_regex` off.
        nfc: normalize text to Unicode NFC first (GPT-NeoX, ModernBERT).
            (These four are the byte-level pre-tokenizer's and normalizer's:
            `ByteFallbackBPETokenizer` has its own.)
        unk_token: the BPE model's unknown token for bytes missing from the vocabulary
            (`None`: such bytes are dropped, as in Hugging Face).
        fuse_unk: several unknown symbols in a row become one.
        ignore_merges: a word that is in the vocabulary is one token, without merging.
        byte_fallback: a character the vocabulary lacks becomes the pieces `<0x..>` of its
            UTF-8 bytes (`ByteFallbackBPETokenizer` only).
        prepend_metaspace: put a `▁` before every piece of text (Llama 2's Prepend normalizer;
            `ByteFallbackBPETokenizer` only).
        cls_token: starts every packed sequence (`None`: the tokenizer cannot pack).
        sep_token: ends each segment.
        pad_token: fills packed sequences.
        pair_separators: separators between the two texts of a pair (RoBERTa 2, BERT 1).
        second_type_id: type id of the second text of a pair and its separator.
    """

    added_tokens: tuple[AddedToken, ...] = ()
    add_prefix_space: bool = False
    use_regex: bool = True
    split_pattern: str | None = None
    nfc: bool = False
    unk_token: str | None = None
    fuse_unk: bool = False
    ignore_merges: bool = False
    byte_fallback: bool = False
    prepend_metaspace: bool = False
    cls_token: str | None = "<s>"
    sep_token: str | None = "</s>"
    pad_token: str | None = "<pad>"
    pair_separators: int = 2
    second_type_id: int = 0


@dataclasses.dataclass(frozen=True)
class _Model:
    """Vocabulary and merges in one plain object (a `tf.Module` would track every entry)."""

    vocab: dict[str, int]
    merges: list[tuple[str, str]]
    tokens: dict[int, str]


class ByteLevelBPETokenizer(InGraphTokenizer):
    """Turns raw strings into byte-level BPE ids and packed model inputs, inside the graph.

    Gives the same ids as Hugging Face's fast tokenizer for GPT-2-style byte-level BPE
    (RoBERTa, ModernBERT; see the module docstring for the few differences). Vocabulary and merges
    live in constants and lookup tables, so a SavedModel that contains the tokenizer needs no file.

    Args:
        vocab: token to id (`vocab.json`, or the `model.vocab` of a tokenizer.json).
        merges: the merges in rank order, as `("a", "b")` pairs or `"a b"` strings.
        config: the rest of the pipeline; see `BPEConfig`.

    Examples:
    >>> vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4}
    >>> vocab.update({c: 5 + b for b, c in bytes_to_unicode().items()})
    >>> vocab.update({"Ġg": 261, "oo": 262, "Ġgoo": 263, "Ġgood": 264})
    >>> merges = ["Ġ g", "o o", "Ġg oo", "Ġgoo d"]
    >>> added = tuple(AddedToken(t, vocab[t], lstrip=t == "<mask>") for t in list(vocab)[:5])
    >>> tokenizer = ByteLevelBPETokenizer(vocab, merges, BPEConfig(added_tokens=added))
    >>> tokenizer.tokenize(["a good <mask>"])
    <tf.RaggedTensor [[102, 264, 4]]>
    >>> tokenizer("good", "goo", max_seq_length=10)["input_word_ids"].numpy().tolist()
    [0, 108, 262, 105, 2, 2, 108, 262, 2, 1]
    """

    kind = "bpe"
    _byte_level = True  # symbols are bytes in GPT-2's alphabet
    _writes_vocab_json = True  # RoBERTa's classic files beside tokenizer.json

    def __init__(
        self,
        vocab: Mapping[str, int],
        merges: Sequence[str | Sequence[str]],
        config: BPEConfig = BPEConfig(),
    ):
        super().__init__(name="byte_level_bpe_tokenizer")
        self.config = config
        vocab = {str(token): int(i) for token, i in vocab.items()}
        for token in config.added_tokens:
            vocab.setdefault(token.content, token.id)
        out_of_range = next(((t, i) for t, i in vocab.items() if not 0 <= i < _MAX_ID), None)
        if out_of_range:
            raise CheckpointError(
                f"the vocabulary gives {out_of_range[0]!r} the id {out_of_range[1]}; ids run "
                f"from 0 to {_MAX_ID - 1} (int32). Restore the file from the checkpoint's source."
            )
        tokens = {}
        for token, i in vocab.items():
            tokens.setdefault(i, token)
        for token in config.added_tokens:
            tokens[token.id] = token.content
        self._model = _Model(vocab, [_merge_pair(m) for m in merges], tokens)
        self._check_special_tokens()
        self._build_tables()

    # ---- constructors -------------------------------------------------------------------------

    @classmethod
    def from_files(
        cls,
        vocab_json: str | os.PathLike,
        merges_txt: str | os.PathLike,
        *,
        add_prefix_space: bool = False,
        cls_token: str = "<s>",
        sep_token: str = "</s>",
        pad_token: str = "<pad>",
        unk_token: str = "<unk>",
        mask_token: str = "<mask>",
        pair_separators: int = 2,
        second_type_id: int = 0,
    ) -> ByteLevelBPETokenizer:
        """RoBERTa's classic `vocab.json` + `merges.txt`.

        The special tokens found in `vocab.json` are kept whole in text, `mask_token` with
        RoBERTa's `lstrip`; the template is `<s> a </s></s> b </s>` unless `pair_separators`
        and `second_type_id` say otherwise.

        Args:
            vocab_json: path of `vocab.json` (token to id).
            merges_txt: path of `merges.txt` (`#version` line, then one `a b` merge a line).
            add_prefix_space: put a space before each text, as RoBERTa's option of that name.
            cls_token, sep_token, pad_token, unk_token, mask_token: the special tokens.
            pair_separators: separators between the texts of a pair.
            second_type_id: type id of a pair's second text.
        """
        spec = tokenizer_json.from_bpe_files(
            _read_json(vocab_json),
            tokenizer_json.read_merges(merges_txt),
            special_tokens=[cls_token, sep_token, pad_token, unk_token, mask_token],
            mask_token=mask_token,
            add_prefix_space=add_prefix_space,
        )
        return cls.from_tokenizer_json(
            spec,
            cls_token=cls_token,
            sep_token=sep_token,
            pad_token=pad_token,
            pair_separators=pair_separators,
            second_type_id=second_type_id,
        )

    @classmethod
    def from_tokenizer_json(
        cls, spec: Mapping | str | os.PathLike, **overrides
    ) -> ByteLevelBPETokenizer:
        """The tokenizer a Hugging Face `tokenizer.json` describes (parsed, or its path).

        Args:
            spec: the parsed tokenizer.json, or its path.
            **overrides: what to pack with instead of the file's template and padding
                (`cls_token`, `sep_token`, `pad_token`, `pair_separators`, `second_type_id`;
                None is ignored). Without a padding token the first of `<pad>`, `[PAD]`,
                `<|padding|>`, `<|endoftext|>` it has pads.

        Raises:
            CheckpointError: the file describes something this class does not rebuild
                (another model or pre-tokenizer, BPE dropout, a subword prefix, ...).
        """
        if not isinstance(spec, Mapping):
            spec = _read_json(spec)
        model = spec.get("model") or {}
        config = tokenizer_json.bpe_settings(spec)
        if tokenizer_json.is_byte_level(spec) != cls._byte_level:
            raise CheckpointError(
                f"tokenizer.json's BPE is {'' if cls._byte_level else 'not '}SentencePiece-"
                f"style (spaces as \u2581, no ByteLevel pre-tokenizer); {cls.__name__} does not "
                "read it. Build it with bertfit.text.loading.load_tokenizer, which picks the "
                "class its tokenizer.json needs."
            )
        added = tuple(_added_token(entry) for entry in spec.get("added_tokens") or ())
        vocab = model["vocab"]
        # No post_processor (or ByteLevel's alone) adds no special tokens: packing is refused.
        config.update({"cls_token": None, "sep_token": None})
        config.update(tokenizer_json.packing(spec, **overrides))
        if config["pad_token"] is None:
            known = {**vocab, **{token.content: token.id for token in added}}
            config["pad_token"] = tokenizer_json.default_pad_token(config["cls_token"], known)
        return cls(vocab, model["merges"], BPEConfig(added_tokens=added, **config))

    @classmethod
    def from_pretrained_dir(cls, path: str | os.PathLike) -> ByteLevelBPETokenizer:
        """The tokenizer of a Hugging Face model folder: its `tokenizer.json`, else its
        `vocab.json` + `merges.txt` (with `add_prefix_space` from `tokenizer_config.json`)."""
        folder = Path(path)
        settings = _read_tokenizer_config(folder)
        if (folder / "tokenizer.json").is_file():
            return cls.from_tokenizer_json(
                folder / "tokenizer.json", pad_token=settings.get("pad_token")
            )
        if not ((folder / "vocab.json").is_file() and (folder / "merges.txt").is_file()):
            raise CheckpointError(
                f"{folder} has neither tokenizer.json nor vocab.json + merges.txt; pass the "
                "folder of a byte-level BPE checkpoint (RoBERTa, GPT-2, ModernBERT)."
            )
        return cls.from_files(folder / "vocab.json", folder / "merges.txt", **settings)

    # ---- saving ---------------------------------------------------------------------------------

    def save(self, directory: str | os.PathLike) -> Path:
        """Writes `vocab.json`, `merges.txt` and a `tokenizer.json` that Hugging Face's
        `PreTrainedTokenizerFast(tokenizer_file=...)` and `from_tokenizer_json` both read.

        Returns:
            The directory.
        """
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        if self._writes_vocab_json:
            vocab = self._model.vocab
            (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
            lines = ["#version: 0.2", *(f"{a} {b}" for a, b in self._model.merges)]
            (folder / "merges.txt").write_text("\n".join(lines) + "\n", "utf-8")
        spec = self.to_tokenizer_json()
        (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), "utf-8")
        return folder

    def to_tokenizer_json(self) -> dict:
        """This tokenizer as a Hugging Face tokenizer.json (parsed)."""
        config = self.config
        spec = tokenizer_json.byte_level_bpe(
            self._model.vocab,
            self._model.merges,
            [dataclasses.asdict(token) for token in config.added_tokens],
            add_prefix_space=config.add_prefix_space,
            use_regex=config.use_regex,
            split_pattern=config.split_pattern,
        )
        spec["model"].update(
            unk_token=config.unk_token, fuse_unk=config.fuse_unk, ignore_merges=config.ignore_merges
        )
        return {
            **spec,
            "padding": self._padding_json(),
            "normalizer": {"type": "NFC"} if config.nfc else None,
            "post_processor": self._template_json(),
        }

    def _padding_json(self) -> dict | None:
        if self.config.pad_token is None:
            return None
        return {
            "strategy": "BatchLongest",
            "direction": "Right",
            "pad_to_multiple_of": None,
            "pad_id": self.pad_id,
            "pad_type_id": 0,
            "pad_token": self.config.pad_token,
        }

    def _template_json(self) -> dict | None:
        config = self.config
        if config.cls_token is None:
            return None

        def special(name: str, type_id: int = 0) -> dict:
            return {"SpecialToken": {"id": name, "type_id": type_id}}

        def sequence(name: str, type_id: int) -> dict:
            return {"Sequence": {"id": name, "type_id": type_id}}

        second = config.second_type_id
        pair = [special(config.cls_token), sequence("A", 0)]
        pair += [special(config.sep_token)] * config.pair_separators
        pair += [sequence("B", second), special(config.sep_token, second)]
        return {
            "type": "TemplateProcessing",
            "single": [special(config.cls_token), sequence("A", 0), special(config.sep_token)],
            "pair": pair,
            "special_tokens": {
                t: {"id": t, "ids": [self.token_to_id(t)], "tokens": [t]}
                for t in dict.fromkeys([config.cls_token, config.sep_token])
            },
        }

    # ---- vocabulary -----------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """The number of ids: the largest id in the vocabulary or the added tokens, plus one."""
        return max(self._model.tokens) + 1

    @property
    def cls_id(self) -> int:
        return self._special_id("cls_token")

    @property
    def sep_id(self) -> int:
        return self._special_id("sep_token")

    @property
    def pad_id(self) -> int:
        return self._special_id("pad_token")

    @property
    def unk_id(self) -> int | None:
        """The unknown token's id; `None` if the vocabulary has none (byte-level BPE can spell
        any text without one)."""
        for token in (self.config.unk_token, "<unk>", "[UNK]", "<|endoftext|>"):
            if token is not None and token in self._model.vocab:
                return self._model.vocab[token]
        return None

    @property
    def special_ids(self) -> dict[str, int]:
        """The ids and template `pack_inputs` packs with (RoBERTa: `<s> a </s></s> b </s>`)."""
        return {
            "cls_id": self.cls_id,
            "sep_id": self.sep_id,
            "pad_id": self.pad_id,
            "pair_separators": self.config.pair_separators,
            "second_type_id": self.config.second_type_id,
        }

    def id_to_token(self, token_id: int) -> str:
        """The token with this id (in the GPT-2 byte alphabet: `Ġgood` for " good")."""
        if token_id not in self._model.tokens:
            raise InputFormatError(
                f"Token id {token_id} is not in the vocabulary (ids 0 to {self.vocab_size - 1})."
            )
        return self._model.tokens[token_id]

    def token_to_id(self, token: str) -> int:
        """The id of a vocabulary entry or added token."""
        if token not in self._model.vocab:
            raise InputFormatError(f"Token {token!r} is not in the vocabulary.")
        return self._model.vocab[token]

    def _special_id(self, name: str) -> int:
        token = getattr(self.config, name)
        if token is None:
            raise CheckpointError(
                f"This tokenizer has no {name.removesuffix('_token')} token: its tokenizer.json "
                "has no [CLS]/[SEP] template (post_processor) or padding token. Use tokenize(), "
                "or build it with from_files(..., cls_token=..., sep_token=..., pad_token=...)."
            )
        return self.token_to_id(token)

    def _check_special_tokens(self) -> None:
        config = self.config
        names = ("cls_token", "sep_token", "pad_token", "unk_token")
        missing = [
            f"{name}={getattr(config, name)!r}"
            for name in names
            if getattr(config, name) is not None and getattr(config, name) not in self._model.vocab
        ]
        if missing:
            raise CheckpointError(
                f"The vocabulary has no {', '.join(missing)}; pass the special tokens it uses, "
                "e.g. from_files(vocab, merges, cls_token='[CLS]', sep_token='[SEP]')."
            )

    # ---- tokenizing -----------------------------------------------------------------------------

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def _tokenize_batch(self, texts: tf.Tensor) -> tf.RaggedTensor:
        texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", replacement_char=0xFFFD)
        pieces, is_added = self._split_added_tokens(texts)
        text = tf.where(is_added, "", pieces.values)
        words, piece_splits = self._pre_tokenize(text)
        unique, index = tf.unique(words)
        word_ids = tf.gather(self._bpe(unique), index)
        piece_ids = tf.RaggedTensor.from_row_splits(
            word_ids.values, tf.gather(word_ids.row_splits, piece_splits), validate=False
        )
        added_ids = tf.cast(self._added_ids(pieces.values[is_added]), tf.int32)
        added = tf.RaggedTensor.from_row_lengths(added_ids, tf.cast(is_added, tf.int64))
        per_piece = tf.concat([piece_ids, added], axis=1)  # a piece is text or one added token
        splits = tf.gather(per_piece.row_splits, pieces.row_splits)
        return tf.RaggedTensor.from_row_splits(per_piece.values, splits, validate=False)

    def _split_added_tokens(self, texts: tf.Tensor) -> tuple[tf.RaggedTensor, tf.Tensor]:
        """[texts, pieces] where each added token written in a text is a piece of its own
        (with the whitespace it strips), and which pieces are added tokens."""
        pieces = tf.RaggedTensor.from_row_lengths(texts, tf.ones_like(texts, tf.int64))
        is_added = tf.zeros_like(texts, tf.bool)
        raw, normalized = self._added_patterns
        if raw:
            pieces, is_added = _split_on(pieces, is_added, raw)
        text = self._normalize(pieces.values)
        if text is not None:
            pieces = pieces.with_values(tf.where(is_added, pieces.values, text))
        if normalized:
            pieces, is_added = _split_on(pieces, is_added, normalized)
        return pieces, is_added

    def _normalize(self, text: tf.Tensor) -> tf.Tensor | None:
        """The normalizer's output for pieces of text (None: there is no normalizer)."""
        return ops._normalize.normalize_utf8(text, "NFC") if self.config.nfc else None

    def _added_ids(self, pieces: tf.Tensor) -> tf.Tensor:
        """The ids of added-token pieces, the whitespace an lstrip/rstrip token took ignored."""
        table = self._added_table
        ids = table.lookup(pieces)
        for pattern in (f"^[{_WS}]+", f"[{_WS}]+$", f"^[{_WS}]+|[{_WS}]+$"):
            stripped = table.lookup(tf.strings.regex_replace(pieces, pattern, ""))
            ids = tf.where(ids < 0, stripped, ids)
        return ids

    def _pre_tokenize(self, text: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Words (strings, flat) of each piece of text, and where each piece's words start."""
        config = self.config
        if config.add_prefix_space:
            bare = (tf.strings.length(text) > 0) & (tf.strings.substr(text, 0, 1) != " ")
            text = tf.where(bare, tf.strings.join([" ", text]), text)
        if config.split_pattern is None and not config.use_regex:
            return text, tf.range(tf.size(text, out_type=tf.int64) + 1)
        cut, split = _SPLITS[config.split_pattern] if config.split_pattern else _GPT2
        marked = tf.strings.regex_replace(text, cut, rb"\1" + _BREAK + rb"\2")
        runs = tf.strings.split(marked, sep=_BREAK)
        words = tf.strings.split(
            tf.strings.regex_replace(runs.values, split, rb"\0" + _BREAK), sep=_BREAK
        )
        return words.values, tf.gather(words.row_splits, runs.row_splits)

    def _bpe(self, words: tf.Tensor) -> tf.RaggedTensor:
        """BPE ids [words, tokens] of distinct words (UTF-8 strings)."""
        count = tf.size(words, out_type=tf.int64)
        symbols, rows = self._symbols(words)
        if self.config.ignore_merges:
            known = self._word_ids(words)
            keep = tf.gather(known < 0, rows)
            symbols, rows = symbols[keep], rows[keep]
        if self._unknown_symbols:
            symbols, rows = self._unknown(symbols, rows)
        symbols, rows = self._merge(symbols, rows, count)
        ids = tf.RaggedTensor.from_value_rowids(symbols, rows, nrows=count, validate=False)
        if self.config.ignore_merges:
            found = known >= 0
            whole = tf.RaggedTensor.from_row_lengths(
                tf.cast(known[found], tf.int32), tf.cast(found, tf.int64), validate=False
            )
            ids = tf.concat([ids, whole], axis=1)
        return ids

    def _symbols(self, words: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The first symbols of the words (their bytes' ids in the byte alphabet, -1 for a byte
        the vocabulary lacks) and the word of each."""
        lengths = tf.cast(tf.strings.length(words), tf.int64)
        raw = tf.io.decode_raw(tf.strings.reduce_join(words), tf.uint8)
        symbols = tf.gather(self._byte_ids, tf.cast(raw, tf.int32))
        return symbols, tf.repeat(tf.range(tf.size(words, out_type=tf.int64)), lengths)

    def _word_ids(self, words: tf.Tensor) -> tf.Tensor:
        """The vocabulary id of each whole word in the byte alphabet, -1 if it has none."""
        lengths = tf.cast(tf.strings.length(words), tf.int64)
        raw = tf.io.decode_raw(tf.strings.reduce_join(words), tf.uint8)
        chars = tf.gather(self._byte_chars, tf.cast(raw, tf.int32))
        chars = tf.RaggedTensor.from_row_lengths(chars, lengths, validate=False)
        return self._vocab_table.lookup(tf.strings.reduce_join(chars, axis=1))

    def _unknown(self, symbols: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Symbols the vocabulary lacks (-1): the model's unknown token (fused if `fuse_unk`), or
        dropped like the Rust crate does without one."""
        missing = symbols < 0
        if self.config.unk_token is None:
            return symbols[~missing], rows[~missing]
        symbols = tf.where(missing, self.token_to_id(self.config.unk_token), symbols)
        if self.config.fuse_unk:
            repeated = missing[1:] & missing[:-1] & (rows[1:] == rows[:-1])
            keep = ~tf.concat([[False], repeated], 0)
            symbols, rows = symbols[keep], rows[keep]
        return symbols, rows

    def _merge(self, symbols: tf.Tensor, rows: tf.Tensor, words) -> tuple[tf.Tensor, tf.Tensor]:
        """Applies merges by rank until none applies; `rows` is each symbol's word (sorted)."""
        width = tf.constant(self.vocab_size, tf.int64)

        def merge_round(symbols, rows, _):
            pairs = tf.cast(symbols[:-1], tf.int64) * width + tf.cast(symbols[1:], tf.int64)
            ranks = self._merge_ranks.lookup(pairs)
            ranks = tf.where((ranks >= 0) & (rows[1:] == rows[:-1]), ranks, _NO_RANK)
            best = tf.math.unsorted_segment_min(ranks, rows[:-1], words)
            chosen = _first_of_each_run((ranks < _NO_RANK) & (ranks == tf.gather(best, rows[:-1])))
            merged = tf.gather(self._merged_ids, tf.where(chosen, ranks, 0))
            symbols = tf.concat([tf.where(chosen, merged, symbols[:-1]), symbols[-1:]], 0)
            keep = ~tf.concat([[False], chosen], 0)  # the right half of each merged pair goes
            return symbols[keep], rows[keep], tf.reduce_any(chosen)

        symbols, rows, _ = tf.while_loop(
            lambda symbols, rows, going: going,
            merge_round,
            (symbols, rows, tf.size(symbols) > 1),
            shape_invariants=(tf.TensorShape([None]), tf.TensorShape([None]), tf.TensorShape([])),
        )
        return symbols, rows

    # ---- tables ---------------------------------------------------------------------------------

    def _build_tables(self) -> None:
        """The constants and lookup tables the graph reads (so SavedModels need no file)."""
        vocab, config = self._model.vocab, self.config
        alphabet = bytes_to_unicode()
        byte_ids = np.array([vocab.get(alphabet[b], -1) for b in range(256)], np.int32)
        self._unknown_symbols = bool((byte_ids < 0).any())
        self._byte_ids = tf.constant(byte_ids)
        self._byte_chars = tf.constant([alphabet[b] for b in range(256)])
        ranks, merged = _merge_table(vocab, self._model.merges, self.vocab_size)
        self._merge_ranks = _table(ranks, tf.int64)
        self._merged_ids = tf.constant(merged, tf.int32)
        if config.ignore_merges:
            self._vocab_table = _table(vocab, tf.string)
        raw = [t for t in config.added_tokens if not t.normalized]
        normalized = [
            dataclasses.replace(t, content=self._normalize_token(t.content))
            for t in config.added_tokens
            if t.normalized
        ]  # found in the normalized text as the normalizer writes them
        added = {t.content: t.id for t in (*config.added_tokens, *normalized)}
        self._added_table = _table(added, tf.string)
        self._added_patterns = (_added_pattern(raw), _added_pattern(normalized))

    def _normalize_token(self, content: str) -> str:
        """A `normalized` added token's text as the normalizer writes it, in Python (as
        written here: NFC is taken to leave tokens alone)."""
        return content


def _split_on(pieces: tf.RaggedTensor, is_added: tf.Tensor, pattern: str):
    """Splits the pieces that are not added tokens yet around each match of `pattern`."""
    marked = tf.strings.regex_replace(pieces.values, pattern, _BREAK + rb"\0" + _BREAK)
    parts = tf.strings.split(tf.where(is_added, pieces.values, marked), sep=_BREAK)
    is_added = tf.gather(is_added, parts.value_rowids()) | tf.strings.regex_full_match(
        parts.values, pattern
    )
    splits = tf.gather(parts.row_splits, pieces.row_splits)
    return tf.RaggedTensor.from_row_splits(parts.values, splits, validate=False), is_added


def _first_of_each_run(chosen: tf.Tensor) -> tf.Tensor:
    """Keeps every other position of each run of consecutive `True`s, from the first: the
    non-overlapping left-to-right occurrences of a pair like ("a", "a") in "aaaa"."""
    starts = chosen & ~tf.concat([[False], chosen[:-1]], 0)
    positions = tf.range(tf.size(chosen, out_type=tf.int64))
    run = tf.maximum(tf.cumsum(tf.cast(starts, tf.int64)) - 1, 0)
    start = tf.gather(tf.concat([tf.where(starts)[:, 0], [0]], 0), run)
    return chosen & ((positions - start) % 2 == 0)


def _merge_table(vocab: dict[str, int], merges, width: int) -> tuple[dict, np.ndarray]:
    """Pair key (`left * width + right`) to rank, and the id each rank's merge makes."""
    ranks, merged = {}, []
    for rank, (left, right) in enumerate(merges):
        missing = [t for t in (left, right, left + right) if t not in vocab]
        if missing:
            raise CheckpointError(
                f"Merge {rank} ({left!r} {right!r}) uses {missing[0]!r}, which is not in the "
                "vocabulary; vocab.json and merges.txt must come from the same tokenizer."
            )
        ranks[vocab[left] * width + vocab[right]] = rank  # a repeated merge keeps its last rank
        merged.append(vocab[left + right])
    return ranks, np.array(merged or [0], np.int32)


def _table(mapping: Mapping, key_dtype: tf.DType) -> tf.lookup.StaticHashTable:
    """A key to int64 lookup table (-1 when absent) built from in-memory tensors."""
    keys = tf.constant(list(mapping) or [-1 if key_dtype == tf.int64 else ""], key_dtype)
    values = tf.constant(list(mapping.values()) or [-1], tf.int64)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), -1)


def _added_pattern(tokens: Sequence[AddedToken]) -> str:
    """An RE2 pattern matching any of `tokens`, longest first, with the whitespace each one
    strips."""
    alternatives = []
    for token in sorted(tokens, key=lambda t: len(t.content), reverse=True):
        left = f"[{_WS}]*" if token.lstrip else ""
        right = f"[{_WS}]*" if token.rstrip else ""
        alternatives.append(left + _re2_literal(token.content) + right)
    return "|".join(alternatives)


def _re2_literal(text: str) -> str:
    return "".join(c if c.isalnum() and c.isascii() else f"\\x{{{ord(c):X}}}" for c in text)


def _merge_pair(merge) -> tuple[str, str]:
    if isinstance(merge, str):
        parts = merge.split(" ")
    else:
        parts = list(merge)
    if len(parts) != 2 or not all(isinstance(p, str) for p in parts):
        raise CheckpointError(
            f"Merge {merge!r} is not two tokens ('a b' or ['a', 'b']); the merges must come "
            "from a BPE tokenizer."
        )
    return parts[0], parts[1]


def _read_tokenizer_config(folder: Path) -> dict:
    """`from_files` settings from a Hugging Face `tokenizer_config.json` ({} without one)."""
    path = folder / "tokenizer_config.json"
    raw = _read_json(path) if path.is_file() else {}
    settings = {}
    if "add_prefix_space" in raw:
        settings["add_prefix_space"] = bool(raw["add_prefix_space"])
    for name in ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token"):
        token = raw.get(name)
        token = token.get("content") if isinstance(token, dict) else token
        if isinstance(token, str):
            settings[name] = token
    return settings


def _read_json(path: str | os.PathLike):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"Could not read {path} as JSON: {error}") from error


# ---- tokenizer.json sections ------------------------------------------------------------------


def _added_token(entry: Mapping) -> AddedToken:
    if entry.get("single_word"):
        raise CheckpointError(
            f"Added token {entry.get('content')!r} has single_word=true, which is not supported."
        )
    return AddedToken(
        content=entry["content"],
        id=int(entry["id"]),
        special=bool(entry.get("special", False)),
        lstrip=bool(entry.get("lstrip", False)),
        rstrip=bool(entry.get("rstrip", False)),
        normalized=bool(entry.get("normalized", not entry.get("special", False))),
    )
