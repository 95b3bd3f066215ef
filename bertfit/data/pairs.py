"""Sentence pairs made from labelled rows, for `--few-shot`'s contrastive stage
(`bertfit.training.few_shot`), as SetFit makes them.

Every row is paired with `per_row` rows like it (positives) and `per_row` rows unlike it
(negatives), drawn with replacement, never with itself: 2 × `per_row` pairs a row, so the pairs
grow with the rows, not with their square (SetFit's `num_iterations`; all of a set's pairs grow
quadratically). A row that has no partner of one kind (the only row of its class, or a
multi-label row that shares a label with every other) takes only the kind it has. The target is
how alike the two rows are, which the cosine of their embeddings learns:

- single-label: 1 for the same class, 0 for another;
- multi-label: the Jaccard index of the two label sets (shared labels over the labels of
  either; two rows without any label are alike, 1); positives share a label, negatives none.

The pairs are shuffled and depend only on the labels and the seed.

>>> pairs = sentence_pairs(np.array([0, 0, 1, 1]), per_row=2, seed=0)
>>> len(pairs), sorted(set(pairs.targets.tolist()))
(16, [0.0, 1.0])
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class SentencePairs:
    """Pairs of row indices and how alike each pair's rows are (float32 in [0, 1])."""

    left: np.ndarray
    right: np.ndarray
    targets: np.ndarray

    def __len__(self) -> int:
        return len(self.targets)


def similarity(labels: np.ndarray) -> np.ndarray:
    """[rows, rows] likeness of every two rows: class ids [rows] are alike when equal;
    multi-hot rows [rows, labels] by the Jaccard index of their label sets.

    >>> similarity(np.array([[1, 1, 0], [0, 1, 0], [0, 0, 0]])).tolist()[0]
    [1.0, 0.5, 0.0]
    """
    labels = np.asarray(labels)
    if labels.ndim == 1:
        return (labels[:, None] == labels[None, :]).astype(np.float32)
    hot = labels.astype(np.float32)
    shared = hot @ hot.T
    either = hot.sum(1)[:, None] + hot.sum(1)[None, :] - shared
    return np.where(either > 0, shared / np.maximum(either, 1), 1.0).astype(np.float32)


def sentence_pairs(labels: np.ndarray, per_row: int, seed: int) -> SentencePairs:
    """`per_row` positive and `per_row` negative pairs for each row of `labels` (class ids,
    or multi-hot rows), shuffled with `seed`; see the module docstring."""
    alike = similarity(labels)
    rng = np.random.default_rng(seed)
    left, right = [], []
    for row in range(len(alike)):
        others = np.arange(len(alike)) != row
        for partners in (others & (alike[row] > 0), others & (alike[row] == 0)):
            candidates = np.flatnonzero(partners)
            if len(candidates):
                right.append(rng.choice(candidates, per_row))
                left.append(np.full(per_row, row))
    left = np.concatenate(left) if left else np.zeros(0, np.int64)
    right = np.concatenate(right) if right else np.zeros(0, np.int64)
    order = rng.permutation(len(left))
    left, right = left[order], right[order]
    return SentencePairs(left, right, alike[left, right])
