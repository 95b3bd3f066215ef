"""A run that leaves out --batch-size and --epochs: the defaults (a batch of 32 for 3 epochs) on a
training set large enough for them, a schedule that learns on a small one (issue 63), said in
the run's first lines and saved in config.yaml, which a resumed run keeps; a flag given always
wins."""

from __future__ import annotations

import dataclasses
import json

import pytest

from bertfit.cli import main
from bertfit.config import DataConfig, RunConfig, TrainConfig
from bertfit.errors import ConfigError
from bertfit.runs.run_dir import RunDir
from bertfit.training.run_dir import TrainingRunDir, with_saved_decisions
from bertfit.training.schedule import Schedule, decide_schedule, small_set_schedule
from tests.tiny import sentiment_rows, train_args, write_csv


@pytest.mark.parametrize(
    "rows, batch_size, epochs",
    [
        (16, 8, 30),  # 8 per class of a binary set: 2 steps an epoch, 60 steps (at most 30 epochs)
        (40, 8, 20),  # 8 per class of 5 classes: 5 steps an epoch, 100 steps
        (64, 8, 13),  # 8 steps an epoch, 104 steps
        (256, 32, 13),  # an eighth of the rows is the default batch
        (400, 32, 8),  # 13 steps an epoch, 104 steps
        (1_056, 32, 4),  # 33 steps an epoch: 3 epochs would be 99 steps
        (1_088, 32, 3),  # 34 steps an epoch: the defaults train 102 steps
        (100_000, 32, 3),
    ],
)
def test_a_small_set_gets_a_batch_that_fits_it_and_enough_steps(rows, batch_size, epochs):
    assert small_set_schedule(rows) == Schedule(batch_size, epochs)


def test_the_batch_divides_over_the_replicas_and_the_steps_count_accumulated_batches():
    assert small_set_schedule(16, replicas=3) == Schedule(9, 30)  # 8 rounded up: 3 per replica
    assert small_set_schedule(10_000, replicas=3).batch_size == 33
    assert small_set_schedule(64, grad_accum=2) == Schedule(8, 25)  # 4 steps an epoch
    assert small_set_schedule(16, max_steps=50) == Schedule(8, 3)  # --max-steps: epochs unused


def test_after_few_shots_first_stage_the_head_alone_trains_one_epoch_in_larger_batches():
    assert small_set_schedule(16, few_shot=True) == Schedule(8, 1)  # 30 without
    assert small_set_schedule(64, few_shot=True) == Schedule(16, 1)  # a quarter of the rows
    assert small_set_schedule(128, few_shot=True) == Schedule(32, 1)  # 16 without
    assert small_set_schedule(10_000, few_shot=True) == Schedule(32, 1)
    config = RunConfig(train=TrainConfig(few_shot=True))
    decided, note = decide_schedule(config, 16, replicas=1)
    assert (decided.train.batch_size, decided.train.epochs) == (8, 1)
    assert note.startswith(
        "schedule: batch size 8 and 1 epoch for 16 training rows (the head alone, after "
        "--few-shot's first stage) (2 optimizer steps or more"
    )


def test_a_flag_given_wins_and_the_other_value_fits_it():
    assert small_set_schedule(16, batch_size=32, epochs=3) == Schedule(32, 3)
    assert small_set_schedule(16, epochs=2) == Schedule(8, 2)
    assert small_set_schedule(64, batch_size=32) == Schedule(32, 30)  # 2 steps an epoch


def _config(batch_size=None, epochs=None, **train) -> RunConfig:
    return RunConfig(train=TrainConfig(batch_size=batch_size, epochs=epochs, **train))


def test_the_run_says_what_it_chose_and_why_in_one_line():
    decided, note = decide_schedule(_config(), rows=16, replicas=1)
    assert (decided.train.batch_size, decided.train.epochs) == (8, 30)
    assert note == (
        "schedule: batch size 8 and 30 epochs for 16 training rows (60 optimizer steps or "
        "more, where 3 epochs at batch 32 would be 3); --batch-size and --epochs override it"
    )
    _, note = decide_schedule(_config(batch_size=16), rows=64, replicas=1)
    assert note == (
        "schedule: 25 epochs for 64 training rows (100 optimizer steps or more, where 3 "
        "epochs at batch 16 would be 12); --epochs overrides it"
    )
    _, note = decide_schedule(_config(max_steps=40), rows=16, replicas=1)
    assert note == (
        "schedule: batch size 8 for 16 training rows (--max-steps 40); --batch-size overrides it"
    )


def test_the_defaults_and_the_flags_given_are_not_announced():
    decided, note = decide_schedule(_config(), rows=5_000, replicas=1)
    assert (decided.train.batch_size, decided.train.epochs, note) == (32, 3, None)
    given = _config(batch_size=32, epochs=3)
    assert decide_schedule(given, rows=16, replicas=1) == (given, None)


def test_a_resumed_run_keeps_the_schedule_it_chose(tmp_path):
    """The same command again (no --batch-size, --epochs) is the same run, and resumes with the
    batch size and epochs saved when it started, whatever the rule would choose now."""
    config = RunConfig(output_dir=str(tmp_path / "run"), data=DataConfig(train="t.csv"))
    run = TrainingRunDir(config.output_dir)
    run.create()  # a run killed after it decided its schedule
    saved = _config(batch_size=8, epochs=30)
    dataclasses.replace(config, train=saved.train).save(run.config_file)
    assert run.plan_start(config, resume=None, overwrite=False) is True  # not "other settings"
    resumed = with_saved_decisions(run.load_config(), config).train
    assert (resumed.batch_size, resumed.epochs) == (8, 30)
    assert decide_schedule(dataclasses.replace(config, train=resumed), 200, 1)[1] is None
    other = dataclasses.replace(config, train=TrainConfig(batch_size=32))
    with pytest.raises(ConfigError, match=r"other settings \(train.batch_size: 8 → 32\)"):
        run.plan_start(other, resume=None, overwrite=False)  # a flag given is another run


@pytest.mark.slow  # a tiny run of 60 steps and an evaluation: ~8 s on 2 cores
def test_at_its_defaults_train_learns_from_8_rows_per_class_and_says_what_it_chose(
    tmp_path, trainable_hf_dir, capsys
):
    """Issue 63's acceptance on the tiny model: before, 3 epochs at batch 32 were 3 steps and
    it scored at chance. The tiny model starts from random weights: it needs a larger learning
    rate than a pretrained encoder, which is not what this test is about."""
    train = write_csv(tmp_path / "train.csv", sentiment_rows(16, seed=3))
    test = write_csv(tmp_path / "test.csv", sentiment_rows(200, seed=4))
    run = tmp_path / "run"
    args = train_args(trainable_hf_dir, train, run, batch_size=None, epochs=None)
    assert main([*args, "--learning-rate", "2e-3", "--buckets", "16"]) == 0
    said = capsys.readouterr().err.splitlines()[0]
    assert said.startswith("bertfit: schedule: batch size 8 and 30 epochs for 16 training rows")
    saved = RunDir(run).load_config().train
    assert (saved.batch_size, saved.epochs) == (8, 30)  # what resume, evaluate, export read
    assert RunDir(run).chosen_schedule() == said.removeprefix("bertfit: ")  # metrics.json
    assert said.removeprefix("bertfit: ") in (run / "train.log").read_text()
    assert main(["evaluate", "--run", str(run), "--data", str(test), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] >= 0.7  # 0.775; chance and before: 0.5
