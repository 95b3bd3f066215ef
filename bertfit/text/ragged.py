"""`RaggedIds`: the token ids of many texts in two NumPy arrays, as a tokenizer's `tokenize_all`
gives them (the in-graph tokenizers through tf.data, the host one through `tokenizers`) and the
input pipelines read them: tf.data as a `tf.RaggedTensor` (`as_tensor`), the host's batches row
by row. No TensorFlow here.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class RaggedIds:
    """Every text's ids one after another (`values`, int32) and where each text's ids start
    (`row_splits`, int64, one more than the texts), as a `tf.RaggedTensor` holds them.

    Examples:
    >>> ids = RaggedIds.from_rows([[7, 8], [], [9]])
    >>> len(ids), ids.row_lengths().tolist(), ids[0].tolist(), ids.row_splits.tolist()
    (3, [2, 0, 1], [7, 8], [0, 2, 2, 3])
    >>> [row.tolist() for row in ids.rows([2, 0])], ids.to_list()
    ([[9], [7, 8]], [[7, 8], [], [9]])
    """

    values: np.ndarray
    row_splits: np.ndarray

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[int]]) -> RaggedIds:
        """The ids of each text, one list (or array) a text."""
        rows = list(rows)
        lengths = np.fromiter((len(row) for row in rows), np.int64, len(rows))
        splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        values = np.fromiter(itertools.chain.from_iterable(rows), np.int32, int(splits[-1]))
        return cls(values, splits)

    @classmethod
    def concat(cls, parts: Sequence[RaggedIds]) -> RaggedIds:
        """The texts of every part, in order."""
        if not parts:
            return cls(np.zeros(0, np.int32), np.zeros(1, np.int64))
        offsets = np.cumsum([0] + [len(p.values) for p in parts[:-1]])
        splits = [parts[0].row_splits[:1]] + [
            p.row_splits[1:] + offset for p, offset in zip(parts, offsets, strict=True)
        ]
        return cls(
            np.concatenate([p.values for p in parts]).astype(np.int32),
            np.concatenate(splits).astype(np.int64),
        )

    def __len__(self) -> int:
        return len(self.row_splits) - 1

    def row_lengths(self) -> np.ndarray:
        """Each text's number of ids (int64)."""
        return np.diff(self.row_splits)

    def __getitem__(self, index: int) -> np.ndarray:
        """The ids of one text."""
        return self.values[self.row_splits[index] : self.row_splits[index + 1]]

    def rows(self, indices: Iterable[int]) -> list[np.ndarray]:
        """The ids of the texts at `indices`, in that order."""
        return [self[i] for i in indices]

    def to_list(self) -> list[list[int]]:
        """Every text's ids as a list of ints (as `tf.RaggedTensor.to_list` gives them)."""
        return [row.tolist() for row in self.rows(range(len(self)))]

    def as_tensor(self):
        """The same ids as a `tf.RaggedTensor` [texts, None] of int32, in the host's memory
        (for tf.data)."""
        import tensorflow as tf

        with tf.device("/cpu:0"):
            values, splits = tf.constant(self.values, tf.int32), tf.constant(self.row_splits)
        return tf.RaggedTensor.from_row_splits(values, splits, validate=False)
