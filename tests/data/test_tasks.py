"""The task a label column asks for, decided once for `train` and `check`, with clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfit.data.sources import Example
from bertfit.data.tasks import MULTI_LABEL, REGRESSION, SINGLE_LABEL, Task, infer_task
from bertfit.errors import DataError


def examples(*labels) -> list[Example]:
    return [Example(f"text {i}", None, label, i + 2) for i, label in enumerate(labels)]


def infer(*labels, **options) -> Task:
    return infer_task(examples(*labels), "train.csv", **options)[0]


def test_integer_labels_sort_numerically_and_words_alphabetically():
    assert infer("10", "2", "-1", "2", "0").labels == ("-1", "0", "2", "10")
    assert infer("pos", "neg", "neutral").labels == ("neg", "neutral", "pos")


def test_labels_are_stripped_and_nfc_normalised_into_one_class():
    task = infer(" pos", "pos ", "neg", "\u00e9", "e\u0301")
    assert task.labels == ("neg", "pos", "\u00e9")
    assert task.targets(examples("e\u0301", " pos"), "t.csv").tolist() == [2, 1]


def test_integers_mixed_with_words_are_an_error_unless_asked_for():
    with pytest.raises(DataError, match=r"mixes integers \['0', '1'\] and names \['pos'\]") as e:
        infer("0", "1", "1", "0", "pos")
    assert e.value.code == "data-mixed-types"
    assert infer("0", "1", "pos", kind=SINGLE_LABEL).labels == ("0", "1", "pos")


@pytest.mark.parametrize("a, b, kind", [("01", "1", None), ("3", "3.0", SINGLE_LABEL)])
def test_one_number_spelled_two_ways_names_both_spellings(a, b, kind):
    with pytest.raises(
        DataError, match=f"'{a}' \\(line 2\\) and '{b}' \\(line 3\\) spell the same number"
    ):
        infer(a, b, "2", kind=kind)


def test_a_joined_label_is_not_silently_a_class_of_its_own():
    with pytest.raises(
        DataError, match="looks like several labels joined by '\\|'.*--task multi-label"
    ) as e:
        infer("pos|fun", "neg", "pos")
    assert e.value.code == "data-label-looks-multi"
    task, notes = infer_task(examples("pos|fun", "neg", "pos"), "t.csv", separator="|")
    assert (task.kind, task.labels) == (MULTI_LABEL, ("fun", "neg", "pos")) and notes
    assert infer("pos|fun", "neg", kind=MULTI_LABEL).labels == ("fun", "neg", "pos")


def test_lists_are_multi_label_rows_and_scalars_one_label_sets():
    task = infer(("pos", "fun"), "neg", (), ("fun",))
    assert task.kind == MULTI_LABEL
    targets = task.targets(examples(("pos", "fun"), "neg", ()), "t.csv")
    assert targets.dtype == np.float32 and targets.tolist() == [[1, 0, 1], [0, 1, 0], [0, 0, 0]]


def test_numbers_that_are_not_all_integers_train_a_regression_with_a_note():
    task, notes = infer_task(examples("0.5", "2", "3.5"), "t.csv")
    assert task.kind == REGRESSION and "regression" in notes[0]
    assert task.mean == pytest.approx(2.0)
    targets = task.targets(examples("0.5", "3.5"), "t.csv")
    np.testing.assert_allclose(task.values(targets), [0.5, 3.5], rtol=1e-6)
    assert infer("1", "2", "3").kind == SINGLE_LABEL  # integers stay classes


@pytest.mark.parametrize(
    "labels",
    [
        ("100000.0", "102500.0", "98000.0"),  # pandas' float column
        ("1.0250e+05", "1.0e+05", "9.8e4"),  # exponents, whole numbers
        ("3", "3.0", "4", "7"),  # a float spelling among integers
    ],
)
def test_whole_numbers_written_as_floats_are_regression_targets_not_classes(labels):
    task, notes = infer_task(examples(*labels), "prices.csv")
    assert task.kind == REGRESSION, task
    assert "regression" in notes[0] and "line" in notes[0]
    assert task.mean == pytest.approx(np.mean([float(x) for x in labels]))


def test_two_whole_values_written_as_floats_ask_for_the_task():
    with pytest.raises(
        DataError,
        match=r"^flags.csv: the labels are two whole numbers written as floats "
        r"\('0.0' \(line 2\), '1.0' \(line 3\)\).*--task single-label.*--task regression",
    ) as e:
        infer_task(examples("0.0", "1.0", "1.0", "0.0"), "flags.csv")
    assert e.value.code == "data-task-ambiguous"
    assert infer("0.0", "1.0", kind=SINGLE_LABEL).labels == ("0.0", "1.0")
    assert infer("0.0", "1.0", "1.0", kind=REGRESSION).mean == pytest.approx(2 / 3)


def test_regression_targets_must_be_finite_numbers_and_not_constant():
    with pytest.raises(DataError, match=r"^t.csv:3: the regression target 'nan'") as e:
        infer_task(examples("1.5", "nan"), "t.csv", kind=REGRESSION)
    assert e.value.code == "data-target-not-number"
    with pytest.raises(DataError, match="constant target"):
        infer("2.5", "2.5", kind=REGRESSION)


def test_a_single_class_or_no_label_cannot_train():
    with pytest.raises(DataError, match=r"'pos' \(first on line 2\).*at least two classes"):
        infer("pos", "pos")
    with pytest.raises(DataError, match="no labelled rows"):
        infer()
    with pytest.raises(DataError, match=r"^train.csv:3: the row has no label"):
        infer("pos", None)


def test_unseen_labels_name_file_line_and_known_labels():
    task = Task(SINGLE_LABEL, ("neg", "pos"))
    with pytest.raises(
        DataError,
        match=r"^eval.csv:3: label 'neutral' was not seen in the "
        r"training file; known labels: 'neg', 'pos'",
    ):
        task.targets(examples("pos", "neutral"), "eval.csv")
    with pytest.raises(DataError, match=r"^eval.parquet: row 2: label 'x' was not seen"):
        Task(MULTI_LABEL, ("a", "b")).targets(examples(("x",)), "eval.parquet")


def test_save_and_load_round_trip_and_the_old_format(tmp_path):
    task = Task(MULTI_LABEL, ("négatif", "positif"), threshold=0.35)
    task.save(tmp_path / "labels.json")
    assert Task.load(tmp_path / "labels.json") == task
    (tmp_path / "old.json").write_text(json.dumps({"labels": ["neg", "pos"]}))
    assert Task.load(tmp_path / "old.json") == Task(SINGLE_LABEL, ("neg", "pos"))


@pytest.mark.parametrize(
    "content",
    [
        "{",
        '{"labels": ["only"]}',
        '["a", "b"]',
        '{"labels": [1, 2]}',
        '{"task": "x", "labels": ["a", "b"]}',
    ],
)
def test_load_rejects_a_damaged_file(tmp_path, content):
    path = tmp_path / "labels.json"
    path.write_text(content)
    with pytest.raises(DataError, match=f"^{path}: "):
        Task.load(path)
