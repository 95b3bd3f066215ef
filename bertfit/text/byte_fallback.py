"""SentencePiece-style BPE with byte fallback (mmBERT's tokenizer, which is Gemma's; Llama 2's)
inside the TensorFlow graph, id for id like Hugging Face's fast tokenizer.

It is `bertfit.text.bpe`'s pipeline with other first and last steps; the added tokens, the
merge loop, the packing and the tables are that module's:

1. Added tokens written in the text stay whole, as in `bertfit.text.bpe` (a `normalized` one
   is found as the normalizer writes it).
2. The normalizer writes every space `▁` (a `Replace`), after putting a `▁` before each piece
   of text if it has Llama 2's `Prepend`. There is no pre-tokenizer: each piece of text between
   added tokens is one word, and merges cross spaces (`▁the▁` can be one token).
3. The first symbols are the word's characters, each looked up whole in the vocabulary; one the
   vocabulary lacks becomes the pieces `<0x00>`...`<0xFF>` of its UTF-8 bytes (byte fallback),
   or the unknown token (fused with unknown neighbours if `fuse_unk`) when a byte piece is
   missing too or the model has no byte fallback.
4. BPE merges by rank, as `bertfit.text.bpe` merges.

Known differences from Hugging Face, beyond `bertfit.text.bpe`'s:
- A vocabulary with only some of the 256 byte pieces: where a character falls back to bytes
  right after an unknown character, the Rust crate writes the bytes before that unknown token.
  Tokenizers with byte fallback have all 256.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from bertfit.text.bpe import ByteLevelBPETokenizer, _table

METASPACE = "\u2581"


class ByteFallbackBPETokenizer(ByteLevelBPETokenizer):
    """Turns raw strings into the ids of a SentencePiece-style BPE (spaces written `▁`, byte
    fallback) and packed model inputs, inside the graph.

    Gives the same ids as Hugging Face's fast tokenizer for the same `tokenizer.json` (see the
    module docstring); a SavedModel that holds it needs no file. Build it with
    `from_tokenizer_json` or `bertfit.text.loading.load_tokenizer`.

    Args:
        vocab: piece to id (a tokenizer.json's `model.vocab`), byte pieces `<0x41>` included.
        merges: the merges in rank order, as `("a", "b")` pairs or `"a b"` strings.
        config: the rest of the pipeline; see `BPEConfig` (`byte_fallback`,
            `prepend_metaspace`, the unknown token and the special tokens).

    Examples:
    >>> from bertfit.text.bpe import AddedToken, BPEConfig
    >>> vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    >>> vocab.update({f"<0x{b:02X}>": 4 + b for b in range(256)})
    >>> vocab.update({"a": 260, "g": 261, "o": 262, "d": 263, "▁": 264, "go": 265, "goo": 266,
    ...               "good": 267, "▁good": 268})
    >>> merges = ["g o", "go o", "goo d", "▁ good"]
    >>> added = tuple(AddedToken(t, vocab[t]) for t in list(vocab)[:4])
    >>> config = BPEConfig(added_tokens=added, byte_fallback=True, unk_token="<unk>",
    ...                    cls_token="<bos>", sep_token="<eos>", pad_token="<pad>")
    >>> tokenizer = ByteFallbackBPETokenizer(vocab, merges, config)
    >>> tokenizer.tokenize(["a good é"]).to_list()  # é: its bytes C3 A9
    [[260, 268, 264, 199, 173]]
    """

    _byte_level = False
    _writes_vocab_json = False  # vocab.json + merges.txt would read back as byte-level BPE

    def to_tokenizer_json(self) -> dict:
        """This tokenizer as a Hugging Face tokenizer.json (parsed)."""
        spec = super().to_tokenizer_json()
        spec["model"]["byte_fallback"] = self.config.byte_fallback
        replace = {"type": "Replace", "pattern": {"String": " "}, "content": METASPACE}
        normalizers = [replace]
        if self.config.prepend_metaspace:
            normalizers.insert(0, {"type": "Prepend", "prepend": METASPACE})
        decoders = [
            {"type": "Replace", "pattern": {"String": METASPACE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ]
        return {
            **spec,
            "normalizer": {"type": "Sequence", "normalizers": normalizers},
            "pre_tokenizer": None,
            "decoder": {"type": "Sequence", "decoders": decoders},
        }

    # ---- the pipeline's own steps -------------------------------------------------------------

    def _normalize(self, text: tf.Tensor) -> tf.Tensor:
        """Spaces written `▁` (after a `▁` put before non-empty text, Llama 2's Prepend)."""
        text = tf.strings.regex_replace(text, " ", METASPACE)
        if self.config.prepend_metaspace:
            text = tf.where(tf.strings.length(text) > 0, tf.strings.join([METASPACE, text]), text)
        return text

    def _pre_tokenize(self, text: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """No pre-tokenizer: each piece of text is one word."""
        return text, tf.range(tf.size(text, out_type=tf.int64) + 1)

    def _normalize_token(self, content: str) -> str:
        prefix = METASPACE if self.config.prepend_metaspace and content else ""
        return prefix + content.replace(" ", METASPACE)

    def _symbols(self, words: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Each character's id, or its bytes' pieces where the vocabulary lacks it (-1 where
        a byte piece is missing too: the unknown token), and the word of each symbol."""
        chars = tf.strings.unicode_split(words, "UTF-8")
        char_ids = tf.cast(self._vocab_table.lookup(chars.values), tf.int32)
        char_rows = chars.value_rowids()
        if not self.config.byte_fallback:
            return char_ids, char_rows
        count = tf.size(chars.values, out_type=tf.int64)
        lengths = tf.cast(tf.strings.length(chars.values), tf.int64)
        raw = tf.io.decode_raw(tf.strings.reduce_join(chars.values), tf.uint8)
        byte_pieces = tf.gather(self._byte_pieces, tf.cast(raw, tf.int32))
        char_of_byte = tf.repeat(tf.range(count), lengths)
        spelled = tf.math.unsorted_segment_min(byte_pieces, char_of_byte, count) >= 0
        falls_back = tf.gather((char_ids < 0) & spelled, char_of_byte)
        first_byte = tf.concat([[True], char_of_byte[1:] != char_of_byte[:-1]], 0)
        symbols = tf.where(falls_back, byte_pieces, tf.gather(char_ids, char_of_byte))
        keep = first_byte | falls_back  # a character's id once, or each of its byte pieces
        return symbols[keep], tf.gather(char_rows, char_of_byte)[keep]

    def _word_ids(self, words: tf.Tensor) -> tf.Tensor:
        """The vocabulary id of each whole word, -1 if it has none (`ignore_merges`)."""
        return self._vocab_table.lookup(words)

    def _build_tables(self) -> None:
        super()._build_tables()
        vocab = self._model.vocab
        self._vocab_table = _table(vocab, tf.string)
        pieces = [vocab.get(f"<0x{b:02X}>", -1) for b in range(256)]
        self._byte_pieces = tf.constant(np.array(pieces, np.int32))
        self._unknown_symbols = True  # any character may be missing
