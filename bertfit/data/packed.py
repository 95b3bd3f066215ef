"""Packing (`--packing`): several examples per row, one static shape for the whole run.

Instead of padding each example to its length bucket, a packed batch is `rows` rows of
`length` (= max_seq_length) tokens, each row holding up to `slots` examples one after another
(`text.packing.pack_rows` lays them out; the model keeps them apart: `model/inputs.py`). One
shape means one compilation of each step, and the padding is what the rows leave empty.

Planning an epoch (`plan_packed`):
1. Row templates (`row_templates`): which lengths share a row, by best fit largest first over
   the whole epoch: each row starts with the longest example left and takes the longest that
   still fits until no example does (or its slots are full). The templates depend on the
   length histogram alone, so every epoch has the same rows, the same steps (the run's length,
   its schedule and a resume need that) and little padding.
2. The examples of each length fill that length's places in the epoch's shuffled order, and
   the rows are shuffled into batches of `rows_per_step` rows: which examples share a row and
   a step changes every epoch. The last batch is completed with empty rows (index -1).

`PackedShape.choose` decides the shape once per run from the training lengths: `slots` the
most examples a row can hold (at most MAX_SLOTS), `rows` so that a step holds about
`--batch-size` examples on average (a multiple of the replicas). Evaluation and prediction
use the same shape (one compilation of the predict step); every example is in one slot, its
`index` scatters its outputs back in order.

    >>> lengths = np.array([60, 30, 30, 20, 12, 10, 8, 6, 4, 3])
    >>> shape = PackedShape.choose(lengths, 64, batch_size=4)
    >>> shape
    PackedShape(rows=1, slots=7, length=64)
    >>> row_templates(lengths, shape).tolist()
    [[60, 4, 0, 0, 0, 0, 0], [30, 30, 3, 0, 0, 0, 0], [20, 12, 10, 8, 6, 0, 0]]
    >>> plan = plan_packed(lengths, shape, rows_per_step=2, shuffle=False)
    >>> [batch.indices.tolist() for batch in plan][1]  # the last batch: one empty row
    [[3, 4, 5, 6, 7, -1, -1], [-1, -1, -1, -1, -1, -1, -1]]
    >>> round(padding_share(lengths, shape, plan), 3)
    0.285
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from bertfit.data.pipeline import PAD_INDEX, Batch

# A row's example slots at most: the head and the pooling compute every slot, filled or not.
MAX_SLOTS = 64


@dataclasses.dataclass(frozen=True)
class PackedShape:
    """The one shape of a packed run's batches.

    Args:
        rows: rows of a global (micro-)batch.
        slots: example slots of a row.
        length: tokens of a row (max_seq_length).
    """

    rows: int
    slots: int
    length: int

    @classmethod
    def choose(
        cls, packed_lengths: np.ndarray, length: int, *, batch_size: int, replicas: int = 1
    ) -> PackedShape:
        """The shape for these training lengths (clipped to `length`): as many slots as the
        shortest examples fill a row with (at most MAX_SLOTS), and the rows, a multiple of
        `replicas`, whose examples average closest to `batch_size` per step."""
        lengths = np.sort(np.minimum(packed_lengths, length))
        fitting = int(np.searchsorted(np.cumsum(lengths), length, side="right"))
        slots = int(np.clip(fitting, 1, MAX_SLOTS))
        templates = row_templates(lengths, cls(replicas, slots, length))
        per_row = len(lengths) / max(len(templates), 1)
        rows = replicas * max(1, round(batch_size / per_row / replicas))
        return cls(rows, slots, length)

    def describe(self) -> str:
        """The shape in words, for notes and logs."""
        return f"{self.rows} rows of {self.length} tokens, up to {self.slots} examples a row"


def row_templates(packed_lengths: np.ndarray, shape: PackedShape) -> np.ndarray:
    """[rows, slots]: the lengths of each row's examples (0: an empty slot), by best fit
    largest first over every example (see the module docstring). A template repeats while its
    lengths last: the greedy choice is the same until one of them runs out."""
    lengths = np.minimum(np.asarray(packed_lengths, np.int64), shape.length)
    left = np.bincount(lengths, minlength=shape.length + 1)
    templates, repeats = [], []
    while left.any():
        row, room = [], shape.length
        while len(row) < shape.slots:
            fitting = np.flatnonzero(left[: room + 1])
            if not len(fitting):
                break
            row.append(int(fitting[-1]))
            room -= row[-1]
            left[row[-1]] -= 1  # taken once now; the repeats below take the rest
        used = np.bincount(row, minlength=shape.length + 1)
        times = 1 + int(np.min((left // np.maximum(used, 1))[used > 0]))
        left -= used * (times - 1)
        templates.append(row + [0] * (shape.slots - len(row)))
        repeats.append(times)
    if not templates:
        return np.zeros((0, shape.slots), np.int64)
    return np.repeat(np.asarray(templates, np.int64), repeats, axis=0)


def plan_packed(
    packed_lengths: np.ndarray,
    shape: PackedShape,
    rows_per_step: int,
    *,
    shuffle: bool,
    seed: int = 0,
    epoch: int = 0,
) -> list[Batch]:
    """The epoch's packed batches: `Batch(shape.length, indices [rows_per_step, slots])`, -1
    on empty slots. Every example is in exactly one slot; with `shuffle` which examples share
    a row and a step depends on (seed, epoch), the same on every worker."""
    lengths = np.minimum(np.asarray(packed_lengths, np.int64), shape.length)
    templates = row_templates(lengths, shape)
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths)) if shuffle else np.arange(len(lengths))
    # Each length's places (row after row) take that length's examples in the epoch's order.
    examples = order[np.argsort(lengths[order], kind="stable")]
    places = np.flatnonzero(templates.reshape(-1))
    places = places[np.argsort(templates.reshape(-1)[places], kind="stable")]
    indices = np.full(templates.size, PAD_INDEX, np.int64)
    indices[places] = examples
    indices = indices.reshape(templates.shape)
    if shuffle:
        indices = indices[rng.permutation(len(indices))]
    empty_rows = (-len(indices)) % rows_per_step
    indices = np.concatenate([indices, np.full((empty_rows, shape.slots), PAD_INDEX)])
    return [
        Batch(shape.length, indices[start : start + rows_per_step])
        for start in range(0, len(indices), rows_per_step)
    ]


def padding_share(packed_lengths: np.ndarray, shape: PackedShape, plan: Sequence[Batch]) -> float:
    """The share of the plan's token slots that are padding."""
    tokens = np.minimum(np.asarray(packed_lengths), shape.length).sum()
    slots = sum(len(batch.indices) for batch in plan) * shape.length
    return float(1 - tokens / max(slots, 1))
