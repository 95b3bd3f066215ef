"""The command line: real runs, and user mistakes that end in one clear message (exit 2)."""

import csv
import dataclasses
import json

import pytest

from bertfit.cli import main
from tests.tiny import sentiment_rows, train_args, write_csv


def _error(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_evaluate_json_has_the_documented_keys(trained_run, capsys):
    config, result = trained_run
    assert main(["evaluate", "--run", result.run_dir, "--data", config.data.eval, "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert {"accuracy", "macro_f1", "loss", "num_examples"} <= set(metrics)
    assert metrics["num_examples"] == 37


def test_predict_writes_one_csv_row_per_input_row_in_order(trained_run, tmp_path):
    _, result = trained_run
    rows = sentiment_rows(13, seed=9)
    data = write_csv(tmp_path / "in.csv", rows)
    out = tmp_path / "out.csv"
    assert (
        main(
            [
                "predict",
                "--run",
                result.run_dir,
                "--data",
                str(data),
                "--output",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    written = list(csv.DictReader(out.open()))
    assert len(written) == 13
    for row in written:
        probabilities = json.loads(row["probabilities"])
        assert set(probabilities) == {"neg", "pos"}
        assert row["label"] == max(probabilities, key=probabilities.get)


def test_predict_jsonl_to_stdout(trained_run, tmp_path, capsys):
    _, result = trained_run
    data = write_csv(tmp_path / "in.csv", [(t,) for t, _ in sentiment_rows(5, seed=2)], ("text",))
    assert main(["predict", "--run", result.run_dir, "--data", str(data), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [set(json.loads(line)) for line in lines] == [{"label", "probabilities"}] * 5


@pytest.mark.slow  # five commands, each loading the run's classifier: ~3 s on 2 cores
def test_evaluate_and_predict_take_the_column_flags_their_hint_names(trained_run, tmp_path, capsys):
    _, result = trained_run
    data = write_csv(tmp_path / "in.csv", sentiment_rows(6, seed=3), ("review", "gold"))
    predict = ["predict", "--run", result.run_dir, "--data", str(data), "--quiet"]
    assert main(predict) == 2
    assert "pass --text-column NAME" in _error(capsys)
    assert main([*predict, "--text-column", "review"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 6
    evaluate = ["evaluate", "--run", result.run_dir, "--data", str(data), "--json"]
    assert main([*evaluate, "--text-column", "review", "--label-column", "gold"]) == 0
    assert json.loads(capsys.readouterr().out)["num_examples"] == 6
    assert main([*predict, "--text-column", "review", "--text-pair-column", "gold"]) == 2
    assert "trained on single texts" in _error(capsys)


def test_empty_text_in_training_file_names_file_and_line(trainable_hf_dir, tmp_path, capsys):
    rows = sentiment_rows(10)
    rows[2] = ("   ", "pos")  # the header is line 1, so this row is line 4
    train = write_csv(tmp_path / "train.csv", rows)
    assert main(train_args(trainable_hf_dir, train, tmp_path / "run")) == 2
    assert f"{train}:4:" in _error(capsys)


def test_missing_column_lists_the_columns_that_exist(trainable_hf_dir, tmp_path, capsys):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(10), header=("sentence", "label"))
    assert main(train_args(trainable_hf_dir, train, tmp_path / "run")) == 2
    err = _error(capsys)
    assert "sentence" in err and "--text-column" in err


def test_label_unseen_in_training_is_an_error_with_line(trainable_hf_dir, tmp_path, capsys):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(10))
    eval_rows = sentiment_rows(4)
    eval_rows[1] = (eval_rows[1][0], "neutral")
    evaluation = write_csv(tmp_path / "eval.csv", eval_rows)
    args = train_args(trainable_hf_dir, train, tmp_path / "run", "--eval", str(evaluation))
    assert main(args) == 2
    err = _error(capsys)
    assert f"{evaluation}:3:" in err and "neutral" in err


def test_unknown_model_path_is_a_clear_error(tmp_path, capsys):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(10))
    assert main(train_args(tmp_path / "no-such-model", train, tmp_path / "run")) == 2
    assert "no-such-model" in _error(capsys)


def test_missing_run_directory_is_a_clear_error(tmp_path, capsys):
    data = write_csv(tmp_path / "in.csv", sentiment_rows(3))
    assert main(["evaluate", "--run", str(tmp_path / "nothing"), "--data", str(data)]) == 2
    assert "no such run directory or export" in _error(capsys)


def test_config_file_round_trips_and_flags_override_it(trained_run, tmp_path):
    from bertfit.cli import build_parser, run_config_from_args

    config, result = trained_run
    args = build_parser().parse_args(
        ["train", "--config", f"{result.run_dir}/config.yaml", "--epochs", "7"]
    )
    loaded = run_config_from_args(args)
    assert loaded.train.epochs == 7
    # the run decides: the checkpoint declares no pooling; no --few-shot, so raw features
    decided = dataclasses.replace(config.model, pooling="cls", normalize_features=False)
    assert loaded.model == decided and loaded.data == config.data


def test_predict_refuses_to_overwrite_its_input_or_write_into_a_directory(tmp_path, capsys):
    data = tmp_path / "new.csv"
    data.write_text("text\na fine film\n")
    for output, message in (
        (data, "is the input file"),
        (tmp_path, "is a directory"),
        (tmp_path / "no" / "p.jsonl", "does not exist"),
    ):
        # The run does not exist either: the output is checked before anything is loaded.
        assert (
            main(
                [
                    "predict",
                    "--run",
                    str(tmp_path / "no-run"),
                    "--data",
                    str(data),
                    "--output",
                    str(output),
                ]
            )
            == 2
        )
        assert message in capsys.readouterr().err
    assert data.read_text() == "text\na fine film\n"
