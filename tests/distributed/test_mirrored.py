"""MirroredStrategy over logical CPU devices trains exactly like one device (same global batch)."""

import functools

import numpy as np
import pytest

from bertfit.cli import main
from tests.distributed import cluster

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("replicas", [2, 4])
def test_mirrored_over_cpu_devices_matches_one_device(
    tmp_path, trainable_hf_dir, shards, reference, replicas
):
    run = tmp_path / "run"
    result = cluster.train(
        cluster.train_args(
            trainable_hf_dir, shards, run, "--strategy", "mirrored", "--cpu-replicas", str(replicas)
        )
    )
    assert f"with {replicas} replicas" in (run / "train.log").read_text()
    assert result["run_dir"] == str(run)
    losses, expected = cluster.step_losses(run), cluster.step_losses(reference)
    assert len(losses) == len(expected) == 12  # 96 rows, batch 8
    np.testing.assert_allclose(losses, expected, rtol=1e-4)
    cluster.assert_same_weights(run, reference, atol=1e-4)


@pytest.mark.parametrize("task", ["multi-label", "regression"])
def test_mirrored_matches_one_device_for_multi_label_and_regression(
    tmp_path, trainable_hf_dir, task
):
    from tests.tiny import scored_rows, tagged_rows, write_csv, write_jsonl

    data = (
        write_jsonl(tmp_path / "tags.jsonl", tagged_rows(90, seed=5))
        if task == "multi-label"
        else write_csv(tmp_path / "scores.csv", scored_rows(90, 5))
    )
    runs = {name: tmp_path / name for name in ("one", "two")}
    args = functools.partial(cluster.train_args, trainable_hf_dir, str(data), task=task)
    # one device in this process; the replicas' logical devices exist before TensorFlow starts
    assert main(["train", *args(runs["one"], "--strategy", "default")]) == 0
    cluster.train(args(runs["two"], "--strategy", "mirrored", "--cpu-replicas", "2"))
    losses = cluster.step_losses(runs["two"])
    assert len(losses) == 12  # 90 rows in batches of 8: the last one padded, nothing dropped
    np.testing.assert_allclose(losses, cluster.step_losses(runs["one"]), rtol=1e-4)
    cluster.assert_same_weights(runs["two"], runs["one"], atol=1e-4)
