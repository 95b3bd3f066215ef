"""`--max-steps N` (issue 33): exactly N optimizer steps across epoch boundaries, the last epoch
cut short and evaluated and saved as an epoch's end, the learning-rate schedule spanning N, on
the in-memory and the streamed path; a run killed on the way ends exactly like one that was not."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.runs.run_dir import RunDir
from bertfit.training.optimizer import WarmupLinearDecay
from tests.distributed import cluster
from tests.tiny import sentiment_rows, train_args, write_csv
from tests.training.kill import run_killed, steps_of, train_here

# 40 rows in one bucket at batch 8: 5 steps per epoch; 7 steps are epoch 1 and 2 of epoch 2.
ROWS, STEPS_PER_EPOCH, MAX_STEPS = 40, 5, 7


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("max_steps")
    train = write_csv(folder / "train.csv", sentiment_rows(ROWS, seed=21))
    dev = write_csv(folder / "dev.csv", sentiment_rows(12, seed=22))
    return train, dev


def _args(model, train, dev, output, **flags) -> list[str]:
    defaults = dict(
        eval=dev, buckets="16", max_steps=MAX_STEPS, epochs=None, learning_rate="2e-3", seed=5
    )
    return train_args(model, train, output, **{**defaults, **flags, "jit_compile": "false"})


def test_max_steps_must_be_positive(one_layer_hf_dir, data, tmp_path, capsys):
    train, dev = data
    assert main(_args(one_layer_hf_dir, train, dev, tmp_path / "run", max_steps=0)) != 0
    err = capsys.readouterr().err
    assert "train.max_steps (--max-steps) must be at least 1; got 0" in err
    assert "Traceback" not in err


@pytest.mark.slow  # ~15 s: a tiny training run in process
def test_a_run_takes_exactly_max_steps_across_epochs_and_says_so(one_layer_hf_dir, data, tmp_path):
    train, dev = data
    run = tmp_path / "run"
    assert main(_args(one_layer_hf_dir, train, dev, run, warmup_ratio="0.3")) == 0

    steps = steps_of(run)
    assert [(s["epoch"], s["step"], s["global_step"]) for s in steps] == [
        (1, 1, 1), (1, 2, 2), (1, 3, 3), (1, 4, 4), (1, 5, 5), (2, 1, 6), (2, 2, 7)
    ]  # fmt: skip
    schedule = WarmupLinearDecay(
        2e-3, round(0.3 * MAX_STEPS), MAX_STEPS
    )  # sized on N, not 3 epochs
    np.testing.assert_allclose(
        [s["learning_rate"] for s in steps], [schedule.at(i) for i in range(MAX_STEPS)]
    )
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    assert metrics["stopped_at_max_steps"] == MAX_STEPS
    first, last = metrics["epochs"]
    assert "max_steps_cut" not in first and first["train_examples"] == ROWS
    assert last["max_steps_cut"] == 2 and last["train_examples"] == 16
    assert last["eval"]["num_examples"] == 12  # evaluated as at an epoch's end
    assert list((run / "checkpoints" / "latest").glob("ckpt-7.safetensors"))
    log = (run / "train.log").read_text()
    assert "--max-steps 7: 2 epoch(s) of 5 steps, the last cut at 2 steps" in log
    assert "epoch 2 (cut at --max-steps after 2 steps)" in log
    killed = RunDir(run)  # as a killed run's metrics.json reads
    killed.metrics_file.write_text(json.dumps({**metrics, "status": "running", "epochs": []}))
    assert "0 epoch(s) finished of a --max-steps 7 run" in killed.unfinished_note()


@pytest.mark.slow  # per path: a training process, killed, and two runs in this one
@pytest.mark.parametrize("path", ["in-memory", "streamed"])
def test_a_max_steps_run_killed_in_its_cut_epoch_ends_like_an_uninterrupted_one(
    path, one_layer_hf_dir, data, tmp_path, capsys
):
    train, dev = data
    if path == "streamed":
        prepared = tmp_path / "prepared"
        prepare = ["prepare", str(train), str(prepared), "--model", str(one_layer_hf_dir)]
        assert main([*prepare, "--max-seq-length", "16", "--shards", "2"]) == 0
        train = prepared
    args = _args(one_layer_hf_dir, train, dev, None, command=None, dropout="0.2")
    args += ["--save-every-steps", "1", "--json"]
    plain, killed = tmp_path / "plain", tmp_path / "killed"
    code, err = train_here([*args, "--output-dir", str(plain)], capsys)
    assert code == 0, err
    resumed = [*args, "--output-dir", str(killed)]
    run_killed(resumed, ("steps", 6))  # global step 6: the cut epoch's first step, saved
    code, err = train_here(resumed, capsys)
    assert code == 0, err
    assert "resuming the unfinished run" in err

    cluster.assert_same_weights(plain, killed, atol=1e-6)
    got, want = steps_of(killed), steps_of(plain)
    assert [s["global_step"] for s in got] == list(range(1, MAX_STEPS + 1))
    assert [(s["global_step"], s["examples"]) for s in got] == [
        (s["global_step"], s["examples"]) for s in want
    ]
    np.testing.assert_allclose([s["loss"] for s in got], [s["loss"] for s in want], atol=1e-6)
    metrics = [json.loads((run / "metrics.json").read_text()) for run in (killed, plain)]
    assert metrics[0]["stopped_at_max_steps"] == metrics[1]["stopped_at_max_steps"] == MAX_STEPS
    evaluations = [m["epochs"][-1]["eval"] for m in metrics]
    assert evaluations[0]["accuracy"] == evaluations[1]["accuracy"]
    assert evaluations[0]["loss"] == pytest.approx(evaluations[1]["loss"], abs=1e-5)
