"""Data and a single-device reference run shared by the distributed tests."""

from __future__ import annotations

import pytest

from bertfit.cli import main
from tests.distributed import cluster


@pytest.fixture(scope="session")
def shards(tmp_path_factory):
    return cluster.write_shards(tmp_path_factory.mktemp("shards"))


@pytest.fixture(scope="session")
def reference(tmp_path_factory, trainable_hf_dir, shards):
    """One device, global batch 8, one epoch over the sharded files: trained in this process
    (one device needs no logical devices made before TensorFlow starts, and runs no
    collective)."""
    run = tmp_path_factory.mktemp("reference") / "run"
    args = cluster.train_args(trainable_hf_dir, shards, run, "--strategy", "default")
    assert main(["train", *args]) == 0
    return run
