"""`bertfit evaluate --backend jax` and `bertfit predict --backend jax` (`bertfit.jax_inference`):
a run's model on the JAX devices gives TensorFlow's metrics and predictions.

Keras picks its backend once per process, so the JAX side runs in a process of its own
(`tests/inference/jax_outputs.py`); this one is TensorFlow's and gives the reference. A run
trained on JAX is checked beside the other JAX runs (tests/training/test_jax_backend.py).
"""

from __future__ import annotations

import json

import pytest

from bertfit.cli import main
from tests.inference.jax_outputs import assert_same_as_tensorflow, calibrated_copy
from tests.jax_process import run_in_jax
from tests.tiny import sentiment_rows, write_csv


def texts_to_score(path):
    """Rows of both length buckets (8, 16), one truncated to max_seq_length."""
    rows = [*sentiment_rows(31, seed=5), ("good " * 40, "pos")]
    return str(write_csv(path, rows))


@pytest.mark.slow  # a JAX process: ~15 s on 2 busy cores
def test_a_tensorflow_run_on_two_jax_devices_gives_tensorflows_metrics_and_predictions(
    trained_run, tmp_path
):
    run = calibrated_copy(trained_run[1].run_dir, tmp_path)
    data = texts_to_score(tmp_path / "data.csv")
    out = tmp_path / "jax.json"
    run_in_jax(["tests.inference.jax_outputs", run, data, out], devices=2)
    jax = json.loads(out.read_text())

    assert jax["devices"] == 2
    assert jax["trace_counts"] == {"predict_step": 2}  # buckets 8 and 16, then no more
    assert_same_as_tensorflow(jax, run, data)


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--engine", "onnx"], "--engine onnx runs an export in another runtime"),
        ([], "is not one. An export is a TensorFlow SavedModel"),
    ],
)
@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_what_jax_does_not_run_is_refused_before_keras_loads(
    command, flags, said, tmp_path, capsys
):
    """In this process Keras runs on TensorFlow: had the preflight chosen JAX first, it would
    say so instead."""
    data = texts_to_score(tmp_path / "data.csv")
    export = tmp_path / "export" / "1"
    export.mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"")
    run = tmp_path / "export"
    args = [command, "--run", str(run), "--data", data, "--backend", "jax", *flags]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bertfit {command}: error: --backend jax") and said in err
