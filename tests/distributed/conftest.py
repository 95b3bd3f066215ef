"""Data and a single-device reference run shared by the distributed tests."""

from __future__ import annotations

import pytest

from tests.distributed import cluster


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return cluster.write_shards(tmp_path_factory.mktemp("shards"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, trainable_hf_dir, shards):
    """One device, global batch 8, one epoch over the sharded files."""
    run = tmp_path_factory.mktemp("reference") / "run"
    cluster.train(cluster.train_args(trainable_hf_dir, shards, run, "--strategy", "default"))
    return run
