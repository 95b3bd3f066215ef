"""`InGraphTokenizer`: what every tokenizer shares (WordPiece, SentencePiece, byte-level BPE).

Raw strings in (checked: a clear error for ids, numbers or None), int32 ids out, packed into the
encoder's three inputs with the checkpoint's special tokens and pair template. A subclass gives
`_tokenize_batch` (a traced function from a [batch] string tensor to [batch, None] ids) and
`special_ids` (the `pack_inputs` arguments).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from bertfit.errors import InputFormatError
from bertfit.text.packing import pack_inputs
from bertfit.text.ragged import RaggedIds

# For the methods `dataset.map` and exported tf.functions take: nothing in them branches on a
# tensor, and AutoGraph's conversion of them took ~0.35 s per data set on a 2-core CPU.
# (A tokenizer mapped as an object still has its small `__call__` converted: AutoGraph does not
# look for the mark there.)
no_autograph = tf.autograph.experimental.do_not_convert


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """The tokens in id order and each token's id (a repeated token: its last id).

    One plain object, not a list and a dict on the tokenizer: a `tf.Module` wraps and tracks
    every element of the lists and dicts it holds, ~1 s for a 30k-token vocabulary.
    """

    tokens: list[str]
    ids: dict[str, int]

    @classmethod
    def of(cls, tokens: list[str]) -> Vocabulary:
        return cls(tokens, {token: i for i, token in enumerate(tokens)})

    def token(self, token_id: int) -> str:
        """The entry with this id."""
        if not 0 <= token_id < len(self.tokens):
            raise InputFormatError(
                f"Token id {token_id} is outside the vocabulary [0, {len(self.tokens)})."
            )
        return self.tokens[token_id]

    def id(self, token: str) -> int:
        """The id of an entry."""
        if token not in self.ids:
            raise InputFormatError(f"Token {token!r} is not in the vocabulary.")
        return self.ids[token]


class InGraphTokenizer(tf.Module):
    """Tokenizes and packs inside the TensorFlow graph; see the module docstring."""

    kind = ""  # "wordpiece", "sentencepiece" or "bpe"

    @no_autograph
    def tokenize(self, texts) -> tf.RaggedTensor | tf.Tensor:
        """Token ids (int32) of each text, without special tokens.

        Args:
            texts: a string, a list or 1-D array of strings, or a string `tf.Tensor`.

        Returns:
            A `tf.RaggedTensor` of shape `[batch, None]`; a 1-D `tf.Tensor` for a single string.
        """
        return self._tokenize(texts, "texts")

    def tokenize_all(self, texts: Sequence[str], chunk: int = 2048) -> RaggedIds:
        """The ids of many texts (a data file's), in chunks of `chunk` mapped in parallel
        by tf.data, in order, as NumPy arrays (`RaggedIds`)."""
        dataset = tf.data.Dataset.from_tensor_slices(tf.constant(list(texts), tf.string))
        dataset = dataset.batch(chunk).map(self.tokenize, num_parallel_calls=tf.data.AUTOTUNE)
        return RaggedIds.concat(
            [RaggedIds(ids.values.numpy(), ids.row_splits.numpy()) for ids in dataset]
        )

    def __call__(
        self, texts, text_pairs=None, max_seq_length: int = 128, padding: str = "max_length"
    ):
        """Tokenizes and packs `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]` (with the
        checkpoint's own tokens and template, e.g. RoBERTa's `<s> a </s></s> b </s>`),
        truncating like Hugging Face.

        Args:
            texts: a string, a list or 1-D array of strings, or a string `tf.Tensor`.
            text_pairs: second segments, one per text, or `None`.
            max_seq_length: the packed length, special tokens included.
            padding: `"max_length"` pads to `max_seq_length`; `"longest"` to the longest row.

        Returns:
            A dict of int32 `input_word_ids`, `input_mask`, `input_type_ids`, each
            `[batch, length]` (`[length]` for a single string).
        """
        ids_a = self._tokenize(texts, "texts")
        ids_b = None if text_pairs is None else self._tokenize(text_pairs, "text_pairs")
        return self.pack(ids_a, ids_b, max_seq_length=max_seq_length, padding=padding)

    @no_autograph
    def pack(self, ids_a, ids_b=None, max_seq_length: int = 128, padding: str = "max_length"):
        """Packs ids from `tokenize` into model inputs; see `bertfit.text.packing.pack_inputs`."""
        return pack_inputs(
            ids_a, ids_b, max_seq_length=max_seq_length, padding=padding, **self.special_ids
        )

    def _tokenize(self, texts, name: str) -> tf.RaggedTensor | tf.Tensor:
        batch, is_scalar = as_string_batch(texts, name)
        ids = self._tokenize_batch(batch)
        return ids[0] if is_scalar else ids


def as_string_batch(texts, name: str) -> tuple[tf.Tensor, bool]:
    """A 1-D string tensor of the texts, and whether they were a single string."""
    if isinstance(texts, (tf.RaggedTensor, tf.SparseTensor)) or texts is None:
        raise InputFormatError(
            f"{name} must be strings (a str, a list of str or a string tensor), "
            f"got {type(texts).__name__}."
        )
    if isinstance(texts, (str, bytes)):
        return tf.constant([texts]), True
    if isinstance(texts, (list, tuple)):
        for i, text in enumerate(texts):
            if not isinstance(text, (str, bytes)):
                raise InputFormatError(
                    f"{name}[{i}] is {type(text).__name__} {text!r:.40}; pass raw "
                    "text: the tokenizer makes the ids."
                )
        return tf.constant(list(texts), tf.string, shape=[len(texts)]), False
    if isinstance(texts, np.ndarray) and texts.dtype.kind not in "USO":
        raise InputFormatError(f"{name} is a {texts.dtype} array; pass raw text, not ids.")
    tensor = tf.convert_to_tensor(texts) if not isinstance(texts, tf.Tensor) else texts
    if tensor.dtype != tf.string:
        raise InputFormatError(
            f"{name} has dtype {tensor.dtype.name}; pass raw text (tf.string), "
            "the tokenizer makes the ids."
        )
    if tensor.shape.rank not in (0, 1):
        raise InputFormatError(
            f"{name} must be a string or a 1-D batch of strings, got shape {tensor.shape}."
        )
    return (tf.reshape(tensor, [1]), True) if tensor.shape.rank == 0 else (tensor, False)
