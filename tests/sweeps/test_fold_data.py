"""The fold files a k-fold run reads: the training rows in their own columns and labels, each row
held out once; and what a run directory killed early holds when the sweep resumes."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from bertfit.config import DataConfig, RunConfig
from bertfit.data.sources import SourceSpec, read_examples
from bertfit.errors import ConfigError
from bertfit.sweeps.fold_data import split_training_rows
from bertfit.sweeps.sweep_dir import run_state
from tests.tiny import tagged_rows, write_csv, write_jsonl


@pytest.mark.parametrize("form", ["json lists", "separated"])
def test_fold_files_hold_every_row_once_in_the_training_files_columns(tmp_path, form):
    rows = tagged_rows(24, seed=3)
    if form == "json lists":
        train = write_jsonl(tmp_path / "tags.jsonl", rows, keys=("review", "tags"))
    else:
        rows = [(text, "|".join(labels)) for text, labels in rows]
        train = write_csv(tmp_path / "tags.csv", rows, header=("review", "tags"))
    config = RunConfig(
        data=DataConfig(
            train=str(train),
            text_column="review",
            label_column="tags",
            label_separator="|" if form == "separated" else None,
        )
    )
    split = split_training_rows(config, 3, tmp_path / "folds")
    spec = SourceSpec(text_column="review", label_column="tags", empty_labels=True)

    def rows_of(examples) -> Counter:
        return Counter((e.text, tuple(split.task.label_set(e.label))) for e in examples)

    everything, held_out = rows_of(split.examples), Counter()
    for k in (1, 2, 3):
        train_file, valid_file, held_out_file = split.files(k)
        held, valid = (rows_of(read_examples(f, spec)) for f in (held_out_file, valid_file))
        assert rows_of(read_examples(train_file, spec)) + valid + held == everything  # no row lost
        assert 0 < valid.total() <= held.total()  # a slice of the training part to choose on
        held_out += held
    assert held_out == everything  # every row held out exactly once, with its labels
    assert sum(held_out.values()) == len(rows)
    assert json.loads((tmp_path / "folds/folds.json").read_text())["fold_of_row"] == (
        split.fold.tolist()
    )
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "folds").iterdir()}
    split_training_rows(config, 3, tmp_path / "folds")  # a resumed sweep: the same files, kept
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "folds").iterdir()} == before


def test_a_run_killed_before_its_config_was_written_restarts_and_a_stranger_is_refused(tmp_path):
    run = tmp_path / "runs/t1/seed42"
    (run / "encoder").mkdir(parents=True)  # save_setup writes config.yaml last
    (run / ".lock").write_text("12345\n")
    assert run_state(run) == "new" and not run.exists()
    (run / "encoder").mkdir(parents=True)
    (run / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="holds other files"):
        run_state(run)
    assert (run / "notes.txt").exists()
    (run / "notes.txt").unlink()
    (run / "config.yaml").write_text("{}\n")
    (run / "metrics.json").write_text('{"status": "running"}')
    assert run_state(run) == "unfinished"
    (run / "metrics.json").write_text('{"status": "finished"}')
    assert run_state(run) == "finished"
