"""A streamed run (a prepared TFRecord set) killed mid-epoch resumes exactly: the resumed epoch's
shuffles are seeded, so it skips exactly the batches it took (issue 33)."""

from __future__ import annotations

import numpy as np
import pytest

from bertfit.cli import main
from tests.distributed import cluster
from tests.tiny import sentiment_rows, write_csv
from tests.training.kill import resume_args, run_killed, steps_of, train_here


@pytest.mark.slow  # a training process, killed, and two runs in this one
def test_a_streamed_run_killed_mid_epoch_ends_like_an_uninterrupted_one(
    tmp_path, trainable_hf_dir, capsys
):
    train = write_csv(tmp_path / "train.csv", sentiment_rows(60, seed=13))
    prepared = tmp_path / "prepared"
    args = ["prepare", str(train), str(prepared), "--model", str(trainable_hf_dir)]
    assert main([*args, "--max-seq-length", "16", "--shards", "3"]) == 0
    run_args = resume_args(trainable_hf_dir, prepared)
    plain, killed = tmp_path / "plain", tmp_path / "killed"
    code, err = train_here([*run_args, "--output-dir", str(plain)], capsys)
    assert code == 0, err
    args = [*run_args, "--output-dir", str(killed)]
    run_killed(args, ("steps", 3))  # mid-epoch 1, a checkpoint at step 2
    code, err = train_here(args, capsys)
    assert code == 0, err
    assert "resuming the unfinished run" in err

    cluster.assert_same_weights(plain, killed, atol=1e-6)
    got, want = steps_of(killed), steps_of(plain)
    assert [(s["global_step"], s["examples"]) for s in got] == [
        (s["global_step"], s["examples"]) for s in want
    ]
    assert sum(s["examples"] for s in got) == 2 * 60
    np.testing.assert_allclose([s["loss"] for s in got], [s["loss"] for s in want], atol=1e-6)
