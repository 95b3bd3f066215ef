"""`bertfit check` on the command line: table or JSON, exit codes 0 / 1 (--strict) / 2."""

from __future__ import annotations

import functools
import json

import pytest

from bertfit.cli import main
from tests.tiny import sentiment_rows, train_args, write_csv

# `bertfit check` takes train's flags (--quiet included); without compiling, it is fast.
check_args = functools.partial(
    train_args, command="check", epochs=None, buckets=16, no_compile=True
)


def test_exit_codes_and_json(tmp_path, trainable_hf_dir, capsys):
    clean = write_csv(tmp_path / "clean.csv", sentiment_rows(32))
    assert main(check_args(trainable_hf_dir, clean)) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().out
    imbalanced = write_csv(
        tmp_path / "imb.csv", [(t, "pos") for t, _ in sentiment_rows(60)] + [("awful", "neg")]
    )
    assert main(check_args(trainable_hf_dir, imbalanced)) == 0
    assert main(check_args(trainable_hf_dir, imbalanced, strict=True)) == 1
    capsys.readouterr()
    single = write_csv(tmp_path / "single.csv", [(t, "pos") for t, _ in sentiment_rows(8)])
    assert main(check_args(trainable_hf_dir, single, json=True)) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["findings"][0]["code"] == "data-single-class"
    assert {"code", "severity", "message", "where", "why", "fix"} <= set(report["findings"][0])


@pytest.mark.slow
def test_tpu_rehearsal_on_the_demo_setup(rotten_tomatoes, capsys):
    code = main(
        [
            "check",
            "--model",
            "minilm-l6",
            "--train",
            f"{rotten_tomatoes}/train.csv",
            "--eval",
            f"{rotten_tomatoes}/dev.csv",
            "--max-seq-length",
            "64",
            "--pooling",
            "mean",
            "--target",
            "tpu",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["errors"] == 0, report["findings"]
    # the buckets train would choose for 3 epochs of these lengths, each compiled once
    chosen = report["stats"]["length buckets"].split(" chosen")[0].removeprefix("length buckets ")
    assert [c["shape"] for c in report["compiled"]] == [f"[4, {b}]" for b in chosen.split(", ")]
    assert all(c["ok"] for c in report["compiled"])
    assert report["memory"]["parameters"] > 20_000_000


def test_check_reads_a_train_glob_as_train_does(tmp_path, trainable_hf_dir, capsys):
    rows = sentiment_rows(32)
    write_csv(tmp_path / "part-1.csv", rows[:16])
    write_csv(tmp_path / "part-2.csv", rows[16:])
    assert main(check_args(trainable_hf_dir, tmp_path / "part-*.csv", json=True)) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["stats"]["training rows"] == 32


def test_a_pasted_train_command_is_checked_without_xla_on_a_cpu(tmp_path, trainable_hf_dir, capsys):
    """What a user pastes: train's own flags are taken, nothing is written, and a CPU run (no
    XLA) is checked without compiling, the report saying so and how to ask for it."""
    rows = write_csv(tmp_path / "train.csv", sentiment_rows(32))
    run = tmp_path / "run"
    args = train_args(trainable_hf_dir, rows, run, command="check", no_report=True, resume=True)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert not run.exists()
    assert "checked: training rows 32" in out and "length buckets length buckets" not in out
    assert "XLA compilation skipped: training here does not use XLA (auto: CPU)" in out
    assert "compiled for" not in out


@pytest.mark.slow  # one XLA compilation of the tiny model's step per bucket: ~4 s on 2 cores
def test_the_tpu_rehearsal_still_compiles_every_bucket(tmp_path, trainable_hf_dir, capsys):
    rows = write_csv(tmp_path / "train.csv", sentiment_rows(32))
    args = train_args(trainable_hf_dir, rows, None, "--target", "tpu", "--json", command="check")
    assert main([*args, "--buckets", "8,16"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["shape"] for c in report["compiled"]] == ["[1, 8]", "[1, 16]"]
    assert all(c["ok"] for c in report["compiled"]) and "XLA compilation" not in report["stats"]
    assert report["stats"]["length buckets"].startswith("8, 16")


@pytest.mark.slow
def test_check_reports_the_packed_shape_and_reads_packed_batches(
    tmp_path, trainable_hf_dir, capsys
):
    """With --packing the check plans and reads what `train --packing` would feed: rows of
    --max-seq-length, split over the target's replicas (a TPU's 8), several examples a row."""
    rows = write_csv(tmp_path / "train.csv", sentiment_rows(64))
    args = check_args(trainable_hf_dir, rows, None, "--packing", "--target", "tpu", json=True)
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in report["findings"] if f["severity"] == "error"] == []
    assert report["stats"]["packing"].startswith("8 rows of 16 tokens")
    assert report["stats"]["buckets used"] == [16]


@pytest.fixture(scope="module")
def foreign_tokenizer(tmp_path_factory):
    """BERT weights beside another model's tokenizer.json (an XLM-R-style Unigram), small
    enough that no id overflows: a tokenizer bertfit uses, and warns of."""
    pytest.importorskip("transformers")
    from tests.families import train_tokenizer, write_family_checkpoint

    folder = tmp_path_factory.mktemp("foreign-tokenizer")
    texts = [text for text, _ in sentiment_rows(60)]
    write_family_checkpoint("bert", folder, texts)
    rows = json.loads((folder / "config.json").read_text())["vocab_size"]
    train_tokenizer("unigram", texts, vocab_size=rows - 10, style="<s>").save_pretrained(folder)
    return folder


FOREIGN = "not the wordpiece tokenizer BERT checkpoints ship"


@pytest.mark.slow  # a tokenizer trained and a model written by transformers: seconds
def test_a_foreign_tokenizer_is_a_warning_check_counts_and_strict_fails_on(
    foreign_tokenizer, tmp_path, capsys
):
    data = write_csv(tmp_path / "train.csv", sentiment_rows(32))
    main(check_args(foreign_tokenizer, data, json=True))
    out, err = capsys.readouterr()
    report = json.loads(out)
    (finding,) = [f for f in report["findings"] if f["code"] == "model-tokenizer-foreign"]
    assert finding["severity"] == "warning" and FOREIGN in finding["message"]
    assert report["warnings"] >= 1 and "UserWarning" not in err
    assert main(check_args(foreign_tokenizer, data, strict=True)) == 1


@pytest.mark.slow  # a tokenizer trained and a model written by transformers, a step trained
def test_train_says_a_foreign_tokenizer_in_one_line(foreign_tokenizer, tmp_path, capsys):
    data = write_csv(tmp_path / "train.csv", sentiment_rows(16))
    args = train_args(foreign_tokenizer, data, tmp_path / "run", "--max-steps", "1")
    assert main([*args, "--no-report"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if FOREIGN in line]
    assert len(said) == 1 and said[0].startswith("bertfit: warning: "), said
