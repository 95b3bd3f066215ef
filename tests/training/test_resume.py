"""Exact resume: a run killed at every awkward moment ends exactly like one never interrupted.

Each killed `bertfit train` runs in its own process (SIGKILL ends it, as a crash or an OOM kill
would; tests/training/killed_train.py picks the moment); the uninterrupted run, the one
terminated with SIGTERM (as a preemption) and the last resumed one train in the test's process.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.distributed import cluster
from tests.tiny import sentiment_rows, write_csv
from tests.training.kill import (
    resume_args,
    run_killed,
    steps_of,
    terminate_after_steps,
    train_here,
)


@pytest.fixture(scope="module")
def run_args(tmp_path_factory, trainable_hf_dir):
    data = tmp_path_factory.mktemp("resume_data")
    train = write_csv(data / "train.csv", sentiment_rows(96, seed=11))
    dev = write_csv(data / "dev.csv", sentiment_rows(24, seed=12))
    # Dropout on (the encoder's and the head's): the resumed run must continue its RNG too.
    return resume_args(trainable_hf_dir, train, eval=dev, save_every_steps=3)


def test_killed_five_times_and_terminated_once_it_ends_exactly_like_an_uninterrupted_run(
    run_args, tmp_path, capsys, monkeypatch
):
    plain, killed = tmp_path / "plain", tmp_path / "killed"
    code, err = train_here([*run_args, "--output-dir", str(plain)], capsys)
    assert code == 0, err

    args = [*run_args, "--output-dir", str(killed)]
    latest = killed / "checkpoints" / "latest"
    # 96 rows in buckets 8 and 16 at batch 8: 13 steps per epoch; a checkpoint every 3 steps.
    run_killed(args, ("steps", 5))  # mid-epoch, between steps
    run_killed(args, ("checkpoint", 1))  # inside a checkpoint write
    assert list(latest.glob(".ckpt-*.tmp")), "the killed save should have left its temporary file"
    run_killed(args, ("eval", 1))  # during the evaluation
    assert not list(latest.glob(".ckpt-*.tmp")), "the resumed run should have removed leftovers"
    run_killed(args, ("epoch-end", 2))  # right after epoch 1
    run_killed(args, ("steps", 2))  # early in epoch 2

    with monkeypatch.context() as patched:
        terminate_after_steps(patched, 1)  # once the resumed run took a step of its own
        code, err = train_here(args, capsys)
    assert code == 143, err
    assert "SIGTERM" in err and "checkpoint saved to" in err and "Traceback" not in err

    code, err = train_here(args, capsys)
    assert code == 0, err
    assert "resuming the unfinished run" in err

    cluster.assert_same_weights(plain, killed, atol=1e-6)
    got, want = steps_of(killed), steps_of(plain)
    assert (
        [(s["epoch"], s["step"], s["global_step"]) for s in got]
        == [(s["epoch"], s["step"], s["global_step"]) for s in want]
        == [(e, s, (e - 1) * 13 + s) for e in (1, 2) for s in range(1, 14)]
    )
    np.testing.assert_allclose([s["loss"] for s in got], [s["loss"] for s in want], atol=1e-6)
    metrics = [json.loads((run / "metrics.json").read_text()) for run in (killed, plain)]
    assert metrics[0]["status"] == metrics[1]["status"] == "finished"
    for resumed, uninterrupted in zip(metrics[0]["epochs"], metrics[1]["epochs"], strict=True):
        assert resumed["eval"]["num_examples"] == 24
        assert resumed["eval"]["accuracy"] == uninterrupted["eval"]["accuracy"]
        assert resumed["train_loss"] == pytest.approx(uninterrupted["train_loss"], abs=1e-6)
