"""`--few-shot`'s pairs: every pair within a batch of rows, alike by label, the two kinds
weighted equally, deterministic."""

import numpy as np

from bertfit.data.pairs import pair_weights, row_batches, similarity


def test_every_row_is_in_one_batch_a_pass_and_every_batch_has_one_shape():
    batches = row_batches(rows=10, batch_size=4, epochs=3, seed=1)
    assert batches.shape == (7, 4)  # 30 rows' places, the last incomplete batch left out
    counts = np.bincount(batches.ravel(), minlength=10)
    assert counts.max() == 3 and counts.sum() == 28
    first_pass = np.concatenate([batches[:2].ravel(), batches[2, :2]])
    assert sorted(first_pass.tolist()) == list(range(10))


def test_the_same_rows_and_seed_make_the_same_batches():
    first, again = row_batches(12, 4, 2, seed=7), row_batches(12, 4, 2, seed=7)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, row_batches(12, 4, 2, seed=8))


def test_alike_and_unlike_pairs_carry_half_the_loss_each_and_a_row_never_pairs_itself():
    batch = np.array([0, 1, 2, 3, 0])  # row 0 twice, across two passes
    labels = np.array([0, 0, 0, 1])
    weights = pair_weights(batch, similarity(labels[batch]))
    alike = similarity(labels[batch])
    assert weights[0, 4] == 0 and not np.tril(weights).any()  # each pair once, never (0, 0)
    np.testing.assert_allclose([weights[alike > 0].sum(), weights[alike == 0].sum()], [0.5, 0.5])


def test_a_batch_of_one_kind_gives_it_the_whole_weight():
    weights = pair_weights(np.array([0, 1, 2]), similarity(np.array([1, 1, 1])))
    np.testing.assert_allclose(weights[np.triu_indices(3, 1)], [1 / 3] * 3)


def test_multi_label_rows_are_alike_by_their_label_sets():
    alike = similarity(np.array([[1, 1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]]))
    expected = {(0, 1): 0.5, (0, 2): 0.0, (1, 2): 0.0, (3, 4): 1.0, (0, 3): 0.0}
    for (left, right), value in expected.items():
        assert alike[left, right] == alike[right, left] == value
