"""The training data's token lengths against the length buckets: what the report and
TensorBoard show, and how much of each bucket's compute goes to padding."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from bertfit.data.pipeline import PAD_INDEX, Batch


@dataclasses.dataclass
class LengthProfile:
    """Token lengths ([CLS]/[SEP] included, truncated to max_seq_length) and, per bucket, the
    examples, the real tokens and the token slots its full batches compute (padding rows
    included).

    >>> from bertfit.data.pipeline import plan_batches
    >>> lengths = np.array([5, 7, 30])
    >>> p = LengthProfile.of(lengths, [8, 32], plan_batches(lengths, [8, 32], 2, shuffle=False))
    >>> p.examples, p.real_tokens, p.slots
    ([2, 1], [12, 30], [16, 64])
    >>> [round(w, 3) for w in p.padding_waste()]
    [0.25, 0.531]
    """

    buckets: list[int]
    counts: dict[int, int]  # token length -> examples
    examples: list[int]
    real_tokens: list[int]
    slots: list[int]

    @classmethod
    def of(
        cls, packed_lengths: np.ndarray, buckets: Sequence[int], plan: Sequence[Batch]
    ) -> LengthProfile:
        lengths = np.minimum(np.asarray(packed_lengths), max(buckets))
        values, counts = np.unique(lengths, return_counts=True)
        index = {b: i for i, b in enumerate(buckets)}
        examples, real, slots = ([0] * len(buckets) for _ in range(3))
        for batch in plan:
            i = index[batch.seq_length]
            rows = batch.indices[batch.indices != PAD_INDEX]
            examples[i] += len(rows)
            real[i] += int(np.minimum(lengths[rows], batch.seq_length).sum())
            slots[i] += len(batch.indices) * batch.seq_length
        return cls(
            list(map(int, buckets)),
            dict(zip(map(int, values), map(int, counts), strict=True)),
            examples,
            real,
            slots,
        )

    def lengths(self) -> np.ndarray:
        """Every example's length (for a histogram)."""
        return np.repeat(list(self.counts), list(self.counts.values())).astype(np.float32)

    def padding_waste(self) -> list[float]:
        """The share of each bucket's token slots that are padding."""
        return [1 - r / s if s else 0.0 for r, s in zip(self.real_tokens, self.slots, strict=True)]

    def to_dict(self) -> dict:
        return {
            **dataclasses.asdict(self),
            "counts": {str(k): v for k, v in self.counts.items()},
            "padding_waste": self.padding_waste(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> LengthProfile:
        return cls(
            d["buckets"],
            {int(k): v for k, v in d["counts"].items()},
            d["examples"],
            d["real_tokens"],
            d["slots"],
        )
