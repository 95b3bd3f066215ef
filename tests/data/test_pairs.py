"""`--few-shot`'s sentence pairs: balanced, capped, deterministic, and alike by label."""

import numpy as np

from bertfit.data.pairs import sentence_pairs


def test_every_row_takes_as_many_positive_as_negative_pairs_never_with_itself():
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    pairs = sentence_pairs(labels, per_row=5, seed=1)
    assert len(pairs) == 2 * 5 * len(labels)  # capped: linear in the rows, not quadratic
    assert not np.any(pairs.left == pairs.right)
    for row in range(len(labels)):
        mine = pairs.left == row
        same = labels[pairs.right[mine]] == labels[row]
        assert same.sum() == 5 and (~same).sum() == 5
        np.testing.assert_array_equal(pairs.targets[mine], same.astype(np.float32))


def test_the_same_labels_and_seed_make_the_same_pairs():
    labels = np.array([0, 1, 0, 1, 1, 0])
    first, again = sentence_pairs(labels, 3, seed=7), sentence_pairs(labels, 3, seed=7)
    other = sentence_pairs(labels, 3, seed=8)
    for name in ("left", "right", "targets"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    assert not np.array_equal(first.right, other.right)


def test_multi_label_rows_are_alike_by_their_label_sets():
    labels = np.array([[1, 1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]])
    pairs = sentence_pairs(labels, per_row=4, seed=0)
    expected = {(0, 1): 0.5, (0, 2): 0.0, (1, 2): 0.0, (3, 4): 1.0, (0, 3): 0.0}
    for left, right, target in zip(pairs.left, pairs.right, pairs.targets, strict=True):
        key = (min(left, right), max(left, right))
        if key in expected:
            assert target == expected[key]
    row_2 = pairs.targets[pairs.left == 2]  # shares a label with no row: negatives only
    assert len(row_2) == 4 and not row_2.any()


def test_the_only_row_of_its_class_takes_negative_pairs_only():
    pairs = sentence_pairs(np.array([0, 0, 1]), per_row=2, seed=0)
    assert pairs.targets[pairs.left == 2].tolist() == [0.0, 0.0]
    assert len(pairs) == 2 * 2 * 2 + 2
