"""The edges of task inference: non-finite numbers, multi-label rows without labels, a
multi-label file with one label per row, and `bertfit check` judging the task train would."""

from __future__ import annotations

import pytest

import bertfit
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data.sources import SourceSpec, parse_examples
from bertfit.data.tasks import MULTI_LABEL, REGRESSION, WARNING_NOTE, infer_task
from bertfit.errors import DataError
from tests.tiny import scored_rows, sentiment_rows, tagged_rows, write_csv, write_jsonl

TRAIN = SourceSpec(empty_labels=True)  # how a run reads its files (`run_files.source_spec`)


def rows(text: str, fmt: str = "csv"):
    return parse_examples(text.encode(), "train." + fmt, fmt, TRAIN)


@pytest.mark.parametrize("bad", ["nan", "inf", "-Infinity", "NaN"])
def test_a_non_finite_target_is_refused_at_its_line_not_read_as_a_class(bad):
    examples = rows(f"text,label\na,0.5\nb,1.25\nc,{bad}\nd,3\n")
    with pytest.raises(DataError, match=r"train.csv:4: the regression target .* finite") as e:
        infer_task(examples, "train.csv")
    assert e.value.code == "data-target-not-number"


def test_integers_with_a_nan_are_not_classes_either():
    with pytest.raises(DataError, match="train.csv:3"):
        infer_task(rows("text,label\na,1\nb,nan\nc,2\n"), "train.csv")


def test_an_empty_cell_is_the_empty_set_in_multi_label_data():
    examples = rows("text,label\na,pos|fun\nb,\nc,neg\n")
    task, _ = infer_task(examples, "train.csv", kind=MULTI_LABEL)
    assert task.labels == ("fun", "neg", "pos")
    assert task.targets(examples, "train.csv").tolist()[1] == [0.0, 0.0, 0.0]

    lists = rows(
        '{"text": "a", "label": ["pos", "fun"]}\n{"text": "b", "label": null}\n'
        '{"text": "c", "label": []}\n{"text": "d", "label": ["neg"]}\n',
        "jsonl",
    )
    task, _ = infer_task(lists, "train.jsonl")
    assert task.kind == MULTI_LABEL
    assert task.targets(lists, "train.jsonl").sum(axis=1).tolist() == [2, 0, 0, 1]


def test_an_empty_label_is_still_refused_for_single_label_and_regression():
    with pytest.raises(DataError, match=r"train.csv:3: the row has no label") as e:
        infer_task(rows("text,label\na,pos\nb,\nc,neg\n"), "train.csv")
    assert e.value.code == "data-empty-label"
    with pytest.raises(DataError, match="train.csv:3"):
        infer_task(rows("text,label\na,0.5\nb, \nc,1.5\n"), "train.csv", kind=REGRESSION)


def test_multi_label_data_with_one_label_on_every_row_is_warned_about():
    examples = rows("text,label\na,pos\nb,neg\nc,pos\n")
    _, notes = infer_task(examples, "train.csv", kind=MULTI_LABEL)
    assert any(n.startswith(WARNING_NOTE) and "effectively single-label" in n for n in notes)
    _, notes = infer_task(rows("text,label\na,pos|fun\nb,neg\n"), "train.csv", kind=MULTI_LABEL)
    assert not any(n.startswith(WARNING_NOTE) for n in notes)


def test_a_multi_label_label_on_every_row_is_refused_as_a_constant_target():
    examples = rows("text,label\na,news|pos\nb,news\nc,neg|news\n")
    with pytest.raises(
        DataError, match=r"^train.csv: every row has the label 'news': .*Remove"
    ) as e:
        infer_task(examples, "train.csv", kind=MULTI_LABEL)
    assert e.value.code == "data-label-on-every-row"
    with pytest.raises(DataError, match="every row has the labels 'a', 'b'"):
        infer_task(rows("text,label\nx,a|b\ny,b|a|c\n"), "train.csv", separator="|")
    task, _ = infer_task(
        rows("text,label\na,news|pos\nb,\nc,neg|news\n"), "t.csv", kind=MULTI_LABEL
    )
    assert task.labels == ("neg", "news", "pos")  # one row without it: a label to learn


def _config(model, train) -> RunConfig:
    return RunConfig(
        model=ModelConfig(name=str(model), max_seq_length=32),
        data=DataConfig(train=str(train), buckets=[16, 32]),
        train=TrainConfig(batch_size=8),
    )


def test_check_judges_regression_and_multi_label_files_as_train_does(tmp_path, trainable_hf_dir):
    scored = write_csv(tmp_path / "scored.csv", scored_rows(32))
    tagged = write_jsonl(tmp_path / "tagged.jsonl", tagged_rows(32))
    for train in (scored, tagged):
        report = bertfit.check(_config(trainable_hf_dir, train), compile=False)
        assert "dtype-float-labels" not in report.codes, report.render()
        assert report.exit_code(strict=False) == 0, report.render()


@pytest.mark.slow  # two checks on the tiny model: ~3 s
def test_check_says_whole_floats_train_a_regression_and_refuses_a_constant_label(
    tmp_path, trainable_hf_dir
):
    # whole-number floats (pandas' style): check says it trains a regression, and why
    prices = [(text, f"{100000.0 + 2500 * round(score)}") for text, score in scored_rows(32)]
    report = bertfit.check(
        _config(trainable_hf_dir, write_csv(tmp_path / "p.csv", prices)), compile=False
    )
    assert report.stats["task"] == REGRESSION and "data-task-inferred" in report.codes
    assert "not all written as integers" in report.render(), report.render()
    # a label on every row: the error train stops on
    constant = [(text, ["always", *labels]) for text, labels in tagged_rows(16)]
    train = write_jsonl(tmp_path / "constant.jsonl", constant)
    report = bertfit.check(_config(trainable_hf_dir, train), compile=False)
    assert "data-label-on-every-row" in report.codes and report.exit_code(strict=False) == 2


def test_check_on_integer_labels_with_a_5000_digit_one_reports_instead_of_crashing(
    tmp_path, trainable_hf_dir
):
    rows_ = [(text, str(i % 2)) for i, (text, _) in enumerate(sentiment_rows(16))]
    rows_.append(("fine", "9" * 5000))
    train = write_csv(tmp_path / "ints.csv", rows_)
    report = bertfit.check(_config(trainable_hf_dir, train), compile=False)
    assert "data-label-out-of-range" in report.codes
    assert "9" * 100 not in report.render()
