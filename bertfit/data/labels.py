"""The label map: raw label strings from the training file ↔ the class ids the model predicts.

Ids follow the sorted labels: numerically when every label is an integer ("2" < "10"), else as
strings. The map is saved as `labels.json` in the run directory (`{"labels": [...]}`, id order),
and evaluation or prediction files are encoded with the training file's map.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bertfit.atomic import write_text_atomic
from bertfit.data.sources import Example, example_error
from bertfit.errors import DataError

INTEGER_LABEL = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class LabelMap:
    """Label names by class id.

    Args:
        labels: the label names; `labels[i]` is the name of class id `i`.

    Examples:
    >>> rows = [Example("good", None, "10", 2), Example("bad", None, "2", 3)]
    >>> label_map = LabelMap.from_examples(rows, "train.csv")
    >>> label_map.labels, label_map.encode(rows[0], "train.csv"), len(label_map)
    (('2', '10'), 1, 2)
    """

    labels: tuple[str, ...]
    _ids: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", tuple(self.labels))
        object.__setattr__(self, "_ids", {label: i for i, label in enumerate(self.labels)})
        if len(self._ids) != len(self.labels):
            raise ValueError(f"duplicate labels in {self.labels!r}")

    @classmethod
    def from_examples(cls, examples: Iterable[Example], path: str | os.PathLike) -> LabelMap:
        """The map of every label in the training examples, sorted.

        Args:
            examples: the training examples (read with labels required).
            path: the training file, for messages.

        Raises:
            DataError: an example has no label, or there are fewer than two distinct labels.

        Examples:
        >>> rows = [Example("a", None, "pos", 2), Example("b", None, "neg", 3)]
        >>> LabelMap.from_examples(rows, "train.csv").labels
        ('neg', 'pos')
        """
        seen: dict[str, int] = {}
        for example in examples:
            if example.label is None:
                raise example_error("the row has no label; training needs one", path, example.line)
            seen.setdefault(example.label, example.line)
        if len(seen) < 2:
            raise DataError(_too_few_message(seen), path=os.fspath(path))
        return cls(tuple(sorted_labels(seen)))

    def encode(self, example: Example, path: str | os.PathLike) -> int:
        """The class id of one example's label.

        Args:
            example: a labelled example.
            path: its file, for messages.

        Raises:
            DataError: the label is missing or was not in the training file.

        Examples:
        >>> LabelMap(("neg", "pos")).encode(Example("fine", None, "pos", 2), "eval.csv")
        1
        """
        label_id = self._ids.get(example.label)
        if label_id is None:
            raise self._unknown(example, path)
        return label_id

    def encode_all(self, examples: Iterable[Example], path: str | os.PathLike) -> np.ndarray:
        """The class ids of all examples, as an int32 array in example order.

        Args:
            examples: labelled examples.
            path: their file, for messages.

        Examples:
        >>> rows = [Example("a", None, "pos", 2), Example("b", None, "neg", 3)]
        >>> LabelMap(("neg", "pos")).encode_all(rows, "eval.csv").tolist()
        [1, 0]
        """
        examples = list(examples)
        get = self._ids.get
        ids = [get(example.label, -1) for example in examples]
        if -1 in ids:
            raise self._unknown(examples[ids.index(-1)], path)
        return np.asarray(ids, dtype=np.int32)

    def save(self, file: str | os.PathLike) -> None:
        """Writes `{"labels": [...]}` (UTF-8 JSON, id order) to `file`.

        Examples:
        >>> LabelMap(("neg", "pos")).save("labels.json")
        >>> LabelMap.load("labels.json").labels
        ('neg', 'pos')
        """
        text = json.dumps({"labels": list(self.labels)}, indent=2, ensure_ascii=False)
        write_text_atomic(file, text + "\n")

    @classmethod
    def load(cls, file: str | os.PathLike) -> LabelMap:
        """Reads a map written by `save`.

        Args:
            file: a `labels.json`.

        Raises:
            DataError: the file is missing or is not `{"labels": [two or more distinct strings]}`.
        """
        name = os.fspath(file)
        try:
            data = json.loads(Path(file).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError("label map not found", path=name) from None
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read the label map: {e}", path=name) from None
        labels = data.get("labels") if isinstance(data, dict) else None
        if not _valid_labels(labels):
            raise DataError(
                'expected {"labels": [...]} with two or more distinct strings, as written by '
                "bertfit train; the run directory may be damaged",
                path=name,
            )
        return cls(tuple(labels))

    def __len__(self) -> int:
        return len(self.labels)

    def _unknown(self, example: Example, path: str | os.PathLike) -> DataError:
        known = ", ".join(repr(label) for label in self.labels)
        if example.label is None:
            message = f"the row has no label; known labels: {known}"
        else:
            message = (
                f"label {example.label!r} was not seen in the training file; known labels: "
                f"{known}. Fix the label, or retrain with a training file that has it"
            )
        return example_error(message, path, example.line)


def sorted_labels(labels: Iterable[str]) -> list[str]:
    """Class-id order: numeric when every label is an integer (ties such as "01"/"1" by text),
    else text."""
    labels = list(labels)
    if all(INTEGER_LABEL.fullmatch(label) for label in labels):
        return sorted(labels, key=lambda label: (int(label), label))
    return sorted(labels)


def _too_few_message(seen: dict[str, int]) -> str:
    if not seen:
        return "no labelled rows; a classifier needs rows of at least two classes"
    ((label, line),) = seen.items()
    return (
        f"every row has the label {label!r} (first on line {line}); a classifier needs at least "
        "two classes. Check --label-column, or add rows of the other classes"
    )


def _valid_labels(labels: object) -> bool:
    return (
        isinstance(labels, list)
        and len(labels) >= 2
        and all(isinstance(label, str) for label in labels)
        and len(set(labels)) == len(labels)
    )
