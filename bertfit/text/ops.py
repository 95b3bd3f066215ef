"""The two tensorflow-text ops the tokenizer runs, WordPiece and Unicode normalization, loaded
without `import tensorflow_text`.

Importing tensorflow_text loads all 22 of its op libraries: 107 MiB more memory and ~0.2 s more
start-up in every process. The tokenizer needs two of them (8 MiB). They are the same ops from
the same files, so the SavedModels bertfit writes load with `import tensorflow_text` as usual, and
importing tensorflow_text after this module works. Code that loads someone else's SavedModel (a
TF Hub preprocessor may use any tensorflow-text op) imports tensorflow_text itself.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import tensorflow as tf

from bertfit.tf_startup import native_logs_quiet


def _op_library(name: str):
    """tensorflow_text's op library `name`, found without importing the package, at the path
    tensorflow_text loads it from (TensorFlow registers a library's ops once per path)."""
    package = Path(importlib.util.find_spec("tensorflow_text").origin).parent
    with native_logs_quiet():
        return tf.load_op_library(str(package / "python" / "ops" / f"{name}.so"))


_normalize = _op_library("_normalize_ops")
_wordpiece = _op_library("_wordpiece_tokenizer")


def normalize_nfd(text: tf.Tensor) -> tf.Tensor:
    """Unicode's canonical decomposition (NFD) of UTF-8 strings, e.g. "é" to "e" + U+0301.

    Examples:
    >>> normalize_nfd(tf.constant(["café"])).numpy()[0]
    b'cafe\\xcc\\x81'
    """
    return _normalize.normalize_utf8(text, "NFD")


def wordpiece_ids(
    words: tf.Tensor, table: tf.lookup.StaticHashTable, unknown_token: str, max_bytes_per_word: int
) -> tf.RaggedTensor:
    """Words (strings [n]) to [n, pieces] int32 ids as BERT's WordPiece (and tensorflow_text's
    `WordpieceTokenizer`) splits them: greedy longest match first over the vocabulary `table`
    (token to int64 id, -1 when absent), "##" marking a piece that continues a word. A word
    that cannot be covered, or is longer than `max_bytes_per_word`, is `unknown_token`.

    Examples:
    >>> vocab = {"un": 0, "##aff": 1, "##able": 2, "[UNK]": 3}
    >>> table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
    ...     list(vocab), tf.constant(list(vocab.values()), tf.int64)), -1)
    >>> wordpiece_ids(tf.constant(["unaffable", "xyz"]), table, "[UNK]", 100).to_list()
    [[0, 1, 2], [3]]
    """
    if table.value_dtype != tf.int64:  # the kernel would abort the process
        raise TypeError(f"wordpiece_ids needs a table of int64 ids, not {table.value_dtype.name}")
    pieces, row_splits, _, _ = _wordpiece.wordpiece_tokenize_with_offsets(
        input_values=words,
        vocab_lookup_table=table.resource_handle,
        suffix_indicator="##",
        use_unknown_token=True,
        max_bytes_per_word=max_bytes_per_word,
        max_chars_per_token=0,  # no limit
        unknown_token=unknown_token,
        split_unknown_characters=False,
        output_row_partition_type="row_splits",
    )
    ids = tf.cast(table.lookup(pieces), tf.int32)
    return tf.RaggedTensor.from_row_splits(ids, row_splits, validate=False)
