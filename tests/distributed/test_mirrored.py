"""MirroredStrategy over logical CPU devices trains exactly like one device (same global batch)."""

import numpy as np
import pytest

from tests.distributed import cluster

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("replicas", [2, 4])
def test_mirrored_over_cpu_devices_matches_one_device(tmp_path, trainable_hf_dir, shards,
                                                      reference, replicas):
    run = tmp_path / "run"
    result = cluster.train(cluster.train_args(
        trainable_hf_dir, shards, run, "--strategy", "mirrored", "--cpu-replicas", str(replicas)))
    assert f"with {replicas} replicas" in (run / "train.log").read_text()
    assert result["run_dir"] == str(run)
    losses, expected = cluster.step_losses(run), cluster.step_losses(reference)
    assert len(losses) == len(expected) == 12  # 96 rows, batch 8
    np.testing.assert_allclose(losses, expected, rtol=1e-4)
    cluster.assert_same_weights(run, reference, atol=1e-4)
