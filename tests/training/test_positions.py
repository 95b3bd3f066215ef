"""max_seq_length never exceeds the checkpoint's position table: train, check and predict say so."""

from __future__ import annotations

import pytest

import bertfit
from bertfit.cli import main
from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.errors import ConfigError
from bertfit.inference.predictor import load_classifier
from tests.tiny import TINY_CONFIG, sentiment_rows, train_args, write_csv

LIMIT = TINY_CONFIG.max_position_embeddings  # 64


def test_train_and_check_refuse_a_length_past_the_position_table(
    trainable_hf_dir, tmp_path, capsys
):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(16))
    run = tmp_path / "run"
    assert main(train_args(trainable_hf_dir, train, run, max_seq_length=2 * LIMIT)) == 2
    error = capsys.readouterr().err
    assert f"max_position_embeddings {LIMIT}" in error and f"--max-seq-length {LIMIT}" in error
    assert not (tmp_path / "run").exists()
    config = RunConfig(
        model=ModelConfig(name=str(trainable_hf_dir), max_seq_length=2 * LIMIT),
        data=DataConfig(train=str(train)),
        train=TrainConfig(batch_size=8),
    )
    report = bertfit.check(config, compile=False)
    assert "shape-seq-exceeds-positions" in report.codes


def test_a_run_whose_length_exceeds_its_encoder_is_refused_when_loaded(trained_run, tmp_path):
    import shutil

    _, result = trained_run
    run = tmp_path / "edited"
    shutil.copytree(result.run_dir, run)
    config = RunConfig.load(run / "config.yaml")
    config.model.max_seq_length = 2 * LIMIT
    config.save(run / "config.yaml")
    with pytest.raises(ConfigError, match=f"position table \\(max_position_embeddings {LIMIT}"):
        load_classifier(run)
