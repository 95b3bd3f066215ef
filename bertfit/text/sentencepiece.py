"""SentencePiece (Unigram) tokenization inside the TensorFlow graph, id for id like Hugging Face's
fast tokenizers for ALBERT, XLM-RoBERTa and DeBERTa-v2/v3.

The Viterbi search over pieces runs in tensorflow-text's SentencePiece op, loaded from its op
library as `bertfit.text.ops` loads its two (no `import tensorflow_text`; a SavedModel that holds
the tokenizer loads with `import tensorflow_text` as usual). The module holds the serialized
sentencepiece `ModelProto` (pieces, scores, the normalizer's `precompiled_charsmap`), so a
SavedModel needs no file.

The op alone would tokenize like the `sentencepiece` library (the "slow" tokenizers), which
differs from Hugging Face's fast ones on spaces (a trailing space is a `▁` token there) and on
special tokens written in text. So the pipeline follows `tokenizer.json` step by step:

1. Added tokens (`<s>`, `[MASK]`, ...) written in the text stay whole (with their `lstrip` and
   `rstrip` spaces), as in HF; the text between them is tokenized segment by segment.
2. Normalizers in their order: `Precompiled` runs the op with a character-level model that
   carries only the charsmap (its output pieces, joined, are the normalized text); `Replace`,
   `Lowercase`, `NFC`/`NFKC`/`NFD`/`NFKD`, `StripAccents` and `Strip` are TensorFlow ops.
3. Pre-tokenizers: `WhitespaceSplit`, then `Metaspace` (spaces to `▁`, the prefix `▁`, a split
   before each `▁`).
4. Each word's Viterbi search, in the op with the pieces and an identity normalizer.

Known differences from Hugging Face:
- HF applies a charsmap grapheme by grapheme (a whole grapheme of under 6 bytes first); the op
  takes the longest match at each position. They differ only where a charsmap entry spans a
  grapheme boundary (no RT text does).
- RE2 and ICU in TensorFlow use newer Unicode tables than the Rust crate; see
  `bertfit.text.tokenizer` for the few characters this changes.
- Where two segmentations score exactly the same (pieces in another order, e.g. "zz zz z" and
  "z zz zz"), the op and HF may break the tie differently: 1 of the 12,752 RT texts.
- Metaspace's `prepend_scheme="first"` prepends `▁` to the first word of each text's first
  segment.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import tensorflow as tf

from bertfit.errors import CheckpointError, InputFormatError
from bertfit.text import ops, tokenizer_json
from bertfit.text.base import InGraphTokenizer, Vocabulary
from bertfit.text.charsmap import DamagedCharsmap, continuation_characters
from bertfit.text.sentencepiece_proto import (
    ModelProto,
    TrainerSpec,
    build_model_proto,
    parse_model_proto,
)
from bertfit.text.tokenizer import _CAPITAL_SIGMA, _SMALL_SIGMA
from bertfit.tf_startup import native_logs_quiet

_sentencepiece = ops._op_library("_sentencepiece_tokenizer")
_regex_split = ops._op_library("_regex_split_ops")

# Rust's char::is_whitespace (Unicode White_Space), which HF's `\s` and WhitespaceSplit use.
_WHITESPACE = r"[\t\n\x{0B}\x{0C}\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]"  # noqa: E501
_NUL_STAND_IN = "\ufdd0"  # a noncharacter, in no vocabulary: unknown, like NUL
_Piece = ModelProto.SentencePiece  # its types: _Piece.NORMAL, UNKNOWN, CONTROL, ...
_FORMS = {"NFC", "NFD", "NFKC", "NFKD"}


class SentencePieceTokenizer(InGraphTokenizer):
    """Turns raw strings into SentencePiece (Unigram) ids and packed model inputs, in the graph.

    Gives the ids of Hugging Face's fast tokenizer for the same `tokenizer.json` (see the module
    docstring for the few differences). Build it with `from_tokenizer_json` or
    `bertfit.text.loading.load_tokenizer`; the constructor takes the parts directly.

    Args:
        model_proto: a serialized sentencepiece `ModelProto`; its pieces in id order are the
            vocabulary and its `normalizer_spec.precompiled_charsmap` is the `Precompiled` step.
        normalizers: tokenizer.json normalizer steps in order (`{"type": "Precompiled"}` marks
            where the charsmap applies).
        pre_tokenizers: tokenizer.json pre-tokenizer steps (`WhitespaceSplit`, `Metaspace`).
        added_tokens: tokens kept whole when written in a text: `{"content", "lstrip",
            "rstrip"}` dicts; each must be a piece.
        cls_token: the token that starts every packed sequence.
        sep_token: the token that ends each segment.
        pad_token: the token that fills packed sequences up to their length.
        pair_separators: `sep_token`s between the segments of a pair (XLM-R 2, ALBERT 1).
        second_type_id: the type id of the second segment (XLM-R 0, ALBERT 1).

    Examples:
    >>> from bertfit.text.loading import load_tokenizer
    >>> tokenizer = load_tokenizer("path/to/xlm-roberta-base")  # doctest: +SKIP
    >>> tokenizer.tokenize(["Hello world!"])  # doctest: +SKIP
    <tf.RaggedTensor [[35378, 8999, 38]]>
    >>> tokenizer(["a great film"], ["dull"], max_seq_length=16)["input_word_ids"][0, :8]
    ... # doctest: +SKIP
    <tf.Tensor: shape=(8,), dtype=int32, numpy=array([0, 10, 6782, 6528, 2, 2, 8, 1], ...)>
    """

    kind = "sentencepiece"

    def __init__(
        self,
        model_proto: bytes,
        *,
        normalizers: Sequence[dict] = (),
        pre_tokenizers: Sequence[dict] = (),
        added_tokens: Sequence[dict] = (),
        cls_token: str,
        sep_token: str,
        pad_token: str,
        pair_separators: int = 1,
        second_type_id: int = 1,
    ):
        super().__init__(name="sentencepiece_tokenizer")
        model = parse_model_proto(model_proto)
        tokens = [piece.piece for piece in model.pieces]
        _check_pieces(model.pieces, added_tokens)
        self._vocab = Vocabulary.of(tokens)
        self._proto = model_proto
        self._steps = _Steps(list(normalizers), list(pre_tokenizers), list(added_tokens))
        self._template = {"pair_separators": pair_separators, "second_type_id": second_type_id}
        self._specials = {"cls": cls_token, "sep": sep_token, "pad": pad_token}
        unknown = [t for t in self._specials.values() if t not in self._vocab.ids]
        unknown += [t["content"] for t in added_tokens if t["content"] not in self._vocab.ids]
        if unknown:
            raise CheckpointError(
                f"the vocabulary has no pieces {unknown}, which its special tokens name; use "
                "the tokenizer files shipped with the model."
            )
        self._unk_id = next(i for i, p in enumerate(model.pieces) if p.type == _Piece.UNKNOWN)
        self._check_steps()
        self._pieces = _SentencePieceModel(_viterbi_proto(model, added_tokens), "pieces")
        charsmap = model.normalizer_spec.precompiled_charsmap
        self._joining = tf.constant(_joining_codes(charsmap), tf.int32)
        self._charsmap = charsmap and _SentencePieceModel(_charsmap_proto(charsmap), "charsmap")
        self._added_pattern = _added_tokens_pattern(added_tokens)

    @classmethod
    def from_tokenizer_json(cls, spec: dict, **overrides) -> SentencePieceTokenizer:
        """The tokenizer a Hugging Face `tokenizer.json` (parsed) with a `Unigram` model
        describes; `overrides` replace constructor arguments (e.g. `pad_token`)."""
        model = spec["model"]
        tokenizer_json.check_unigram(model)
        steps = tokenizer_json.flatten(spec.get("normalizer"), "normalizers")
        charsmap = b""
        for step in steps:
            if step["type"] == "Precompiled":
                charsmap = base64.b64decode(step.get("precompiled_charsmap") or "")
        added = tokenizer_json.added_tokens(spec)
        vocab = [(piece, score) for piece, score in model["vocab"]] + _added_pieces(
            added, len(model["vocab"])
        )
        tokens = [piece for piece, _ in vocab]
        kinds = [_Piece.NORMAL] * len(tokens)
        kinds[model["unk_id"]] = _Piece.UNKNOWN
        proto = build_model_proto(vocab, kinds, charsmap)
        arguments = {
            "normalizers": [
                {"type": "Precompiled"} if s["type"] == "Precompiled" else s for s in steps
            ],  # fmt: skip
            "pre_tokenizers": tokenizer_json.flatten(spec.get("pre_tokenizer"), "pretokenizers"),
            "added_tokens": [t for t in added if t["content"] in set(tokens)],
            **tokenizer_json.packing(spec, **overrides),
        }
        return cls(proto, **arguments)

    def to_tokenizer_json(self) -> dict:
        """A Hugging Face `tokenizer.json` (as a dict) that rebuilds this tokenizer."""
        model = parse_model_proto(self._proto)
        charsmap = base64.b64encode(model.normalizer_spec.precompiled_charsmap)
        normalizers = [
            {"type": "Precompiled", "precompiled_charsmap": charsmap.decode("ascii")}
            if step["type"] == "Precompiled" else step
            for step in self._steps.normalizers
        ]  # fmt: skip
        spec = {
            "version": "1.0",
            "added_tokens": [
                {
                    "id": self._vocab.ids[t["content"]],
                    "content": t["content"],
                    "single_word": False,
                    "lstrip": t["lstrip"],
                    "rstrip": t["rstrip"],
                    "normalized": False,
                    "special": True,
                }
                for t in self._steps.added_tokens
            ],  # fmt: skip
            "normalizer": {"type": "Sequence", "normalizers": normalizers},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": self._steps.pre_tokenizers},
            "model": {
                "type": "Unigram",
                "unk_id": self._unk_id,
                "vocab": [[piece.piece, piece.score] for piece in model.pieces],
                "byte_fallback": False,
            },
        }
        specials = {f"{name}_token": self._specials[name] for name in ("cls", "sep", "pad")}
        ids = {token: self._vocab.ids[token] for token in specials.values()}
        return tokenizer_json.with_template(spec, {**specials, **self._template}, ids)

    def save(self, directory: str | os.PathLike) -> None:
        """Writes `tokenizer.json` and `tokenizer_config.json`, from which
        `bertfit.text.loading.load_tokenizer(directory)` (and Hugging Face) rebuild it."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        spec = self.to_tokenizer_json()
        (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), "utf-8")
        config = {
            "cls_token": self._specials["cls"],
            "sep_token": self._specials["sep"],
            "pad_token": self._specials["pad"],
            "unk_token": self._vocab.tokens[self._unk_id],
        }
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), "utf-8")

    @property
    def vocab_size(self) -> int:
        """The number of ids (pieces of the model)."""
        return len(self._vocab.tokens)

    @property
    def cls_id(self) -> int:
        return self._vocab.ids[self._specials["cls"]]

    @property
    def sep_id(self) -> int:
        return self._vocab.ids[self._specials["sep"]]

    @property
    def pad_id(self) -> int:
        return self._vocab.ids[self._specials["pad"]]

    @property
    def unk_id(self) -> int:
        return self._unk_id

    @property
    def special_ids(self) -> dict[str, int]:
        """The ids and template `pack_inputs` packs with."""
        ids = {"cls_id": self.cls_id, "sep_id": self.sep_id, "pad_id": self.pad_id}
        return {**ids, **self._template}

    def id_to_token(self, token_id: int) -> str:
        """The piece with this id."""
        return self._vocab.token(token_id)

    def token_to_id(self, token: str) -> int:
        """The id of a piece (e.g. "▁the")."""
        return self._vocab.id(token)

    def tokenize_words(self, texts):
        """Not available: SentencePiece pieces do not group into words the way WordPiece's do."""
        raise InputFormatError(
            "tokenize_words is for WordPiece tokenizers; a SentencePiece tokenizer has no "
            "word level. Use tokenize(texts) for the ids."
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def _tokenize_batch(self, texts: tf.Tensor) -> tf.RaggedTensor:
        texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", replacement_char=0xFFFD)
        texts = tf.strings.regex_replace(texts, "\x00", _NUL_STAND_IN)  # the ops stop at NUL
        segments = _split(texts, self._added_pattern) if self._added_pattern else _rows(texts)
        flat = segments.flat_values
        is_added = (
            tf.strings.regex_full_match(flat, self._added_pattern)
            if self._added_pattern
            else tf.zeros_like(flat, tf.bool)
        )
        first = tf.range(tf.size(flat, out_type=tf.int64)) == tf.gather(
            segments.row_starts(), segments.value_rowids()
        )
        words = self._pre_tokenize(self._normalize(tf.where(is_added, "", flat)), first)
        ids = words.with_values(self._piece_ids(words.values)).merge_dims(1, 2)  # [segments, ids]
        added = tf.strings.regex_replace(flat, f"^{_WHITESPACE}+|{_WHITESPACE}+$", "")
        added_ids = _rows(
            _sentencepiece.sentencepiece_string_to_id_op(self._pieces.resource_handle, added)
        )
        ids = _choose(is_added, added_ids, ids)
        return segments.with_values(ids).merge_dims(1, 2)

    def _normalize(self, text: tf.Tensor) -> tf.Tensor:
        for step in self._steps.normalizers:
            text = _normalizer(step, self._charsmap, self._joining)(text)
        return text

    def _pre_tokenize(self, text: tf.Tensor, first: tf.Tensor) -> tf.RaggedTensor:
        """[segments, words] after the pre-tokenizers; `first`: each segment starts a text."""
        words = _rows(text)
        for step in self._steps.pre_tokenizers:
            if step["type"] == "WhitespaceSplit":
                words = words.with_flat_values(
                    _split(words.flat_values, _WHITESPACE + "+", keep=False)
                )
                words = words.merge_dims(1, 2)
            elif step["type"] == "Metaspace":
                words = _metaspace(words, first, step)
        return words

    def _piece_ids(self, words: tf.Tensor) -> tf.RaggedTensor:
        ids, splits = _sentencepiece.sentencepiece_tokenize_op(
            self._pieces.resource_handle, words, 0, 1.0, False, False, False, tf.int32,
            return_nbest=False,
        )  # fmt: skip
        return tf.RaggedTensor.from_row_splits(ids, tf.cast(splits, tf.int64), validate=False)

    def _check_steps(self) -> None:
        known = {"Precompiled", "Replace", "Lowercase", "StripAccents", "Strip", *_FORMS}
        for kind, steps, supported in [
            ("normalizer", self._steps.normalizers, known),
            ("pre_tokenizer", self._steps.pre_tokenizers, {"WhitespaceSplit", "Metaspace"}),
        ]:
            for step in steps:
                if step["type"] not in supported:
                    raise CheckpointError(
                        f"tokenizer.json's {kind} {step['type']!r} is not supported by "
                        f"bertfit's SentencePiece tokenizer (it knows {sorted(supported)})."
                    )


def _check_pieces(pieces: Sequence[ModelProto.SentencePiece], added_tokens: Sequence[dict]) -> None:
    """What the op needs of a vocabulary, said before it fails on it: pieces that are not
    empty, none twice, one unknown piece, and pieces besides the special tokens."""
    seen: set[str] = set()
    for index, piece in enumerate(p.piece for p in pieces):
        if not piece:
            raise CheckpointError(f"piece {index} of the vocabulary is empty.")
        if piece in seen:
            raise CheckpointError(
                f"the piece {piece!r} is listed twice in the vocabulary (again at id {index}); "
                "each piece must have one id. Restore the file from the checkpoint's source."
            )
        seen.add(piece)
    unknown = [index for index, p in enumerate(pieces) if p.type == _Piece.UNKNOWN]
    if len(unknown) != 1:
        raise CheckpointError(
            f"the vocabulary has {len(unknown)} unknown pieces (ids {unknown[:5]}); it needs "
            "exactly one."
        )
    special = {token["content"] for token in added_tokens}
    if all(p.piece in special or p.type != _Piece.NORMAL for p in pieces):
        raise CheckpointError(
            f"the vocabulary holds only its {len(pieces)} special tokens "
            f"({', '.join(p.piece for p in pieces[:6])}), no pieces to tokenize text with. "
            "transformers 5 writes such a tokenizer.json for a SentencePiece tokenizer built "
            "with vocab_file=; save it from the original checkpoint (or keep the .model file "
            "beside it)."
        )


def _added_pieces(added_tokens: Sequence[dict], size: int) -> list[tuple[str, float]]:
    """Added tokens whose ids follow the Unigram vocabulary (XLM-R's `<mask>`, DeBERTa-v3's
    `[MASK]`), as pieces in id order."""
    pieces = []
    for token in sorted((t for t in added_tokens if t["id"] >= size), key=lambda t: t["id"]):
        if token["id"] != size + len(pieces):
            raise CheckpointError(
                f"tokenizer.json's added token {token['content']!r} has id {token['id']}, past "
                f"the {size + len(pieces)} ids before it; bertfit needs added ids without gaps."
            )
        pieces.append((token["content"], 0.0))
    return pieces


class _Steps:
    """The pipeline's steps, held as one plain object (a `tf.Module` would track every list)."""

    def __init__(self, normalizers: list, pre_tokenizers: list, added_tokens: list):
        self.normalizers = normalizers
        self.pre_tokenizers = pre_tokenizers
        self.added_tokens = added_tokens


class _SentencePieceModel(tf.saved_model.experimental.TrackableResource):
    """The op's model resource, created from the serialized proto (saved in the graph)."""

    def __init__(self, proto: bytes, name: str):
        super().__init__()
        self._model, self._name = proto, name
        with native_logs_quiet():  # the op logs a note for an identity normalizer
            _ = self.resource_handle  # creates it now, as tensorflow_text does

    def _create_resource(self):
        with tf.name_scope(self._name):
            return _sentencepiece.sentencepiece_op(model=self._model)


def _choose(is_added: tf.Tensor, added: tf.RaggedTensor, ids: tf.RaggedTensor) -> tf.RaggedTensor:
    """Row by row, `added` where `is_added`, else `ids` (two ragged [n, None] tensors)."""
    lengths = tf.where(is_added, added.row_lengths(), ids.row_lengths())
    values = tf.concat([added.values, ids.values], 0)
    offsets = tf.where(
        is_added, added.row_starts(), ids.row_starts() + tf.size(added.values, out_type=tf.int64)
    )
    index = tf.ragged.range(offsets, offsets + lengths)
    return tf.RaggedTensor.from_row_lengths(
        tf.gather(values, index.flat_values), lengths, validate=False
    )


def _rows(values: tf.Tensor) -> tf.RaggedTensor:
    """[n] to [n, 1]."""
    return tf.RaggedTensor.from_row_lengths(values, tf.ones_like(values, tf.int64), validate=False)


def _split(text: tf.Tensor, pattern: str, keep: bool = True) -> tf.RaggedTensor:
    """[n] strings to [n, pieces]: split around matches of `pattern` (kept as pieces)."""
    tokens, _, _, splits = _regex_split.regex_split_with_offsets(
        text, f"({pattern})", f"({pattern})" if keep else "()"
    )
    return tf.RaggedTensor.from_row_splits(tokens, splits, validate=False)


def _metaspace(words: tf.RaggedTensor, first: tf.Tensor, step: dict) -> tf.RaggedTensor:
    """HF's Metaspace: spaces become `▁`, `▁` is prepended, and words split before each `▁`."""
    mark = step.get("replacement", "\u2581")
    text = tf.strings.regex_replace(words.flat_values, " ", mark)
    scheme = step.get("prepend_scheme", "always" if step.get("add_prefix_space", True) else "never")
    if scheme != "never":
        prepend = ~tf.strings.regex_full_match(text, f"{re.escape(mark)}(?s:.*)")
        if scheme == "first":
            first_word = tf.range(tf.size(text, out_type=tf.int64)) == tf.gather(
                words.row_starts(), words.value_rowids()
            )
            prepend &= first_word & tf.gather(first, words.value_rowids())
        text = tf.where(prepend & (text != ""), mark + text, text)
    words = words.with_flat_values(text)
    if step.get("split", True):
        pieces = _split(text, f"{re.escape(mark)}[^{re.escape(mark)}]*")
        words = words.with_flat_values(pieces).merge_dims(1, 2)
    return words


def _normalizer(step: dict, charsmap: _SentencePieceModel, joining: tf.Tensor):
    """One tokenizer.json normalizer step as a function of a string tensor (`joining`: see
    `_apply_charsmap`)."""
    kind = step["type"]
    if kind == "Precompiled":
        return lambda text: _apply_charsmap(text, charsmap, joining)
    if kind == "Replace":
        pattern = step["pattern"]
        regex = (
            _onig_to_re2(pattern["Regex"]) if "Regex" in pattern else re.escape(pattern["String"])
        )
        content = step["content"].replace("\\", "\\\\")
        return lambda text: tf.strings.regex_replace(text, regex, content)
    if kind == "Lowercase":
        return lambda text: tf.strings.lower(
            tf.strings.regex_replace(text, _CAPITAL_SIGMA, _SMALL_SIGMA), encoding="utf-8"
        )
    if kind in _FORMS:
        return lambda text: ops._normalize.normalize_utf8(text, kind)
    if kind == "StripAccents":
        return lambda text: tf.strings.regex_replace(text, r"\p{Mn}", "")
    if kind == "Strip":
        left = f"^{_WHITESPACE}+" if step.get("strip_left", True) else None
        right = f"{_WHITESPACE}+$" if step.get("strip_right", True) else None
        pattern = "|".join(p for p in (left, right) if p)
        return lambda text: tf.strings.regex_replace(text, pattern, "") if pattern else text
    raise CheckpointError(f"tokenizer.json's normalizer {kind!r} is not supported.")


def _apply_charsmap(text: tf.Tensor, charsmap: _SentencePieceModel, joining: tf.Tensor):
    """The charsmap's normalization: the op's character model returns the normalized text in
    pieces (consecutive unknown characters merged), which join back into one string.

    The op merges a run by copying it again for each character, quadratic in the run's length
    (95 s for 1 MB on a 2-core CPU), so each text goes in as chunks of about `CHARSMAP_CHUNK`
    characters, cut only before a character that continues no rule (not in `joining`, the
    sorted code points of `bertfit.text.charsmap.continuation_characters`): a left-to-right
    longest-match normalizer cannot span such a cut, so the same text comes out."""
    characters = tf.strings.unicode_split(text, "UTF-8")
    codes = tf.strings.unicode_decode(text, "UTF-8").flat_values
    place = tf.ragged.range(characters.row_lengths()).flat_values
    found = tf.gather(joining, tf.minimum(tf.searchsorted(joining, codes), tf.size(joining) - 1))
    cut = (place == 0) | ((place % CHARSMAP_CHUNK == 0) & (found != codes))
    chunk = tf.cumsum(tf.cast(cut, tf.int32)) - 1
    count = tf.reduce_sum(tf.cast(cut, tf.int32))
    chunks = tf.strings.unsorted_segment_join(characters.flat_values, chunk, count)
    pieces, splits = _sentencepiece.sentencepiece_tokenize_op(
        charsmap.resource_handle, chunks, 0, 1.0, False, False, False, tf.string,
        return_nbest=False,
    )  # fmt: skip
    pieces = tf.RaggedTensor.from_row_splits(pieces, tf.cast(splits, tf.int64), validate=False)
    normalized = tf.strings.reduce_join(pieces, axis=1)
    owner = tf.boolean_mask(tf.cast(characters.value_rowids(), tf.int32), cut)
    return tf.strings.unsorted_segment_join(normalized, owner, tf.size(text))


CHARSMAP_CHUNK = 64  # characters a chunk starts with (those continuing a rule follow on)


def _joining_codes(charsmap: bytes) -> list[int]:
    """The sorted code points that can continue a charsmap rule (-1 alone when none: the
    lookup needs one element); a damaged charsmap is refused."""
    try:
        continuing = continuation_characters(charsmap) if charsmap else frozenset()
    except DamagedCharsmap as error:
        raise CheckpointError(
            f"the sentencepiece model's precompiled_charsmap is damaged ({error}); restore the "
            "model file from the checkpoint's source."
        ) from error
    return sorted(ord(c) for c in continuing) or [-1]


def _onig_to_re2(pattern: str) -> str:
    r"""An HF (Oniguruma) regex for RE2: `\s` is Unicode White_Space there, ASCII in RE2."""
    return re.sub(r"(?<!\\)\\s", _WHITESPACE.replace("\\", "\\\\"), pattern)


def _added_tokens_pattern(added_tokens: Sequence[dict]) -> str:
    """A regex matching any added token (the longest first), with its stripped spaces."""
    tokens = sorted(added_tokens, key=lambda t: len(t["content"]), reverse=True)
    return "|".join(
        (f"{_WHITESPACE}*" if t["lstrip"] else "")
        + re.escape(t["content"])
        + (f"{_WHITESPACE}*" if t["rstrip"] else "")
        for t in tokens
    )


def _viterbi_proto(model: ModelProto, added_tokens: Sequence[dict]) -> bytes:
    """The pieces with an identity normalizer: words arrive normalized, `▁` included.
    Added tokens become control pieces, which the search never produces (HF splits them off
    before)."""
    added = {t["content"] for t in added_tokens}
    kinds = [
        _Piece.CONTROL if p.piece in added and p.type != _Piece.UNKNOWN else p.type
        for p in model.pieces
    ]
    vocab = [(p.piece, p.score) for p in model.pieces]
    return build_model_proto(vocab, kinds) if kinds else b""


def _charsmap_proto(charsmap: bytes) -> bytes:
    """A character model with only the unknown piece: its pieces are the normalized text."""
    return build_model_proto([("<unk>", 0.0)], [_Piece.UNKNOWN], charsmap, TrainerSpec.CHAR)
