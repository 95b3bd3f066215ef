"""`PrunedTokenizer`: a tokenizer whose ids are renumbered to a pruned vocabulary inside the
graph (`bertfit.text.vocab_map`), so a model with only the kept rows of the word embeddings
still takes raw strings: in training, predict, evaluate, serve and its SavedModel export."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from bertfit.text.base import InGraphTokenizer, no_autograph
from bertfit.text.vocab_map import renumbering, write_vocab_map

_RENUMBERED = ("cls_id", "sep_id", "pad_id")


class PrunedTokenizer(InGraphTokenizer):
    """`tokenizer` (its whole vocabulary), then each id renumbered to its rank in `kept`; an id
    not kept becomes the unknown token's.

    Args:
        tokenizer: an in-graph tokenizer with `unk_id` (a `BertTokenizer`).
        kept: the ids kept, increasing (`vocab_map.kept_ids`).

    Examples:
    >>> from bertfit.checkpoints.registry import resolve
    >>> from bertfit.text.loading import load_tokenizer
    >>> whole = load_tokenizer(resolve("minilm-l6"))
    >>> kept = np.array([0, 100, 101, 102, 103, 2088, 7592])  # [PAD] [UNK] ... world hello
    >>> PrunedTokenizer(whole, kept).tokenize(["Hello, world!"]).to_list()
    [[6, 1, 5, 1]]
    """

    def __init__(self, tokenizer: InGraphTokenizer, kept: np.ndarray):
        super().__init__(name="pruned_tokenizer")
        self.tokenizer = tokenizer
        self.kind = tokenizer.kind
        self.kept_ids = np.asarray(kept, np.int32)
        # each id of the whole vocabulary's new id (`vocab_map.renumbering`)
        self.new_ids = renumbering(self.kept_ids, tokenizer.vocab_size, tokenizer.unk_id)

    @property
    def vocab_size(self) -> int:
        """The number of ids: the kept ones."""
        return len(self.kept_ids)

    @property
    def special_ids(self) -> dict:
        whole = self.tokenizer.special_ids
        return {k: int(self.new_ids[v]) if k in _RENUMBERED else v for k, v in whole.items()}

    cls_id = property(lambda self: self.special_ids["cls_id"])
    sep_id = property(lambda self: self.special_ids["sep_id"])
    pad_id = property(lambda self: self.special_ids["pad_id"])
    unk_id = property(lambda self: int(self.new_ids[self.tokenizer.unk_id]))

    @property
    def special_token_ids(self) -> list[int]:
        return [int(self.new_ids[i]) for i in self.tokenizer.special_token_ids]

    def save(self, directory: str | os.PathLike) -> None:
        """The whole tokenizer's files and `vocab_map.npy`, from which
        `bertfit.text.loading.load_tokenizer` rebuilds this tokenizer."""
        self.tokenizer.save(directory)
        write_vocab_map(directory, self.kept_ids)

    @no_autograph
    def tokenize_words(self, texts) -> tf.RaggedTensor:
        """The whole tokenizer's `tokenize_words`, renumbered."""
        return self._renumber(self.tokenizer.tokenize_words(texts))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def _tokenize_batch(self, texts: tf.Tensor) -> tf.RaggedTensor:
        return self._renumber(self.tokenizer.tokenize(texts))

    def renumber(self, ids: tf.Tensor) -> tf.Tensor:
        """int32 ids of the whole vocabulary (any shape), each as its new id."""
        # The table a constant of the graph traced: tf2onnx leaves a captured tensor as an
        # input of the ONNX model.
        return tf.gather(tf.constant(self.new_ids), ids)

    def _renumber(self, ids: tf.RaggedTensor) -> tf.RaggedTensor:
        return ids.with_flat_values(self.renumber(ids.flat_values))
