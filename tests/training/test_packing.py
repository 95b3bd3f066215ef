"""`bertfit train --packing` on both backends: the packed step computes the unpacked one,
one compilation per step function, and evaluation keeps every row in its order."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.inference.run import predict
from tests.jax_process import run_in_jax
from tests.tiny import sentiment_rows, train_args, write_csv
from tests.training import packed_step
from tests.training.kill import resume_args, run_killed, run_train, steps_of


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("packing")
    return write_csv(path / "train.csv", sentiment_rows(200, seed=11))


def _assert_step_equal(compared: dict) -> None:
    for pooling, result in compared.items():
        assert result["examples"] > result["rows"], pooling  # several examples a row
        assert result["loss_difference"] < 1e-5, pooling
        assert result["gradient_difference"] < 1e-5, pooling
        assert result["largest_gradient"] > 1e-3, pooling  # the gradients are not all ~0


@pytest.mark.slow
def test_the_packed_step_has_the_unpacked_loss_and_gradients_on_tensorflow(trainable_hf_dir, rows):
    _assert_step_equal({p: packed_step.compare(trainable_hf_dir, rows, p) for p in ("cls", "mean")})


@pytest.mark.slow
def test_the_packed_step_has_the_unpacked_loss_and_gradients_on_jax(trainable_hf_dir, rows):
    out = run_in_jax(["tests.training.packed_step", trainable_hf_dir, rows])
    _assert_step_equal(json.loads(out.strip().splitlines()[-1]))


def _train_packed(args: list[str], backend: str) -> None:
    if backend == "jax":
        run_in_jax(["bertfit.cli", "train", *args[1:], "--backend", "jax"])
    else:
        assert main(args) == 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_train_packing_compiles_once_and_evaluates_every_row_in_order(
    trainable_hf_dir, rows, tmp_path, backend
):
    dev_rows = sentiment_rows(37, seed=3)
    dev = write_csv(tmp_path / "dev.csv", dev_rows)
    run = tmp_path / "run"
    extra = ["--packing", "--eval", str(dev), "--calibrate", "off"]
    args = train_args(trainable_hf_dir, rows, run, *extra, epochs=2, learning_rate="5e-3")
    _train_packed(args, backend)

    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    # one shape: one trace of the train step and one of the predict step, for the whole run
    assert metrics["trace_counts"] == {"train_step": 1, "predict_step": 1}
    assert "packing: true" in (run / "config.yaml").read_text()
    targets, outputs = np.load(run / "best_eval_outputs.npz").values()
    assert targets.tolist() == [int(label == "pos") for _, label in dev_rows]
    # the packed evaluation's outputs are the unpacked predictor's (of the best weights),
    # row for row
    predicted = predict(run, str(dev), quiet=True)
    expected = np.array([[p["probabilities"]["neg"], p["probabilities"]["pos"]] for p in predicted])
    np.testing.assert_allclose(outputs, expected, atol=1e-4)
    assert metrics["final"]["num_examples"] == len(dev_rows)


@pytest.mark.slow
def test_packing_refuses_what_it_cannot_pack_before_anything_is_written(
    trainable_hf_dir, rows, tmp_path, capsys
):
    run = tmp_path / "run"
    for extra, said in (
        (["--long-documents", "chunk"], "--long-documents chunk"),
        (["--streaming"], "--streaming"),
    ):
        assert main(train_args(trainable_hf_dir, rows, run, "--packing", *extra)) == 2
        assert said in capsys.readouterr().err
        assert not run.exists()
    prepared = tmp_path / "prepared"
    args = ["prepare", str(rows), str(prepared), "--model", str(trainable_hf_dir)]
    assert main([*args, "--max-seq-length", "16"]) == 0
    assert main(train_args(trainable_hf_dir, prepared, run, "--packing")) == 2
    assert "--packing plans its rows in memory" in capsys.readouterr().err
    assert not run.exists()


@pytest.mark.slow
def test_a_packed_run_resumes_on_as_many_replicas_as_it_started_on(trainable_hf_dir, tmp_path):
    """The packed rows of a step are a multiple of the replicas (5 on one, 4 on two here), so
    another replica count plans other batches: that resume is refused, the same one resumes."""
    train = write_csv(tmp_path / "train.csv", sentiment_rows(96, seed=11))
    run = tmp_path / "run"
    args = [*resume_args(trainable_hf_dir, train, save_every_steps=2), "--packing"]
    args += ["--output-dir", str(run)]
    run_killed(args, ("steps", 3))
    code, err = run_train([*args, "--cpu-replicas", "2"])
    assert code == 2 and "took 5 packed rows a step, here it would take 4" in err
    code, err = run_train(args)
    assert code == 0, err
    global_steps = [s["global_step"] for s in steps_of(run)]
    assert global_steps == list(range(1, len(global_steps) + 1))
