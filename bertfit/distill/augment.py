"""More texts for the teacher to label (`bertfit distill --augment N`): copies of the labelled
rows' texts with words dropped at random. The student learns them from the teacher's soft labels
alone, as it does `--unlabelled` texts: many more near-copies of what it must classify, each
with the teacher's view of it (measured: docs/distill.md)."""

from __future__ import annotations

import random

from bertfit.data.sources import Example

DROP = 0.2  # each word's chance to be dropped from a copy


def word_dropped(text: str, rng: random.Random, drop: float = DROP) -> str:
    """`text` with each of its (whitespace-separated) words dropped with probability `drop`;
    one word is always kept.

    Examples:
    >>> word_dropped("a b c d e", random.Random(1), drop=0.5)
    'b c'
    """
    words = text.split()
    if not words:
        return text
    kept = [word for word in words if rng.random() >= drop] or [rng.choice(words)]
    return " ".join(kept)


def augmented(rows: list[Example], copies: int, seed: int) -> list[Example]:
    """`copies` word-dropped copies of each row (its text, and its pair's), without labels, in
    the rows' order; the same for the same `seed`. A copy keeps its row's line, for messages."""
    rng = random.Random(seed)
    return [
        Example(
            word_dropped(row.text, rng),
            None if row.text_pair is None else word_dropped(row.text_pair, rng),
            None,
            row.line,
        )
        for row in rows
        for _ in range(copies)
    ]
