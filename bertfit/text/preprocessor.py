"""`BertPreprocessor`: TF Hub's BERT preprocessor contract on bertfit's tokenizer.

Strings in, the encoder's three int32 tensors out at a fixed `seq_length`, usable in `tf.data`
(`dataset.map(preprocessor)`), eagerly, and inside a SavedModel. The methods mirror TF Hub's
preprocessing SavedModels: `tokenize` and `bert_pack_inputs`.

Pairs are trimmed two ways, on purpose: `bert_pack_inputs` as TF Hub's (tensorflow-text's
`RoundRobinTrimmer`: one wordpiece per segment in turn, so the first segment gets the odd one),
and a `(texts, pairs)` call as bertfit's tokenizer and training do (Hugging Face's longest-first,
where the second segment gets it). They differ only when a pair is cut to an odd budget.
"""

from __future__ import annotations

import tensorflow as tf

from bertfit.text.tokenizer import BertTokenizer


class BertPreprocessor(tf.Module):
    """Tokenizes and packs texts (or text pairs) for the encoder of the same checkpoint.

    Args:
        tokenizer: the checkpoint's tokenizer.
        seq_length: the packed length, [CLS]/[SEP] included.

    Call it on a string, a [batch] string tensor or list, or a `(texts, pairs)` tuple.

    Examples:
    >>> preprocessor = BertPreprocessor.from_checkpoint("minilm-l6", seq_length=8)  # doctest: +SKIP
    >>> preprocessor(["a gripping film"])["input_word_ids"].shape  # doctest: +SKIP
    TensorShape([1, 8])
    """

    def __init__(self, tokenizer: BertTokenizer, seq_length: int = 128):
        super().__init__()
        self.tokenizer = tokenizer
        self.seq_length = seq_length

    @classmethod
    def from_checkpoint(cls, path: str, seq_length: int = 128) -> BertPreprocessor:
        """The preprocessor of the checkpoint at `path` ("minilm-l6", a directory, an archive)."""
        from bertfit.checkpoints.load import build_tokenizer, read_checkpoint
        from bertfit.checkpoints.registry import resolve

        return cls(build_tokenizer(read_checkpoint(resolve(path))), seq_length)

    def __call__(self, inputs) -> dict[str, tf.Tensor]:
        if isinstance(inputs, tuple):
            texts, pairs = inputs
            return self.tokenizer(texts, pairs, max_seq_length=self.seq_length)
        return self.tokenizer(inputs, max_seq_length=self.seq_length)

    def tokenize(self, texts) -> tf.RaggedTensor:
        """Token ids per word, as TF Hub's `tokenize`: [batch, words, wordpieces]. WordPiece
        groups its pieces by word; for SentencePiece and byte-level BPE each piece is a word
        of its own (their pieces carry their own word boundaries)."""
        if self.tokenizer.kind == "wordpiece":
            return self.tokenizer.tokenize_words(texts)
        ids = self.tokenizer.tokenize(texts)
        if not isinstance(ids, tf.RaggedTensor):  # one string
            ids = tf.RaggedTensor.from_tensor(ids[tf.newaxis])
        pieces = ids.flat_values
        one_each = tf.ones_like(pieces, tf.int64)
        return ids.with_flat_values(tf.RaggedTensor.from_row_lengths(pieces, one_each))

    def bert_pack_inputs(self, segments, seq_length: int | None = None) -> dict[str, tf.Tensor]:
        """Packs one or two tokenized segments (from `tokenize`; [batch, words, wordpieces] or
        [batch, wordpieces]) as TF Hub's `bert_pack_inputs`, trimming pairs round-robin."""
        flat = [s.merge_dims(-2, -1) if s.shape.rank == 3 else s for s in segments]
        if len(flat) not in (1, 2):
            raise ValueError(f"bert_pack_inputs takes one or two segments, not {len(flat)}")
        length = self.seq_length if seq_length is None else seq_length
        if len(flat) == 2:
            flat = [tf.cast(s, tf.int32).with_row_splits_dtype(tf.int64) for s in flat]
            # [CLS] a [SEP] b [SEP], or RoBERTa's <s> a </s></s> b </s>
            separators = self.tokenizer.special_ids.get("pair_separators", 1)
            budget = tf.cast(length, tf.int64) - 2 - separators
            keep = round_robin_lengths(flat[0].row_lengths(), flat[1].row_lengths(), budget)
            flat = [_first(s, k) for s, k in zip(flat, keep, strict=True)]
        return self.tokenizer.pack(*flat, max_seq_length=length)


def round_robin_lengths(len_a, len_b, budget) -> tuple[tf.Tensor, tf.Tensor]:
    """How many wordpieces of each segment tensorflow-text's `RoundRobinTrimmer` keeps (what
    TF Hub's `bert_pack_inputs` uses): one per segment in turn until `budget` is spent, so an
    odd token goes to the first segment.

    Examples:
    >>> a, b = round_robin_lengths(tf.constant([9, 2, 9]), tf.constant([9, 9, 1]), budget=5)
    >>> a.numpy().tolist(), b.numpy().tolist()
    ([3, 2, 4], [2, 3, 1])
    """
    half = (budget + 1) // 2
    keep_a = tf.minimum(len_a, tf.maximum(half, budget - len_b))
    keep_b = tf.minimum(len_b, budget - keep_a)
    return keep_a, keep_b


def _first(ids: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
    """The first `keep[i]` ids of each row."""
    positions = tf.ragged.range(ids.row_lengths())
    return tf.ragged.boolean_mask(ids, positions < tf.cast(keep, tf.int64)[:, tf.newaxis])
