"""The task a label column asks for, and the targets the model learns: one code path decides.

- single-label: one class per row ("pos", 3, true); ids follow `sorted_labels`.
- multi-label: a set of classes per row: a JSON list (`["pos", "fun"]`), or a text column split
  on a separator (`pos|fun`, with `--label-separator`); targets are multi-hot rows.
- regression: one number per row; targets are standardised with the training mean and standard
  deviation, which `Task` keeps so predictions come back in the original units.

`infer_task` reads the training labels once: JSON lists (or a separator) mean multi-label, numbers
that are not all written as integers mean regression (with a note), anything else single-label.
A number written as a float is a numeric target even when it is whole (`100000.0`, `1.0250e+05`:
how pandas writes a float column), never a class per value; but a column of only two whole values
written as floats (`0.0`/`1.0`: a binary label that passed through a float column, or a 0/1
target) is refused as ambiguous, the message asking for `--task`. A column of
numbers holding NaN or infinity is a regression file with a bad target, refused at its line,
never a classifier with "nan" as a class. A row without a label (an empty cell, read as None) is
the empty set in a multi-label file and an error in any other. A column
that mixes styles (integers and words), spells one number two ways ("01" and "1", "3" and
"3.0" as classes), or looks multi-label without saying so is a `DataError`, in `bertfit train`
and `bertfit check` alike; so is a multi-label file with a label on every row (its target is
constant, as a constant regression target or a one-class file, which are refused too: it teaches
nothing and its perfect score inflates macro-F1). Labels are NFC-normalised and stripped first.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bertfit.atomic import write_text_atomic
from bertfit.config import MULTI_LABEL, REGRESSION, SINGLE_LABEL, TASKS
from bertfit.data.labels import INTEGER_LABEL, sorted_labels
from bertfit.data.sources import Example, example_error
from bertfit.errors import DataError

DEFAULT_SEPARATOR = "|"
DEFAULT_THRESHOLD = 0.5
LABEL_MAP_INVALID = "data-label-map-invalid"  # labels.json of a run (`DataError.code`)
WARNING_NOTE = "warning: "  # a note of `infer_task` that is a warning


def normalize_label(label: str) -> str:
    """NFC, surrounding whitespace removed: "é" typed two ways is one class.

    Examples:
    >>> normalize_label(" e\\u0301 ") == "\\u00e9"
    True
    """
    return unicodedata.normalize("NFC", label).strip()


def parse_number(label: str) -> float | None:
    """The finite number a label spells ("3", "-0.5", "1e3"), or None."""
    try:
        value = float(label)
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


@dataclasses.dataclass(frozen=True)
class Task:
    """What the model predicts and how labels become targets.

    Args:
        kind: "single-label", "multi-label" or "regression".
        labels: class names in output order (empty for regression).
        separator: splits a text label into a set (multi-label).
        threshold: probability at or above which a label is predicted (multi-label).
        mean, std: the training targets' mean and standard deviation (regression).

    Examples:
    >>> task = Task(MULTI_LABEL, ("fun", "pos"))
    >>> task.targets([Example("a", None, "pos|fun", 2)], "train.csv").tolist()
    [[1.0, 1.0]]
    """

    kind: str
    labels: tuple[str, ...] = ()
    separator: str = DEFAULT_SEPARATOR
    threshold: float = DEFAULT_THRESHOLD
    mean: float = 0.0
    std: float = 1.0

    @property
    def num_outputs(self) -> int:
        return 1 if self.kind == REGRESSION else len(self.labels)

    def label_set(self, label) -> list[str]:
        """The classes of one multi-label row (None, an empty cell: none)."""
        if label is None:
            return []
        items = label if isinstance(label, tuple) else label.split(self.separator)
        return [n for n in (normalize_label(item) for item in items) if n]

    def targets(self, examples: Sequence[Example], path: str | os.PathLike) -> np.ndarray:
        """int32 [n] class ids, float32 [n, labels] multi-hot rows, or float32 [n]
        standardised values; a label the training data did not have is a `DataError`."""
        if self.kind == REGRESSION:
            values = [_number(e, path) for e in examples]
            return ((np.asarray(values, np.float64) - self.mean) / self.std).astype(np.float32)
        ids = {label: i for i, label in enumerate(self.labels)}
        if self.kind == SINGLE_LABEL:
            out = np.empty(len(examples), np.int32)
            for i, e in enumerate(examples):
                out[i] = self._id(ids, _single(e, path), e, path)
            return out
        out = np.zeros((len(examples), len(self.labels)), np.float32)
        for i, e in enumerate(examples):
            for label in self.label_set(e.label):
                out[i, self._id(ids, label, e, path)] = 1.0
        return out

    def _id(self, ids: dict, label: str, example: Example, path) -> int:
        found = ids.get(label)
        if found is None:
            known = ", ".join(repr(k) for k in self.labels)
            raise example_error(
                f"label {label!r} was not seen in the training file; known "
                f"labels: {known}. Fix the label, or retrain with a training "
                "file that has it",
                path,
                example.line,
                code="data-label-unseen",
            )
        return found

    def values(self, standardized: np.ndarray) -> np.ndarray:
        """Regression outputs back in the training targets' units."""
        return np.asarray(standardized, np.float64) * self.std + self.mean

    def to_dict(self) -> dict:
        values = {"task": self.kind, "labels": list(self.labels)}
        if self.kind == MULTI_LABEL:
            values.update(separator=self.separator, threshold=self.threshold)
        if self.kind == REGRESSION:
            values.update(mean=self.mean, std=self.std)
        return values

    def save(self, file: str | os.PathLike) -> None:
        """Writes labels.json: the task, the label names and what the task needs."""
        write_text_atomic(file, json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def from_dict(cls, values: dict, where: str = "labels.json") -> Task:
        kind = values.get("task", SINGLE_LABEL)
        labels = values.get("labels", [])
        if (
            kind not in TASKS
            or not isinstance(labels, list)
            or not all(isinstance(x, str) for x in labels)
            or len(set(labels)) != len(labels)
            or (kind != REGRESSION and len(labels) < (2 if kind == SINGLE_LABEL else 1))
        ):
            raise DataError(
                'expected {"task": ..., "labels": [distinct strings]}, as written by '
                "bertfit train; the run directory may be damaged",
                path=where,
                code=LABEL_MAP_INVALID,
            )
        fields = {f.name for f in dataclasses.fields(cls)} - {"kind", "labels"}
        return cls(kind, tuple(labels), **{k: v for k, v in values.items() if k in fields})

    @classmethod
    def load(cls, file: str | os.PathLike) -> Task:
        name = os.fspath(file)
        try:
            values = json.loads(Path(file).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError("label map not found", path=name, code="data-file-not-found") from None
        except (OSError, ValueError) as e:
            raise DataError(
                f"cannot read the label map: {e}", path=name, code=LABEL_MAP_INVALID
            ) from None
        if not isinstance(values, dict):
            raise DataError("expected a JSON object", path=name, code=LABEL_MAP_INVALID)
        return cls.from_dict(values, name)


def infer_task(
    examples: Sequence[Example],
    path: str | os.PathLike,
    *,
    kind: str | None = None,
    separator: str | None = None,
) -> tuple[Task, list[str]]:
    """The task of a training file and notes for the user (e.g. "read as regression").

    Args:
        examples: the training rows (labels required).
        path: the training file, for messages.
        kind: the task asked for (`--task`), or None to infer it.
        separator: the multi-label separator (`--label-separator`), or None.

    Raises:
        DataError: mixed label styles, one number spelled two ways, too few classes, a
            regression target that is not a number, labels that look multi-label unasked.
    """
    asked = kind
    kind = asked or _inferred_kind(examples, path, separator)
    notes = (
        [_inferred_note(kind, examples, separator)]
        if asked is None and kind != SINGLE_LABEL
        else []
    )
    if kind == REGRESSION:
        return _regression(examples, path), notes
    if kind == MULTI_LABEL:
        task = _multi_label(examples, path, separator or DEFAULT_SEPARATOR)
        single = _one_label_per_row(task, examples)
        return task, notes + ([single] if single else [])
    return _single_label(examples, path, explicit=asked == SINGLE_LABEL), notes


def _inferred_kind(examples: Sequence[Example], path, separator: str | None) -> str:
    if separator is not None or any(isinstance(e.label, tuple) for e in examples):
        return MULTI_LABEL
    labels = [normalize_label(e.label) for e in examples if e.label is not None]
    numbers = [_any_float(label) for label in labels]
    if not labels or any(n is None for n in numbers):
        return SINGLE_LABEL
    integers = [bool(INTEGER_LABEL.fullmatch(label)) for label in labels]
    if all(integers):
        return SINGLE_LABEL
    if any(not math.isfinite(n) for n, i in zip(numbers, integers, strict=True) if not i):
        return REGRESSION  # NaN or infinity among numbers: a bad target, said at its line
    if all(n.is_integer() for n in numbers) and len(set(numbers)) <= 2:
        _refuse_two_whole_floats(examples, path)
    return REGRESSION


def _refuse_two_whole_floats(examples: Sequence[Example], path) -> None:
    """Two whole values written as floats ("0.0", "1.0"): two classes or a 0/1 target."""
    first_line: dict[str, int] = {}
    for e in examples:
        first_line.setdefault(normalize_label(e.label), e.line)
    shown = ", ".join(f"{label!r} (line {line})" for label, line in list(first_line.items())[:4])
    raise DataError(
        f"the labels are two whole numbers written as floats ({shown}): they could be two "
        "classes or a numeric target. Pass --task single-label to train a classifier, or "
        "--task regression to predict the number",
        path=os.fspath(path),
        code="data-task-ambiguous",
    )


def _any_float(label: str) -> float | None:
    """The number a label spells, NaN and infinity included (finite or not), or None."""
    try:
        return float(label)
    except (ValueError, OverflowError):
        return None


def _one_label_per_row(task: Task, examples: Sequence[Example]) -> str | None:
    """A warning when every row of a multi-label file has exactly one label."""
    if len(task.labels) < 2 or any(len(task.label_set(e.label)) != 1 for e in examples):
        return None
    return (
        f"{WARNING_NOTE}every row has exactly one label, so this multi-label task is "
        "effectively single-label: a single-label model (softmax) usually learns it better. "
        "Pass --task single-label, or check --label-separator"
    )


def _inferred_note(kind: str, examples: Sequence[Example], separator: str | None) -> str:
    if kind == REGRESSION:
        decimal = next(e for e in examples if not INTEGER_LABEL.fullmatch(normalize_label(e.label)))
        return (
            f"the labels are numbers, not all written as integers ({decimal.label!r} on line "
            f"{decimal.line}): training a regression model (one output, mean squared error). "
            "Pass --task single-label to treat them as classes."
        )
    how = f"split on {separator!r}" if separator else "JSON lists"
    return f"the labels are sets of classes ({how}): training a multi-label model."


def _single(example: Example, path) -> str:
    label = _present(example, path)
    if isinstance(label, tuple):
        raise example_error(
            f"the label is a list {list(label)}; a single-label task needs one "
            "label per row (pass --task multi-label for sets)",
            path,
            example.line,
            code="data-mixed-types",
        )
    return normalize_label(label)


def _present(example: Example, path):
    if example.label is None:
        raise example_error(
            "the row has no label (the cell is empty); training needs one on every row, except "
            "in a multi-label file, where an empty cell is the empty set (pass --task "
            "multi-label if this is one). Fill it in or delete the row",
            path,
            example.line,
            code="data-empty-label",
        )
    return example.label


def _number(example: Example, path) -> float:
    label = _present(example, path)
    value = None if isinstance(label, tuple) else parse_number(normalize_label(label))
    if value is None:
        raise example_error(
            f"the regression target {label!r} is not a finite number; write a "
            "number such as 3.5 (NaN and infinity are not targets)",
            path,
            example.line,
            code="data-target-not-number",
        )
    return value


def _single_label(examples: Sequence[Example], path, explicit: bool) -> Task:
    first_line: dict[str, int] = {}
    for e in examples:
        first_line.setdefault(_single(e, path), e.line)
    _check_number_spellings(first_line, path)
    if not explicit:
        _check_styles(first_line, path)
    if len(first_line) < 2:
        raise DataError(
            _too_few_message(first_line), path=os.fspath(path), code="data-single-class"
        )
    return Task(SINGLE_LABEL, tuple(sorted_labels(first_line)))


def _multi_label(examples: Sequence[Example], path, separator: str) -> Task:
    task = Task(MULTI_LABEL, (), separator)
    first_line: dict[str, int] = {}
    for e in examples:
        for label in task.label_set(e.label):
            first_line.setdefault(label, e.line)
    _check_number_spellings(first_line, path)
    if not first_line:
        raise DataError(
            "no row has a label; a multi-label model needs at least one class",
            path=os.fspath(path),
            code="data-single-class",
        )
    task = dataclasses.replace(task, labels=tuple(sorted_labels(first_line)))
    _check_no_label_on_every_row(task, examples, path)
    return task


def _check_no_label_on_every_row(task: Task, examples: Sequence[Example], path) -> None:
    """A label every row has is a constant target: refused, as a constant regression target."""
    every = set(task.labels)
    for e in examples:
        every &= set(task.label_set(e.label))
        if not every:
            return
    shown = ", ".join(repr(label) for label in sorted_labels(every))
    raise DataError(
        f"every row has the label{'s' if len(every) > 1 else ''} {shown}: a label on every row "
        "is a constant target the model cannot learn anything from, and its perfect score "
        "would inflate the macro averages. Remove it from the rows (or add rows without it); "
        "check --label-column and --label-separator",
        path=os.fspath(path),
        code="data-label-on-every-row",
    )


def _regression(examples: Sequence[Example], path) -> Task:
    values = np.asarray([_number(e, path) for e in examples], np.float64)
    with np.errstate(over="ignore"):
        std = float(values.std())
    if not math.isfinite(std):
        raise DataError(
            "the regression targets are too large to standardise (their spread "
            "overflows a 64-bit float); rescale them",
            path=os.fspath(path),
            code="data-target-not-number",
        )
    if not len(values) or std == 0.0:
        raise DataError(
            f"every regression target is {values[0] if len(values) else 'missing'};"
            " a model cannot learn from a constant target",
            path=os.fspath(path),
            code="data-label-invalid",
        )
    return Task(REGRESSION, (), mean=float(values.mean()), std=std)


def _check_number_spellings(first_line: dict[str, int], path) -> None:
    """ "01" and "1" (or "3" and "3.0") name one number: two classes would print the same."""
    by_value: dict[float, str] = {}
    for label in first_line:
        value = parse_number(label)
        if value is None:
            continue
        other = by_value.setdefault(value, label)
        if other != label:
            raise DataError(
                f"the labels {other!r} (line {first_line[other]}) and {label!r} (line "
                f"{first_line[label]}) spell the same number; they would become two classes. "
                "Write every label of a class the same way",
                path=os.fspath(path),
                code="data-label-spellings",
            )


def _check_styles(first_line: dict[str, int], path) -> None:
    integers = [label for label in first_line if INTEGER_LABEL.fullmatch(label)]
    words = [label for label in first_line if not INTEGER_LABEL.fullmatch(label)]
    where = os.fspath(path)
    if integers and words:
        lines = ", ".join(f"line {first_line[w]}" for w in words[:3])
        raise DataError(
            f"the label column mixes integers {integers[:5]} and names {words[:5]} ({lines}); "
            "this is usually a data error. Use one kind of label throughout, or pass --task "
            "single-label to keep them all as classes",
            path=where,
            code="data-mixed-types",
        )
    separated = [label for label in words if DEFAULT_SEPARATOR in label]
    if separated:
        label = separated[0]
        raise DataError(
            f"the label {label!r} (line {first_line[label]}) looks like several labels joined "
            f"by {DEFAULT_SEPARATOR!r}. Pass --task multi-label for sets of labels, or --task "
            "single-label if the separator is part of the class names",
            path=where,
            code="data-label-looks-multi",
        )


def _too_few_message(seen: dict[str, int]) -> str:
    if not seen:
        return "no labelled rows; a classifier needs rows of at least two classes"
    ((label, line),) = seen.items()
    shown = label if len(label) <= 60 else f"{label[:28]}...{label[-28:]}"
    return (
        f"every row has the label {shown!r} (first on line {line}); a classifier needs at "
        "least two classes. Check --label-column, or add rows of the other classes"
    )


def label_counts(task: Task, targets: np.ndarray) -> dict[str, int]:
    """Rows per class (single-label) or per label (multi-label)."""
    if task.kind == SINGLE_LABEL:
        counts = np.bincount(targets, minlength=len(task.labels))
    else:
        counts = targets.sum(axis=0).astype(int)
    return dict(zip(task.labels, counts.tolist(), strict=True))
