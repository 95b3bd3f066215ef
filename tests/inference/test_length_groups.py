"""How a batch of texts is cut into model calls: runs of similar lengths (`length_groups`), shared
by lanes of calls at once (`length_lanes`). No model here: the cuts are checked against every
other way of cutting the same rows."""

from __future__ import annotations

import itertools

import numpy as np

from bertfit.inference.texts import CALL_TOKENS, length_groups, length_lanes

# Tokens per text of 12 Rotten Tomatoes test snippets (MiniLM's tokenizer, special tokens in).
SNIPPETS = [27, 12, 43, 9, 31, 58, 22, 14, 36, 27, 19, 64]


def _cost(lengths, groups) -> int:
    """Padded tokens of the calls, and `CALL_TOKENS` a call."""
    return sum(CALL_TOKENS + len(g) * max(lengths[i] for i in g) for g in groups)


def _every_cut(lengths):
    """Every way to cut the rows, sorted by length, into runs."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for cuts in itertools.product([False, True], repeat=len(order) - 1):
        groups, group = [], [order[0]]
        for row, cut in zip(order[1:], cuts, strict=True):
            if cut:
                groups.append(group)
                group = []
            group.append(row)
        yield [*groups, group]


def test_a_batch_is_cut_into_the_runs_that_pad_the_fewest_tokens():
    lengths = SNIPPETS[:9]
    groups = length_groups(lengths)
    assert sorted(np.concatenate(groups).tolist()) == list(range(len(lengths)))
    best = min(_cost(lengths, g) for g in _every_cut(lengths))
    assert _cost(lengths, groups) == best
    assert best < _cost(lengths, [list(range(len(lengths)))])  # fewer than one call's padding
    assert [len(g) for g in length_groups([7] * 5)] == [5]  # equal lengths: one call


def test_lanes_share_the_tokens_of_a_batch_and_each_row_runs_once():
    lanes = length_lanes(SNIPPETS, lanes=2)
    rows = [row for lane in lanes for group in lane for row in group.tolist()]
    assert sorted(rows) == list(range(len(SNIPPETS)))
    tokens = [sum(SNIPPETS[row] for group in lane for row in group) for lane in lanes]
    assert max(tokens) - min(tokens) <= max(SNIPPETS)  # within one row of an even share
    assert len(length_lanes([30], lanes=2)) == 1  # no empty lane
    assert length_lanes([], lanes=2) == []
