"""A run at a URL killed with SIGKILL resumes and ends exactly like an uninterrupted run
(tests/training/killed_train.py picks the moment; the lock the killed process left is
taken over). The killed runs are processes of their own; the uninterrupted run and the
resumed one train in this process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfit import storage
from bertfit.cli import main
from bertfit.runs.run_dir import open_run
from tests.distributed import cluster
from tests.tiny import sentiment_rows, write_csv
from tests.training.kill import resume_args, run_killed, steps_of, train_here


@pytest.fixture(scope="module")
def plain(tmp_path_factory, trainable_hf_dir):
    """A local train.csv, and the local run of it that no one interrupted."""
    folder = tmp_path_factory.mktemp("remote_resume")
    train = write_csv(folder / "train.csv", sentiment_rows(48, seed=11))
    run = folder / "plain"
    assert main(["train", *resume_args(trainable_hf_dir, train), "--output-dir", str(run)]) == 0
    return train, run


@pytest.mark.slow
@pytest.mark.parametrize(
    "store, kills",
    [
        # mid-epoch, after a checkpoint was uploaded; then right after epoch 1
        pytest.param("s3", [("steps", 4), ("epoch-end", 2)], id="s3-killed-twice"),
        # the same takeover and resume, on the other store
        pytest.param("gs", [("steps", 4)], id="gs-killed-once"),
    ],
)
def test_a_run_in_a_bucket_killed_resumes_exactly(
    store, kills, plain, object_stores, trainable_hf_dir, tmp_path, capsys
):
    local_train, plain_run = plain
    bucket = f"{store}://bertfit-test/{tmp_path.name}"
    train = storage.join(bucket, "train.csv")
    storage.upload_file(local_train, train)
    killed = storage.join(bucket, "run")
    args = [*resume_args(trainable_hf_dir, train), "--output-dir", killed]

    for at in kills:
        run_killed(args, at)
        assert storage.exists(storage.join(killed, ".lock"))  # left by the killed process
    code, err = train_here(args, capsys)
    assert code == 0, err
    assert "resuming the unfinished run" in err and "took over the lock" in err

    resumed = open_run(killed).path
    cluster.assert_same_weights(plain_run, resumed, atol=1e-6)
    got, want = steps_of(resumed), steps_of(plain_run)
    assert (
        [s["global_step"] for s in got]
        == [s["global_step"] for s in want]
        == list(range(1, len(want) + 1))
    )
    np.testing.assert_allclose([s["loss"] for s in got], [s["loss"] for s in want], atol=1e-6)
    metrics = json.loads((resumed / "metrics.json").read_text())
    assert metrics["status"] == "finished" and len(metrics["epochs"]) == 2
    assert not storage.exists(storage.join(killed, ".lock"))
