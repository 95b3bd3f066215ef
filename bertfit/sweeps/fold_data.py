"""The data of k-fold cross-validation: the training rows split into fold files that a normal
run reads (each fold's training part cut into the rows it trains on and its validation slice,
`bertfit.sweeps.folds.validation_rows`), and the out-of-fold predictions gathered back from the
K runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from bertfit.atomic import write_text_atomic
from bertfit.config import RunConfig
from bertfit.data.labelled import infer_run_task
from bertfit.data.run_files import read_training_examples
from bertfit.data.sources import Example
from bertfit.data.tasks import MULTI_LABEL, REGRESSION, Task, normalize_label, parse_number
from bertfit.sweeps.folds import (
    check_every_label_trains,
    check_no_label_on_every_training_row,
    fold_of_rows,
    validation_rows,
)


@dataclasses.dataclass
class FoldSplit:
    """The training rows (as a run reads them, --max-train-examples applied) and the held-out
    fold (1 to K) of each."""

    examples: list[Example]
    fold: np.ndarray
    task: Task
    folder: Path

    def files(self, k: int) -> tuple[Path, Path, Path]:
        return fold_files(self.folder, k)


def fold_files(folder: Path, k: int) -> tuple[Path, Path, Path]:
    """(training file, validation file, held-out file) of fold `k`: its run trains on the
    first, chooses on the second (its --eval) and only predicts the third."""
    return tuple(folder / f"fold-{k}-{part}.jsonl" for part in ("train", "valid", "heldout"))


def split_training_rows(base: RunConfig, folds: int, folder: Path) -> FoldSplit:
    """Reads `base`'s training rows, splits them into `folds` stratified folds (seeded by
    `--seed`) and writes each fold's files into `folder`, in the training file's own columns,
    so each run reads them as it would the original. A rerun writes the same files (and leaves
    files that are already right untouched)."""
    examples = read_training_examples(base.data.train, base)[: base.data.max_train_examples]
    task, _ = infer_run_task(examples, base)
    targets = task.targets(examples, base.data.train)
    check_every_label_trains(task, targets, base.data.train)
    split = FoldSplit(
        examples, fold_of_rows(task.kind, targets, folds, base.train.seed) + 1, task, folder
    )
    check_no_label_on_every_training_row(task, targets, split.fold, base.data.train)
    folder.mkdir(parents=True, exist_ok=True)
    lines = np.array([jsonl_line(e, base) for e in examples], object)
    for k in range(1, folds + 1):
        training = np.flatnonzero(split.fold != k)
        # seeded by the fold too: each fold's slice is drawn afresh from its own training part
        valid = validation_rows(task.kind, targets[training], [base.train.seed, k])
        parts = (training[~valid], training[valid], np.flatnonzero(split.fold == k))
        for path, rows in zip(split.files(k), parts, strict=True):
            _write_if_changed(path, "".join(lines[rows]))
    assignment = {"folds": folds, "seed": base.train.seed, "fold_of_row": split.fold.tolist()}
    _write_if_changed(folder / "folds.json", json.dumps(assignment) + "\n")
    return split


def out_of_fold_rows(split: FoldSplit, predictions: dict[int, list[dict]]) -> list[dict]:
    """One row per training row, in the training file's order: its index, line and fold, the
    text (and pair), the true label as `target`, and the prediction of the run that did not
    train on it (`predictions[k]`: fold k's held-out rows, in order).

    Examples:
    >>> split = FoldSplit([Example("a", None, "pos", 2), Example("b", None, "neg", 3)],
    ...                   np.array([2, 1]), Task("single-label", ("neg", "pos")), Path("."))
    >>> out_of_fold_rows(split, {1: [{"label": "neg"}], 2: [{"label": "pos"}]})[0]
    {'row': 0, 'line': 2, 'fold': 2, 'text': 'a', 'target': 'pos', 'label': 'pos'}
    """
    remaining = {k: iter(rows) for k, rows in predictions.items()}
    rows = []
    for i, (example, fold) in enumerate(zip(split.examples, split.fold, strict=True)):
        row = {"row": i, "line": example.line, "fold": int(fold), "text": example.text}
        if example.text_pair is not None:
            row["text_pair"] = example.text_pair
        row["target"] = _target(split.task, example.label)
        rows.append({**row, **next(remaining[int(fold)])})
    return rows


def jsonl_line(example: Example, config: RunConfig) -> str:
    """`example` as a line of JSON in the training file's columns (`config`'s), its label as
    given."""
    d = config.data
    row = {d.text_column: example.text}
    if d.text_pair_column:
        row[d.text_pair_column] = example.text_pair
    row[d.label_column] = _label_value(example.label)
    return json.dumps(row, ensure_ascii=False) + "\n"


def _target(task: Task, label):
    """The true label as `predict` writes labels: a list of classes (multi-label), the label
    (single-label) or the number (regression)."""
    if task.kind == MULTI_LABEL:
        return task.label_set(label)
    if task.kind == REGRESSION:
        return parse_number(normalize_label(label))
    return normalize_label(label)


def _label_value(label):
    return list(label) if isinstance(label, tuple) else label


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        write_text_atomic(path, text)
