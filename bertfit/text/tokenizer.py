"""BERT WordPiece tokenization inside the TensorFlow graph, id for id like Hugging Face's.

The pipeline rebuilds the Rust `tokenizers` crate's `BertNormalizer`, `BertPreTokenizer` and
`WordPiece` model from TensorFlow and TensorFlow Text ops (`bertfit.text.ops`), so it runs in
`tf.data`, in a `tf.function` and in an exported SavedModel:

1. Special tokens written in the raw text (`[SEP]`, `[MASK]`, ...) stay whole, as in HF.
2. Clean: drop NUL, U+FFFD and control/format/private-use characters (Cc, Cf, Co); turn
   tabs, newlines and Unicode spaces (Z*) into ' '.
3. Put spaces around CJK ideographs, strip accents (NFD, then drop Mn) and lowercase.
4. Split on spaces and isolate punctuation (ASCII punctuation and Unicode P*).
5. WordPiece: greedy longest match with '##' pieces; a word longer than `max_chars_per_word`
   characters, or one that cannot be covered by pieces, becomes the unknown token.

Known differences from Hugging Face, only on characters new to Unicode 9.0 (2016) or later:
- The Rust crate classifies characters (control, mark, punctuation) with Unicode 8-era tables;
  RE2 and ICU in TensorFlow know newer versions. Of all 1,112,064 code points, 568 tokenize
  differently with MiniLM's uncased vocabulary (149 cased), e.g. the combining marks U+07FD
  and U+1ABF and the format character U+0890 are dropped here but kept by HF, the newer
  punctuation U+2E43-U+2E5D is split off here but not by HF, and U+1734 (Mn then, Mc now) is
  kept here but stripped by HF.
- TensorFlow's ICU predates Unicode 14, so capitals added since (U+2C2F, U+A7C0,
  U+10570-U+10595, ...) are not lowercased here.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence

import tensorflow as tf

from bertfit.errors import InputFormatError
from bertfit.text import ops, wordpiece
from bertfit.text.base import InGraphTokenizer, Vocabulary, as_string_batch, no_autograph
from bertfit.text.wordpiece import TokenizerConfig, read_vocab

# Rust `tokenizers` is_chinese_char; its fifth range starts at U+2B920 (not U+2B820 as in the
# original BERT code), and bertfit follows the Rust crate.
_CJK = (
    r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
    r"\x{2B740}-\x{2B81F}\x{2B920}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]"
)
_PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"
_WHITESPACE = r"[\t\n\r\p{Z}]"
_CONTROL = r"[\x{FFFD}\p{Cc}\p{Cf}\p{Co}]"  # \t\n\r are spaces by now; NUL is Cc
_PIECE_BREAK = "\x1f"  # a control character: cleaning drops it from any text
_CAPITAL_SIGMA, _SMALL_SIGMA = "\u03a3", "\u03c3"  # ICU would write a final sigma; Rust does not


class BertTokenizer(InGraphTokenizer):
    """Turns raw strings into BERT WordPiece ids and packed model inputs, inside the graph.

    Gives the same ids as Hugging Face's fast `BertTokenizer` (see the module docstring for the
    few characters where Unicode versions differ). Holds its vocabulary in a lookup table built
    from in-memory tensors, so a SavedModel that contains it needs no other file.

    Args:
        vocab: path of a `vocab.txt` (one token per line, the line number is the id), or the
            tokens themselves in id order.
        **config: fields of `TokenizerConfig` (`lower_case`, `strip_accents`, ...).

    Examples:
    >>> from bertfit.checkpoints.registry import resolve
    >>> tokenizer = BertTokenizer.from_pretrained_dir(resolve("minilm-l6"))  # MiniLM-L6's vocab
    >>> tokenizer.tokenize(["Hello, world!"])
    <tf.RaggedTensor [[7592, 1010, 2088, 999]]>
    >>> inputs = tokenizer(["a great film"], ["dull"], max_seq_length=16)
    >>> sorted(inputs), inputs["input_word_ids"].shape
    (['input_mask', 'input_type_ids', 'input_word_ids'], TensorShape([1, 16]))
    """

    kind = "wordpiece"

    def __init__(self, vocab: str | os.PathLike | Sequence[str], **config):
        super().__init__(name="bert_tokenizer")
        self.config = TokenizerConfig(**config)
        tokens = read_vocab(vocab) if isinstance(vocab, (str, os.PathLike)) else list(vocab)
        self._vocab = Vocabulary.of(tokens)
        config = self.config
        required = (config.unk_token, config.cls_token, config.sep_token, config.pad_token)
        missing = [token for token in required if token not in self._vocab.ids]
        if missing:
            raise InputFormatError(
                f"The vocabulary has no {missing}; pass the special tokens it "
                "uses, e.g. BertTokenizer(vocab, unk_token='<unk>')."
            )
        self._table = _lookup_table(self._vocab.ids)
        specials = sorted((t for t in config.special_tokens if t in self._vocab.ids), key=len)
        self._special_pattern = "|".join(re.escape(t) for t in reversed(specials))

    @classmethod
    def from_pretrained_dir(
        cls,
        path: str | os.PathLike,
        lower_case: bool | None = None,
        strip_accents: bool | None = None,
    ) -> BertTokenizer:
        """The tokenizer of a Hugging Face model folder (`vocab.txt`, `tokenizer_config.json`).

        Args:
            path: the folder.
            lower_case: overrides `do_lower_case` from `tokenizer_config.json`.
            strip_accents: overrides `strip_accents` from `tokenizer_config.json`.
        """
        tokens, config = wordpiece.from_folder(path, lower_case, strip_accents)
        return cls(tokens, **dataclasses.asdict(config))

    @classmethod
    def from_tokenizer_json(cls, spec: dict, config: dict | None = None, **overrides):
        """The tokenizer a Hugging Face `tokenizer.json` (parsed) with a `WordPiece` model
        describes: its vocab, its `BertNormalizer` settings and special tokens.

        Args:
            spec: the parsed tokenizer.json.
            config: the parsed tokenizer_config.json, for special tokens it alone names.
            **overrides: `TokenizerConfig` fields that win over the files (`None` is ignored).
        """
        tokens, settings = wordpiece.from_tokenizer_json(spec, config, **overrides)
        return cls(tokens, **dataclasses.asdict(settings))

    def save(self, directory: str | os.PathLike) -> None:
        """Writes `vocab.txt` and `tokenizer_config.json`, from which `from_pretrained_dir`
        and `bertfit.text.loading.load_tokenizer` rebuild this tokenizer."""
        wordpiece.save(directory, self._vocab.tokens, self.config)

    @property
    def vocab_size(self) -> int:
        """The number of ids, i.e. lines of `vocab.txt`."""
        return len(self._vocab.tokens)

    @property
    def cls_id(self) -> int:
        return self._vocab.ids[self.config.cls_token]

    @property
    def sep_id(self) -> int:
        return self._vocab.ids[self.config.sep_token]

    @property
    def pad_id(self) -> int:
        return self._vocab.ids[self.config.pad_token]

    @property
    def special_ids(self) -> dict[str, int]:
        """The ids and template `pack_inputs` packs with (`[CLS] a [SEP] b [SEP]`; MPNet's
        `<s> a </s></s> b </s>`)."""
        return {
            "cls_id": self.cls_id,
            "sep_id": self.sep_id,
            "pad_id": self.pad_id,
            "pair_separators": self.config.pair_separators,
            "second_type_id": self.config.second_type_id,
        }

    @property
    def unk_id(self) -> int:
        return self._vocab.ids[self.config.unk_token]

    @property
    def special_token_ids(self) -> list[int]:
        """The ids of the special tokens the vocabulary has (unknown, [CLS], [SEP], padding,
        mask: BERT's or the family's)."""
        return [self._vocab.ids[t] for t in self.config.special_tokens if t in self._vocab.ids]

    def id_to_token(self, token_id: int) -> str:
        """The vocabulary entry with this id."""
        return self._vocab.token(token_id)

    def token_to_id(self, token: str) -> int:
        """The id of a vocabulary entry (the last one when `vocab.txt` repeats it)."""
        return self._vocab.id(token)

    @no_autograph
    def tokenize_words(self, texts) -> tf.RaggedTensor:
        """WordPiece ids grouped by word, as TF Hub's preprocessors' `tokenize`:
        `[batch, words, wordpieces]` (a special token written in a text is a word of its own).
        Merging the last two dimensions gives `tokenize(texts)`."""
        batch, _ = as_string_batch(texts, "texts")
        return self._tokenize_words_batch(batch)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def _tokenize_batch(self, texts: tf.Tensor) -> tf.RaggedTensor:
        return _merge_inner_rows(self._word_ids(texts))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def _tokenize_words_batch(self, texts: tf.Tensor) -> tf.RaggedTensor:
        return self._word_ids(texts)

    def _word_ids(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[texts, words, wordpieces] int32 ids; a special token written in a text is a word
        of its own with its one id."""
        texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", replacement_char=0xFFFD)
        pieces = self._split_special_tokens(texts)
        is_special = tf.strings.regex_full_match(pieces.flat_values, self._special_pattern)
        words = _pre_tokenize(self._normalize(tf.where(is_special, "", pieces.flat_values)))
        word_ids = words.with_flat_values(self._wordpiece_ids(words.flat_values))
        special_ids = tf.cast(self._table.lookup(pieces.flat_values[is_special]), tf.int32)
        special = tf.RaggedTensor.from_row_lengths(
            tf.RaggedTensor.from_row_lengths(
                special_ids, tf.ones_like(special_ids, tf.int64), validate=False
            ),
            tf.cast(is_special, tf.int64),
            validate=False,
        )
        per_piece = tf.concat([word_ids, special], axis=1)  # a piece is text or one special token
        return _merge_inner_rows(pieces.with_values(per_piece))

    def _split_special_tokens(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[texts, pieces]: a special token written in a text becomes a piece of its own."""
        texts = tf.strings.regex_replace(texts, _PIECE_BREAK, "\ufffd")  # both dropped later
        marked = rf"{_PIECE_BREAK}\0{_PIECE_BREAK}"
        return tf.strings.split(
            tf.strings.regex_replace(texts, self._special_pattern, marked), sep=_PIECE_BREAK
        )

    def _normalize(self, text: tf.Tensor) -> tf.Tensor:
        text = tf.strings.regex_replace(text, _WHITESPACE, " ")
        text = tf.strings.regex_replace(text, _CONTROL, "")
        if self.config.tokenize_chinese_chars:
            text = tf.strings.regex_replace(text, _CJK, r" \0 ")
        strip_accents = self.config.strip_accents
        if strip_accents or (strip_accents is None and self.config.lower_case):
            text = tf.strings.regex_replace(ops.normalize_nfd(text), r"\p{Mn}", "")
        if self.config.lower_case:
            text = tf.strings.regex_replace(text, _CAPITAL_SIGMA, _SMALL_SIGMA)
            text = tf.strings.lower(text, encoding="utf-8")
        return text

    def _wordpiece_ids(self, words: tf.Tensor) -> tf.RaggedTensor:
        """Words (strings) to [words, wordpieces] int32 ids; overlong words become [UNK]."""
        chars = tf.strings.length(words, unit="UTF8_CHAR")
        words = tf.where(chars > self.config.max_chars_per_word, self.config.unk_token, words)
        return ops.wordpiece_ids(
            words,
            self._table,
            self.config.unk_token,
            max_bytes_per_word=4 * self.config.max_chars_per_word,  # the char limit comes first
        )


def _merge_inner_rows(ids: tf.RaggedTensor) -> tf.RaggedTensor:
    """[a, b, c] to [a, c], like `merge_dims(1, 2)` without its graph-building validation."""
    splits = tf.gather(ids.values.row_splits, ids.row_splits)
    return tf.RaggedTensor.from_row_splits(ids.values.values, splits, validate=False)


def _lookup_table(ids: dict[str, int]) -> tf.lookup.StaticHashTable:
    """Token to id, -1 when absent; built from tensors so a SavedModel carries the vocabulary."""
    keys = tf.constant(list(ids), tf.string)
    values = tf.constant(list(ids.values()), tf.int64)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), -1)


def _pre_tokenize(text: tf.Tensor) -> tf.RaggedTensor:
    """Splits normalized text on spaces and makes each punctuation character its own word."""
    return tf.strings.split(tf.strings.regex_replace(text, _PUNCTUATION, r" \0 "))
