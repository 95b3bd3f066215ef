"""k-fold splits for small training sets: every row in exactly one held-out fold, stratified.

- single-label: each class's rows (shuffled) are dealt to the folds in turn, the turn carried
  from one class to the next, so every fold gets its share of every class (within one row) and
  the folds' sizes differ by at most one;
- multi-label: iterative stratification (Sechidis, Tsoumakas and Vlahavas, 2011): the rarest
  label's rows first, each to the fold that still wants most of that label (then most rows),
  so a rare label is spread over the folds as evenly as it can be; rows without labels fill
  the folds that want most rows;
- regression: the rows sorted by target, cut into runs of K, each run's rows dealt one per
  fold at random, so every fold spans the whole range of targets.

The split depends only on the targets, K and the seed: rerunning gives the same folds.

Each fold's run chooses what it chooses from data (its best checkpoint, early stopping, its
multi-label thresholds) on a validation slice of its own training part (`validation_rows`),
never on the rows it holds out: those are only predicted, so the out-of-fold predictions do
not see the labels they judge.
"""

from __future__ import annotations

import numpy as np

from bertfit.data.tasks import MULTI_LABEL, REGRESSION, SINGLE_LABEL, Task
from bertfit.errors import ConfigError, DataError


def fold_of_rows(
    kind: str, targets: np.ndarray, folds: int, seed: int | list[int] = 0
) -> np.ndarray:
    """The held-out fold (0 to `folds` - 1) of every row.

    Args:
        kind: the task: "single-label", "multi-label" or "regression".
        targets: class ids [n] (single-label), multi-hot rows [n, labels] (multi-label) or
            values [n] (regression), as `Task.targets` gives them.
        folds: K, at least 2 and at most the number of rows.
        seed: seeds the shuffling (a number, or a list of numbers).

    Examples:
    >>> fold_of_rows("single-label", np.array([0, 0, 1, 1, 1, 0]), 2, seed=0).tolist()
    [1, 0, 1, 0, 1, 0]
    """
    n = len(targets)
    if not 2 <= folds <= n:
        raise ConfigError(
            f"--folds {folds}: k-fold needs at least 2 folds and at most one per training row "
            f"({n} rows)."
        )
    rng = np.random.default_rng(seed)
    if kind == SINGLE_LABEL:
        return _single_label(np.asarray(targets), folds, rng)
    if kind == MULTI_LABEL:
        return _multi_label(np.asarray(targets) > 0.5, folds, rng)
    if kind == REGRESSION:
        return _regression(np.asarray(targets, np.float64), folds, rng)
    raise ValueError(f"unknown task kind {kind!r}")


VALIDATION_SLICES = 10  # a fold's validation slice: about a tenth of its training part


def validation_rows(kind: str, targets: np.ndarray, seed: int | list[int]) -> np.ndarray:
    """Which of a fold's training rows (`targets`, as `fold_of_rows` takes them) are its
    validation slice [n] bool: one of `VALIDATION_SLICES` stratified slices (`fold_of_rows`,
    seeded by `seed`), less any row whose class (or a label of it) no other training row has,
    so the run still trains on every label, and less a row whose missing label every other
    training row has.

    Examples:
    >>> validation_rows("single-label", np.array([0, 0, 0, 0, 1, 1, 1, 1, 2]), seed=0).tolist()
    [False, False, True, False, False, False, False, True, False]
    """
    slices = max(2, min(VALIDATION_SLICES, len(targets) // 2))
    chosen = fold_of_rows(kind, targets, slices, seed) == 0
    if kind == SINGLE_LABEL:
        present = np.eye(int(np.max(targets)) + 1, dtype=bool)[np.asarray(targets)]
    elif kind == MULTI_LABEL:
        present = np.asarray(targets) > 0.5
    else:
        return chosen
    only_here = present[chosen].any(axis=0) & ~present[~chosen].any(axis=0)
    chosen &= ~present[:, only_here].any(axis=1)
    # nor a multi-label label on every row it trains on (a constant target its run refuses)
    missing_only_here = ~present[chosen].all(axis=0) & present[~chosen].all(axis=0)
    return chosen & present[:, missing_only_here].all(axis=1)


def check_every_label_trains(task: Task, targets: np.ndarray, path: str) -> None:
    """Every label must be in at least two rows, so that each fold's training part has it (a
    fold whose held-out rows had a label its training never saw could not be evaluated)."""
    if task.kind == REGRESSION:
        return
    counts = (
        np.bincount(targets, minlength=len(task.labels))
        if task.kind == SINGLE_LABEL
        else np.asarray(targets).sum(axis=0)
    )
    lonely = [label for label, count in zip(task.labels, counts, strict=True) if count < 2]
    if lonely:
        raise DataError(
            f"label(s) {', '.join(map(repr, lonely))} are in only one training row; with --folds "
            "every label must be in at least two rows (so that every fold's training part has "
            "it). Add rows, merge or drop the label, or train without --folds.",
            path=path,
            code="data-label-too-rare",
        )


def check_no_label_on_every_training_row(
    task: Task, targets: np.ndarray, fold: np.ndarray, path: str
) -> None:
    """A multi-label label on every row of a fold's training part would be refused by that
    fold's run (a constant target: `bertfit.data.tasks`), after the folds before it trained;
    said here, before any run. `fold`: each row's held-out fold, 1 to K."""
    if task.kind != MULTI_LABEL:
        return
    for k in np.unique(fold):
        always = np.asarray(targets)[fold != k].min(axis=0, initial=1.0) == 1.0
        if always.any():
            labels = [label for label, on in zip(task.labels, always, strict=True) if on]
            absent = int((np.asarray(targets)[:, always.argmax()] == 0).sum())
            raise DataError(
                f"with --folds, fold {k}'s training rows all have the label(s) "
                f"{', '.join(map(repr, labels))} (missing from only {absent} row(s) of the "
                "file): a constant target its run would refuse. Add rows without it, drop the "
                "label, or train without --folds.",
                path=path,
                code="data-label-on-every-row",
            )


def _single_label(labels: np.ndarray, folds: int, rng: np.random.Generator) -> np.ndarray:
    assigned = np.empty(len(labels), np.int64)
    turn = 0
    for label in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == label))
        assigned[rows] = (turn + np.arange(len(rows))) % folds
        turn = (turn + len(rows)) % folds
    return assigned


def _multi_label(present: np.ndarray, folds: int, rng: np.random.Generator) -> np.ndarray:
    n = len(present)
    assigned = np.full(n, -1, np.int64)
    wanted_rows = np.full(folds, n / folds)
    wanted = np.tile(present.sum(axis=0) / folds, (folds, 1))  # [fold, label]
    left = present.copy()
    while left.any():
        counts = left.sum(axis=0)
        label = int(np.argmin(np.where(counts > 0, counts, np.iinfo(np.int64).max)))
        for row in rng.permutation(np.flatnonzero(left[:, label])):
            fold = _neediest(wanted[:, label], wanted_rows, rng)
            assigned[row] = fold
            wanted[fold] -= present[row]
            wanted_rows[fold] -= 1
            left[row] = False
    for row in rng.permutation(np.flatnonzero(assigned < 0)):  # rows without labels
        fold = _neediest(wanted_rows, wanted_rows, rng)
        assigned[row] = fold
        wanted_rows[fold] -= 1
    return assigned


def _neediest(want: np.ndarray, want_rows: np.ndarray, rng: np.random.Generator) -> int:
    """The fold that wants most (ties: the one that wants most rows, then at random)."""
    candidates = np.flatnonzero(want == want.max())
    candidates = candidates[want_rows[candidates] == want_rows[candidates].max()]
    return int(rng.choice(candidates))


def _regression(values: np.ndarray, folds: int, rng: np.random.Generator) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    assigned = np.empty(len(values), np.int64)
    for start in range(0, len(order), folds):
        chunk = order[start : start + folds]
        assigned[chunk] = rng.permutation(folds)[: len(chunk)]
    return assigned
