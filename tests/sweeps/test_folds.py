"""The k-fold splitter: folds are disjoint, cover every row once, and are stratified (per class,
per label for multi-label, over the range of targets for regression)."""

from __future__ import annotations

import numpy as np
import pytest

from bertfit.data.tasks import MULTI_LABEL, SINGLE_LABEL, Task
from bertfit.errors import ConfigError, DataError
from bertfit.sweeps.folds import (
    check_every_label_trains,
    check_no_label_on_every_training_row,
    fold_of_rows,
    validation_rows,
)


def _folds(assigned: np.ndarray, k: int) -> list[set[int]]:
    return [set(np.flatnonzero(assigned == f).tolist()) for f in range(k)]


def _disjoint_and_covering(assigned: np.ndarray, k: int) -> None:
    folds = _folds(assigned, k)
    assert set().union(*folds) == set(range(len(assigned)))
    assert sum(len(f) for f in folds) == len(assigned)  # no row in two folds
    assert all(folds)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_single_label_folds_are_disjoint_cover_every_row_and_hold_each_class_evenly(k):
    rng = np.random.default_rng(7)
    labels = rng.permutation(np.repeat([0, 1, 2], [23, 11, 4]))  # a minority class of 4
    assigned = fold_of_rows(SINGLE_LABEL, labels, k, seed=3)
    _disjoint_and_covering(assigned, k)
    sizes = np.bincount(assigned, minlength=k)
    assert sizes.max() - sizes.min() <= 1
    for label in range(3):
        per_fold = np.bincount(assigned[labels == label], minlength=k)
        count = int((labels == label).sum())
        assert set(per_fold.tolist()) <= {count // k, -(-count // k)}, (label, per_fold)


def test_multi_label_folds_spread_every_label_and_the_rare_one_exactly():
    rng = np.random.default_rng(0)
    n, k = 90, 3
    present = np.zeros((n, 3), bool)
    present[rng.choice(n, 6, replace=False), 0] = True  # rare: 6 rows, 2 per fold
    present[:, 1] = rng.random(n) < 0.3
    present[:, 2] = rng.random(n) < 0.6  # some rows have no label at all
    assigned = fold_of_rows(MULTI_LABEL, present.astype(np.float32), k, seed=1)
    _disjoint_and_covering(assigned, k)
    per_fold = np.stack([present[assigned == f].sum(axis=0) for f in range(k)])
    assert per_fold[:, 0].tolist() == [2, 2, 2]
    expected = present.sum(axis=0) / k
    assert np.all(np.abs(per_fold - expected) <= 1.0), per_fold
    sizes = np.bincount(assigned, minlength=k)
    assert np.all(np.abs(sizes - n / k) <= 2), sizes


def test_regression_folds_span_the_range_of_targets():
    values = np.random.default_rng(2).normal(size=50)
    assigned = fold_of_rows("regression", values, 5, seed=0)
    _disjoint_and_covering(assigned, 5)
    order = np.argsort(values)
    for start in range(0, 50, 5):  # each run of 5 neighbouring targets: one per fold
        assert sorted(assigned[order[start : start + 5]].tolist()) == [0, 1, 2, 3, 4]


def test_the_split_depends_only_on_the_targets_k_and_the_seed():
    labels = np.arange(40) % 4
    first = fold_of_rows(SINGLE_LABEL, labels, 4, seed=5)
    assert fold_of_rows(SINGLE_LABEL, labels, 4, seed=5).tolist() == first.tolist()
    assert fold_of_rows(SINGLE_LABEL, labels, 4, seed=6).tolist() != first.tolist()


def test_k_must_be_between_two_and_the_number_of_rows():
    with pytest.raises(ConfigError, match="--folds 1"):
        fold_of_rows(SINGLE_LABEL, np.array([0, 1, 0, 1]), 1)
    with pytest.raises(ConfigError, match="4 rows"):
        fold_of_rows(SINGLE_LABEL, np.array([0, 1, 0, 1]), 5)


def test_a_label_in_one_row_is_refused_since_a_fold_could_not_train_on_it():
    task = Task(SINGLE_LABEL, ("a", "b", "c"))
    with pytest.raises(DataError, match="'c' are in only one training row"):
        check_every_label_trains(task, np.array([0, 0, 1, 1, 2]), "train.csv")
    tags = Task(MULTI_LABEL, ("x", "y"))
    check_every_label_trains(tags, np.array([[1, 1], [1, 1], [0, 0]], np.float32), "t.jsonl")


def test_a_label_on_every_training_row_of_a_fold_is_refused_before_any_run():
    """'news' is missing from one row only: the fold holding that row out trains on rows
    that all have it, which that fold's run would refuse after the others trained."""
    task = Task(MULTI_LABEL, ("neg", "news", "pos"))
    targets = np.array([[0, 1, 1], [1, 1, 0], [0, 1, 1], [1, 0, 0], [1, 1, 0], [0, 1, 1]], float)
    fold = np.array([1, 1, 2, 2, 3, 3])
    with pytest.raises(DataError, match=r"fold 2's training rows all have the label\(s\) 'news'"):
        check_no_label_on_every_training_row(task, targets, fold, "train.jsonl")
    targets[0, 1] = 0  # missing from a row of fold 1 too: every fold's training part lacks it once
    check_no_label_on_every_training_row(task, targets, fold, "train.jsonl")


def test_a_folds_validation_slice_is_a_tenth_and_leaves_every_label_to_train_on():
    labels = np.repeat([0, 1, 2], [50, 39, 1])  # class 2: one training row, never in the slice
    valid = validation_rows(SINGLE_LABEL, labels, [42, 1])
    assert valid.sum() == 9 and np.bincount(labels[valid]).tolist() == [5, 4]
    assert validation_rows(SINGLE_LABEL, labels, [42, 1]).tolist() == valid.tolist()  # seeded
    tags = np.array([[1, 1], [0, 0], [1, 1], [1, 0], [1, 0], [1, 0]], np.float32)
    # slice 0 of seed 1 is rows 1 and 5; row 1 is the only one without 'a': it trains
    assert (fold_of_rows(MULTI_LABEL, tags, 3, 1) == 0).tolist() == [0, 1, 0, 0, 0, 1]
    assert validation_rows(MULTI_LABEL, tags, 1).tolist() == [0, 0, 0, 0, 0, 1]
