"""A run's pooling when --pooling is not given: what the checkpoint declares (a
sentence-transformers model's 1_Pooling/config.json), said in the run's first lines, decided
once and saved in config.yaml, which a resumed run keeps (issue 56)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from bertfit.cli import main
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data.tasks import Task
from bertfit.runs.run_dir import RunDir
from bertfit.training.run import train
from bertfit.training.run_dir import TrainingRunDir
from tests.checkpoints.test_pooling import write_pooling
from tests.tiny import sentiment_rows, train_args, write_csv


def _sentence_transformers(tmp_path: Path, model: Path, *modes: str) -> Path:
    """A copy of the tiny checkpoint `model` that declares `modes` pooling."""
    return write_pooling(shutil.copytree(model, tmp_path / "st"), *modes)


@pytest.mark.slow  # a tiny run and an evaluation: ~8 s on 2 cores
def test_a_sentence_transformers_checkpoint_trains_with_the_pooling_it_declares(
    tmp_path, trainable_hf_dir, capsys
):
    model = _sentence_transformers(tmp_path, trainable_hf_dir, "mean_tokens")
    data = write_csv(tmp_path / "train.csv", sentiment_rows(24))
    run = tmp_path / "run"
    assert main(train_args(model, data, run, "--eval", str(data), buckets=16)) == 0
    said = f"pooling: mean (declared by {model}'s 1_Pooling/config.json; --pooling overrides it)"
    assert capsys.readouterr().err.splitlines()[0] == f"bertfit: {said}"
    assert RunDir(run).load_config().model.pooling == "mean"  # what evaluate and export build
    assert said in (run / "train.log").read_text()
    assert main(["evaluate", "--run", str(run), "--data", str(data), "--json"]) == 0


def test_a_declared_pooling_bertfit_does_not_have_is_refused_before_a_run_is_written(
    tmp_path, trainable_hf_dir, capsys
):
    model = _sentence_transformers(tmp_path, trainable_hf_dir, "max_tokens")
    data = write_csv(tmp_path / "train.csv", sentiment_rows(16))
    run = tmp_path / "run"
    assert main(train_args(model, data, run, buckets=16)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "declares max_tokens pooling, which bertfit does not have" in err
    assert "pass --pooling mean or --pooling cls" in err
    assert not run.exists()


@pytest.mark.slow  # a tiny run: ~4 s on 2 cores
def test_a_resumed_run_pools_as_it_started(tmp_path, trainable_hf_dir):
    config = RunConfig(
        output_dir=str(tmp_path / "run"),
        model=ModelConfig(name=str(trainable_hf_dir), max_seq_length=16),
        data=DataConfig(train=str(write_csv(tmp_path / "t.csv", sentiment_rows(16))), buckets=[16]),
        train=TrainConfig(batch_size=8, epochs=1, strategy="default", jit_compile=False),
    )
    run = TrainingRunDir(config.output_dir)
    run.create()  # a run killed before its first checkpoint, which had decided mean pooling:
    Task("single-label", ("neg", "pos")).save(run.labels_file)
    saved = dataclasses.replace(config, model=dataclasses.replace(config.model, pooling="mean"))
    saved.save(run.config_file)
    assert config.model.pooling is None  # the same command: the checkpoint declares nothing
    assert train(config, quiet=True).status == "finished"  # resumed, not refused
    assert run.load_config().model.pooling == "mean"  # not the tiny checkpoint's cls
