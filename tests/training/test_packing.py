"""`bertfit train --packing` on both backends: the packed step computes the unpacked one,
one compilation per step function, and evaluation keeps every row in its order."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bertfit.cli import main
from bertfit.errors import ConfigError
from bertfit.inference.run import predict
from bertfit.training.checkpointing import TrainingState
from bertfit.training.run import _resume
from tests.jax_process import run_in_jax
from tests.tiny import sentiment_rows, train_args, write_csv
from tests.training import packed_step


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


def _packed_run(model, rows, tmp_path) -> tuple[list[str], Path, list]:
    """`bertfit train --packing` arguments of a two-epoch run evaluated on 37 rows, its run
    directory and those rows."""
    dev_rows = sentiment_rows(37, seed=3)
    dev = write_csv(tmp_path / "dev.csv", dev_rows)
    run = tmp_path / "run"
    extra = ["--packing", "--eval", str(dev), "--calibrate", "off"]
    return train_args(model, rows, run, *extra, epochs=2, learning_rate="5e-3"), run, dev_rows


def _assert_compiled_once_and_evaluated_every_row(run: Path, dev_rows: list) -> None:
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "finished"
    # one shape: one trace of the train step and one of the predict step, for the whole run
    assert metrics["trace_counts"] == {"train_step": 1, "predict_step": 1}
    assert "packing: true" in (run / "config.yaml").read_text()
    targets, outputs = np.load(run / "best_eval_outputs.npz").values()
    assert targets.tolist() == [int(label == "pos") for _, label in dev_rows]
    # the packed evaluation's outputs are the unpacked predictor's (of the best weights),
    # row for row
    predicted = predict(run, str(run.parent / "dev.csv"), quiet=True)  # `_packed_run`'s
    expected = np.array([[p["probabilities"]["neg"], p["probabilities"]["pos"]] for p in predicted])
    np.testing.assert_allclose(outputs, expected, atol=1e-4)
    assert metrics["final"]["num_examples"] == len(dev_rows)


@pytest.mark.slow  # the step compared twice (two poolings), then a packed run
def test_on_tensorflow_the_packed_step_is_the_unpacked_one_and_a_run_compiles_once(
    trainable_hf_dir, rows, tmp_path
):
    _assert_step_equal({p: packed_step.compare(trainable_hf_dir, rows, p) for p in ("cls", "mean")})
    args, run, dev_rows = _packed_run(trainable_hf_dir, rows, tmp_path)
    assert main(args) == 0
    _assert_compiled_once_and_evaluated_every_row(run, dev_rows)


@pytest.mark.slow  # as on TensorFlow, in one JAX process (its start-up is seconds)
def test_on_jax_the_packed_step_is_the_unpacked_one_and_a_run_compiles_once(
    trainable_hf_dir, rows, tmp_path
):
    args, run, dev_rows = _packed_run(trainable_hf_dir, rows, tmp_path)
    out = run_in_jax(
        ["tests.training.packed_step", trainable_hf_dir, rows, *args, "--backend", "jax"]
    )
    _assert_step_equal(json.loads(out.strip().splitlines()[-1]))
    _assert_compiled_once_and_evaluated_every_row(run, dev_rows)


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
    for command in ("train", "check"):  # check: the same line, not a traceback
        args = train_args(trainable_hf_dir, prepared, run, "--packing", command=command)
        assert main(args) == 2
        assert "--packing plans its rows in memory" in capsys.readouterr().err
        assert not run.exists()


def _resumed(saved: TrainingState, fresh: TrainingState) -> TrainingState:
    """`_resume` of a run whose `checkpoints/latest` holds `saved`, by a run set up as `fresh`
    (the run directory, its checkpoints and the console reduced to what `_resume` calls)."""
    ignore = lambda *_: None  # noqa: E731
    run_dir = SimpleNamespace(
        shown="run", remove_checkpoint_leftovers=ignore, keep_steps=ignore, log=ignore
    )
    checkpoints = SimpleNamespace(restore_latest=lambda: saved)
    return _resume(run_dir, checkpoints, fresh, SimpleNamespace(say=ignore))


def test_a_packed_run_resumes_on_as_many_replicas_as_it_started_on():
    """The packed rows of a step are a multiple of the replicas (5 on one, 4 on two, say), so
    another replica count plans other batches: that resume is refused, the same one resumes."""
    saved = TrainingState.from_json(TrainingState(step=3, global_step=3, packed_rows=5).to_json())
    with pytest.raises(ConfigError, match="took 5 packed rows a step, here it would take 4"):
        _resumed(saved, TrainingState(packed_rows=4))
    assert _resumed(saved, TrainingState(packed_rows=5)) == saved
