"""One run per directory: refusals, --overwrite, --resume, default directories, early errors."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from bertfit.cli import main as cli
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data.tasks import Task
from bertfit.errors import ConfigError
from bertfit.runs.run_dir import RunDir
from bertfit.training.run import train
from bertfit.training.run_dir import TrainingRunDir
from tests.tiny import sentiment_rows, train_args, write_csv


@pytest.fixture
def config(tmp_path, trainable_hf_dir) -> RunConfig:
    return RunConfig(
        output_dir=str(tmp_path / "run"),
        model=ModelConfig(name=str(trainable_hf_dir), max_seq_length=16, dropout=0.0),
        data=DataConfig(
            train=str(write_csv(tmp_path / "train.csv", sentiment_rows(24))), buckets=[16]
        ),
        train=TrainConfig(batch_size=8, epochs=1, seed=0, strategy="default", jit_compile=False),
    )


def _cli_train(config: RunConfig, output=None, *extra: str) -> int:
    return cli(
        train_args(
            config.model.name,
            config.data.train,
            output,
            *extra,
            buckets=16,
            jit_compile="false",
            json=True,
        )
    )


def test_a_second_run_into_a_finished_run_is_refused_and_overwrite_replaces_it(config, capsys):
    train(config, quiet=True)
    before = (Path(config.output_dir) / "steps.jsonl").read_text()
    assert _cli_train(config, config.output_dir) == 2
    error = capsys.readouterr().err
    assert "holds a finished run" in error and "--overwrite" in error and "--resume" in error
    assert (Path(config.output_dir) / "steps.jsonl").read_text() == before  # untouched

    assert _cli_train(config, config.output_dir, "--overwrite", "--learning-rate", "1e-3") == 0
    steps = (Path(config.output_dir) / "steps.jsonl").read_text().splitlines()
    assert len(steps) == len(before.splitlines())  # the new run's lines only, none appended
    assert RunConfig.load(Path(config.output_dir) / "config.yaml").train.learning_rate == 1e-3


def test_an_unfinished_run_of_other_settings_is_refused_naming_the_ways_out(config):
    run = TrainingRunDir(config.output_dir)
    run.create()  # a run killed before its first checkpoint left its setup files:
    Task("single-label", ("neg", "pos")).save(run.labels_file)
    config.save(run.config_file)
    other = dataclasses.replace(config, train=dataclasses.replace(config.train, learning_rate=1e-3))
    with pytest.raises(
        ConfigError,
        match=r"other settings \(train.learning_rate: 5e-05 → "
        r"0.001\).*--resume.*--overwrite",
    ):
        train(other, quiet=True)
    with pytest.raises(ConfigError, match="--resume and --overwrite"):
        train(config, quiet=True, resume=True, overwrite=True)
    result = train(config, quiet=True)  # the same settings: continues it
    assert result.status == "finished"


@pytest.mark.slow  # a run set up twice, one trained: ~6 s on 2 cores
def test_a_run_that_failed_before_its_first_checkpoint_gives_way_to_the_corrected_command(
    config, monkeypatch, capsys
):
    """A step that raises (here as `--base-precision int8 --precision mixed_bf16` once did on
    TensorFlow) stops the run as "failed" with its error; it saved nothing trained, so the
    command with other settings replaces it without --overwrite, and says so."""
    from bertfit.training.run import EpochRunner

    def crash(runner, state, stop):
        raise TypeError("Input 'y' of 'Mul' Op has type bfloat16 that does not match float32")

    monkeypatch.setattr(EpochRunner, "train", crash)
    with pytest.raises(TypeError):
        train(config, quiet=True)
    run = Path(config.output_dir)
    metrics = json.loads((run / "metrics.json").read_text())
    error = "TypeError: Input 'y' of 'Mul' Op has type bfloat16 that does not match float32"
    assert metrics["status"] == "failed" and metrics["error"] == error
    assert f"error: {error}" in (run / "train.log").read_text()
    monkeypatch.undo()

    assert _cli_train(config, config.output_dir, "--learning-rate", "1e-3") == 0
    said = capsys.readouterr().err
    assert f"bertfit: {run} held a run of other settings (" in said
    assert "train.learning_rate: 5e-05 → 0.001" in said
    assert ") that failed before its first checkpoint: replacing it" in said
    assert RunConfig.load(run / "config.yaml").train.learning_rate == 1e-3
    assert "error:" not in (run / "train.log").read_text()  # the failed run's files are gone


def test_resume_needs_a_run_to_resume(config):
    with pytest.raises(ConfigError, match="holds no run to resume"):
        train(config, quiet=True, resume=True)


def test_a_directory_of_other_files_is_never_written_or_cleared(config):
    Path(config.output_dir).mkdir()
    (Path(config.output_dir) / "thesis.tex").write_text("years of work")
    for overwrite in (False, True):
        with pytest.raises(ConfigError, match="not a bertfit run"):
            train(config, quiet=True, overwrite=overwrite)
    assert (Path(config.output_dir) / "thesis.tex").read_text() == "years of work"


def test_without_output_dir_each_run_gets_a_new_directory_and_latest_points_to_it(
    config, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    first = train(dataclasses.replace(config, output_dir=None), quiet=True).run_dir
    second = train(dataclasses.replace(config, output_dir=None), quiet=True).run_dir
    assert first != second
    assert Path(first).parent == Path(second).parent == Path("runs")
    assert os.path.realpath("runs/latest") == os.path.realpath(second)
    assert RunConfig.load(Path(second) / "config.yaml").output_dir == second


def test_early_errors_leave_no_directory(config, tmp_path, capsys):
    missing = dataclasses.replace(
        config, data=dataclasses.replace(config.data, train=str(tmp_path / "missing.csv"))
    )
    assert _cli_train(missing, config.output_dir) == 2
    assert not Path(config.output_dir).exists()
    capsys.readouterr()


@pytest.mark.parametrize(
    "output, message",
    [
        ("a-file", "is a file, not a directory"),
        ("/proc/bertfit-run", "cannot create files in /proc"),
    ],
)
def test_an_unusable_output_dir_is_refused_before_the_model_is_loaded(
    config, tmp_path, capsys, output, message
):
    (tmp_path / "a-file").write_text("")
    path = output if output.startswith("/") else str(tmp_path / output)
    # A model path that does not exist: the output check must come first.
    assert cli(train_args(tmp_path / "no-model", config.data.train, path)) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error and "no-model" not in error


def test_metrics_say_running_until_the_run_finished(config):
    result = train(config, quiet=True)
    assert result.status == "finished"
    metrics = json.loads((Path(config.output_dir) / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    assert RunDir(config.output_dir).status() == "finished"


def test_best_holds_only_the_weights_and_is_the_last_epoch_without_evaluation(config):
    import tensorflow as tf

    train(config, quiet=True)
    best = tf.train.latest_checkpoint(str(Path(config.output_dir) / "checkpoints" / "best"))
    latest = tf.train.latest_checkpoint(str(Path(config.output_dir) / "checkpoints" / "latest"))
    best_names = set(tf.train.load_checkpoint(best).get_variable_to_shape_map())
    latest_names = set(tf.train.load_checkpoint(latest).get_variable_to_shape_map())
    assert not any(name.startswith("optimizer") for name in best_names)
    assert any(name.startswith("optimizer") for name in latest_names)
    model = {n for n in latest_names if n.startswith("model.")}
    assert model and model <= best_names


def test_buckets_chosen_from_the_data_are_saved_and_kept_when_the_run_resumes(config):
    auto = dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, max_seq_length=32),
        data=dataclasses.replace(config.data, buckets="auto"),
    )
    run = TrainingRunDir(auto.output_dir)
    run.create()  # a run killed before its first checkpoint, which had chosen 24 and 32:
    Task("single-label", ("neg", "pos")).save(run.labels_file)
    dataclasses.replace(auto, data=dataclasses.replace(auto.data, buckets=[24, 32])).save(
        run.config_file
    )
    result = train(auto, quiet=True)  # no --buckets: the saved choice, not a new one
    assert result.status == "finished"
    assert run.load_config().data.buckets == [24, 32]
    assert "; buckets [24, 32];" in (Path(auto.output_dir) / "train.log").read_text()

    fresh = dataclasses.replace(auto, output_dir=str(Path(config.output_dir).parent / "fresh"))
    train(fresh, quiet=True)
    chosen = RunDir(fresh.output_dir).load_config().data.buckets
    assert chosen and chosen[-1] == 32
    log = (Path(fresh.output_dir) / "train.log").read_text()
    assert f"length buckets {', '.join(map(str, chosen))} chosen from the training lengths" in log
    assert "XLA for nothing (--jit-compile False)" in log
