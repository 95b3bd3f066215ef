"""The pairs of labelled rows `--few-shot`'s contrastive stage trains on
(`bertfit.training.few_shot`): every pair of rows within a batch.

SetFit lists pairs of rows and embeds both rows of each, so a row is encoded once for every
pair it is in. Here a step encodes a batch of rows once and trains on all of its pairs: a batch
of 8 rows is 28 pairs for 8 encodings, where listed pairs cost 56 (measured: the same accuracy
for about a quarter of the stage's time, docs/training.md#few-shot-training).

- `row_batches`: `epochs` shuffles of the rows, one after another, cut into batches of
  `batch_size` (every row in `epochs` batches; the last incomplete batch left out, so every step
  has one shape);
- `pair_weights`: each distinct pair of a batch weighted so that the pairs alike and the pairs
  unlike carry half of the loss each (as SetFit oversamples the rarer kind), never a row with
  itself;
- `similarity`: the target of a pair, how alike its rows are, which the cosine of their
  embeddings learns: single-label, 1 for the same class and 0 for another; multi-label, the
  Jaccard index of the two label sets (two rows without any label are alike, 1).

>>> batches = row_batches(rows=6, batch_size=4, epochs=2, seed=0)
>>> batches.shape, sorted(np.bincount(batches.ravel(), minlength=6).tolist())
((3, 4), [2, 2, 2, 2, 2, 2])
"""

from __future__ import annotations

import numpy as np


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


def row_batches(rows: int, batch_size: int, epochs: int, seed: int) -> np.ndarray:
    """[steps, batch_size] row indices: `epochs` shuffles of `rows` rows with `seed`, one after
    another, in batches (see the module docstring)."""
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(rows) for _ in range(epochs)])
    steps = len(order) // batch_size
    return order[: steps * batch_size].reshape(steps, batch_size)


def pair_weights(batch: np.ndarray, alike: np.ndarray) -> np.ndarray:
    """[batch, batch] float32 weights of a batch's pairs (`batch`: its row indices; `alike`:
    their [batch, batch] likeness): each pair of two different rows counted once, the pairs
    alike (likeness > 0) and unlike sharing the loss equally; they sum to 1 (all zero for a
    batch of one row repeated).

    >>> pair_weights(np.array([0, 1, 2]), similarity(np.array([0, 0, 1]))).tolist()
    [[0.0, 0.5, 0.25], [0.0, 0.0, 0.25], [0.0, 0.0, 0.0]]
    """
    batch = np.asarray(batch)
    distinct = np.triu(batch[:, None] != batch[None, :], k=1)
    weights = np.zeros(alike.shape, np.float32)
    kinds = [distinct & (alike > 0), distinct & (alike == 0)]
    present = [kind for kind in kinds if kind.any()]
    for kind in present:
        weights[kind] = 1.0 / (len(present) * kind.sum())
    return weights
