"""LabelMap: a stable id per label, sorted the way a person expects, with clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfit.data.labels import LabelMap
from bertfit.data.sources import Example
from bertfit.errors import DataError


def examples(*labels: str | None) -> list[Example]:
    return [Example(f"text {i}", None, label, i + 2) for i, label in enumerate(labels)]


def test_integer_labels_sort_numerically():
    label_map = LabelMap.from_examples(examples("10", "2", "-1", "2", "0"), "train.csv")
    assert label_map.labels == ("-1", "0", "2", "10")
    assert len(label_map) == 4


def test_other_labels_sort_as_strings():
    assert LabelMap.from_examples(examples("pos", "neg", "10", "2"), "t.csv").labels == (
        "10", "2", "neg", "pos"
    )  # fmt: skip


def test_labels_with_whitespace_are_kept_as_written():
    label_map = LabelMap.from_examples(examples("very good", "pos", " pos", "very good"), "t.csv")
    assert label_map.labels == (" pos", "pos", "very good")
    assert label_map.encode(Example("x", None, "very good", 9), "t.csv") == 2


def test_encode_all_gives_int32_ids_in_example_order():
    label_map = LabelMap(("neg", "pos"))
    ids = label_map.encode_all(examples("pos", "neg", "pos"), "eval.csv")
    assert ids.dtype == np.int32
    assert ids.tolist() == [1, 0, 1]


def test_a_single_class_is_named():
    with pytest.raises(DataError) as caught:
        LabelMap.from_examples(examples("pos", "pos"), "train.csv")
    message = str(caught.value)
    assert message.startswith("train.csv: ")
    assert "'pos' (first on line 2)" in message and "at least two classes" in message


def test_no_examples():
    with pytest.raises(DataError, match="no labelled rows"):
        LabelMap.from_examples([], "train.csv")


def test_an_example_without_a_label_cannot_train():
    with pytest.raises(DataError, match=r"^train.csv:3: the row has no label"):
        LabelMap.from_examples(examples("pos", None), "train.csv")


def test_unseen_label_names_file_line_and_known_labels():
    label_map = LabelMap(("neg", "pos"))
    with pytest.raises(DataError) as caught:
        label_map.encode_all(examples("pos", "neutral"), "eval.csv")
    assert str(caught.value).startswith(
        "eval.csv:3: label 'neutral' was not seen in the training file; known labels: 'neg', 'pos'"
    )
    with pytest.raises(DataError, match=r"^eval.csv:2: label ' pos' was not seen"):
        label_map.encode(Example("x", None, " pos", 2), "eval.csv")


def test_parquet_examples_are_named_by_row():
    with pytest.raises(DataError, match=r"^eval.parquet: row 4: label 'x' was not seen"):
        LabelMap(("a", "b")).encode(Example("t", None, "x", 4), "eval.parquet")


def test_save_and_load_round_trip(tmp_path):
    label_map = LabelMap(("négatif", "positif", "10"))
    label_map.save(tmp_path / "labels.json")
    assert json.loads((tmp_path / "labels.json").read_text("utf-8")) == {
        "labels": ["négatif", "positif", "10"]
    }
    assert LabelMap.load(tmp_path / "labels.json") == label_map


@pytest.mark.parametrize(
    "content", ["{", '{"labels": ["only"]}', '["a", "b"]', '{"labels": [1, 2]}']
)
def test_load_rejects_a_damaged_file(tmp_path, content):
    path = tmp_path / "labels.json"
    path.write_text(content)
    with pytest.raises(DataError, match=f"^{path}: "):
        LabelMap.load(path)


def test_load_missing_file(tmp_path):
    with pytest.raises(DataError, match="label map not found"):
        LabelMap.load(tmp_path / "labels.json")
