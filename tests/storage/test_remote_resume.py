"""A run at a URL killed with SIGKILL resumes and ends exactly like an uninterrupted run
(tests/training/killed_train.py picks the moment; the lock the killed process left is
taken over)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfit import storage
from bertfit.runs.run_dir import open_run
from tests.distributed import cluster
from tests.tiny import sentiment_rows, write_csv
from tests.training.kill import resume_args, run_killed, run_train, steps_of


@pytest.mark.slow
@pytest.mark.parametrize("store", ["gs", "s3"])
def test_a_run_in_a_bucket_killed_twice_resumes_exactly(
    store, object_stores, trainable_hf_dir, tmp_path
):
    bucket = f"{store}://bertfit-test/{tmp_path.name}"
    train = storage.join(bucket, "train.csv")
    storage.upload_file(write_csv(tmp_path / "train.csv", sentiment_rows(48, seed=11)), train)
    args = resume_args(trainable_hf_dir, train)
    plain, killed = tmp_path / "plain", storage.join(bucket, "run")
    code, err = run_train([*args, "--output-dir", str(plain)])
    assert code == 0, err

    remote_args = [*args, "--output-dir", killed]
    run_killed(remote_args, ("steps", 4))  # mid-epoch, after a checkpoint was uploaded
    assert storage.exists(storage.join(killed, ".lock"))  # left by the killed process
    run_killed(remote_args, ("epoch-end", 2))  # right after epoch 1
    code, err = run_train(remote_args)
    assert code == 0, err
    assert "resuming the unfinished run" in err and "took over the lock" in err

    resumed = open_run(killed).path
    cluster.assert_same_weights(plain, resumed, atol=1e-6)
    got, want = steps_of(resumed), steps_of(plain)
    assert (
        [s["global_step"] for s in got]
        == [s["global_step"] for s in want]
        == list(range(1, len(want) + 1))
    )
    np.testing.assert_allclose([s["loss"] for s in got], [s["loss"] for s in want], atol=1e-6)
    metrics = json.loads((resumed / "metrics.json").read_text())
    assert metrics["status"] == "finished" and len(metrics["epochs"]) == 2
    assert not storage.exists(storage.join(killed, ".lock"))
