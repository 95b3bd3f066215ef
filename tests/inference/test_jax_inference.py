"""`bertfit evaluate --backend jax` and `bertfit predict --backend jax`
(`bertfit.inference.jax_classifier`): a run's model on the JAX devices gives TensorFlow's metrics
and predictions.

Keras picks its backend once per process, so the JAX side runs in a process of its own
(`tests/inference/jax_outputs.py`); this one is TensorFlow's and gives the reference. A run
trained on JAX, on one JAX device, is checked beside the other JAX runs
(tests/training/test_jax_backend.py).
"""

from __future__ import annotations

import json

import pytest

from bertfit.cli import main
from bertfit.errors import ConfigError
from tests.inference.jax_outputs import assert_same_as_tensorflow, calibrated_copy
from tests.jax_process import run_in_jax
from tests.tiny import sentiment_rows, write_csv


def texts_to_score(path):
    """Rows of both length buckets (8, 16), one truncated to max_seq_length."""
    rows = [*sentiment_rows(31, seed=5), ("good " * 40, "pos")]
    return str(write_csv(path, rows))


def documents_to_score(path):
    """Documents of 1, 2 and 4 (at most `max_chunks`) windows of 16 ids."""
    rows = [(" ".join([text] * 2), label) for text, label in sentiment_rows(23, seed=6)]
    return str(write_csv(path, [*rows, ("good " * 90, "pos")]))


@pytest.fixture(scope="module")
def chunk_run(tmp_path_factory, trainable_hf_dir) -> str:
    """A tiny TensorFlow run of `--long-documents chunk` (windows of 16 ids, stride 4, at
    most 4 per document, attention pooling)."""
    from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from bertfit.training.run import train

    path = tmp_path_factory.mktemp("chunk_run")
    rows = [(" ".join([text] * 4), label) for text, label in sentiment_rows(48, seed=0)]
    config = RunConfig(
        output_dir=str(path / "run"),
        model=ModelConfig(
            name=str(trainable_hf_dir),
            max_seq_length=16,
            long_documents="chunk",
            chunk_stride=4,
            max_chunks=4,
            chunk_pooling="attention",
        ),
        data=DataConfig(train=str(write_csv(path / "train.csv", rows))),
        train=TrainConfig(batch_size=8, epochs=1, learning_rate=5e-3, strategy="default"),
    )
    return train(config, quiet=True).run_dir


@pytest.mark.slow  # a JAX process: 11 s on 2 busy cores (load 6)
def test_runs_on_two_jax_devices_give_tensorflows_metrics_and_predictions(
    trained_run, chunk_run, tmp_path
):
    """A TensorFlow-trained run, and one of long documents in windows."""
    runs = [
        calibrated_copy(trained_run[1].run_dir, tmp_path / "run"),
        calibrated_copy(chunk_run, tmp_path / "chunk_run"),
    ]
    data = [texts_to_score(tmp_path / "data.csv"), documents_to_score(tmp_path / "docs.csv")]
    outs = [tmp_path / "run.json", tmp_path / "chunk_run.json"]
    args = [str(a) for triple in zip(runs, data, outs, strict=True) for a in triple]
    run_in_jax(["tests.inference.jax_outputs", *args], devices=2)
    jax = [json.loads(out.read_text()) for out in outs]

    assert [j["devices"] for j in jax] == [2, 2]
    # a compile per shape, then no more: buckets 8 and 16; documents of 1, 2 and 4 windows
    assert [j["trace_counts"] for j in jax] == [{"predict_step": 2}, {"predict_step": 3}]
    for found, run, texts in zip(jax, runs, data, strict=True):
        assert_same_as_tensorflow(found, run, texts)


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--engine", "onnx"], "--engine onnx runs an export in another runtime"),
        ([], "is not one. An export is a TensorFlow SavedModel"),
    ],
)
@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_what_jax_does_not_run_is_refused_naming_the_fix(command, flags, said, tmp_path, capsys):
    """Said before Keras' backend is chosen (in this process Keras runs on TensorFlow, which
    it would say instead; tests/test_cli_startup.py shows that nothing heavy loads first)."""
    data = texts_to_score(tmp_path / "data.csv")
    export = tmp_path / "export" / "1"
    export.mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"")
    run = tmp_path / "export"
    args = [command, "--run", str(run), "--data", data, "--backend", "jax", *flags]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bertfit {command}: error: --backend jax") and said in err


def test_a_jax_classifier_in_a_tensorflow_process_is_refused_with_the_fix(tmp_path):
    """From Python, where no preflight chose the backend (before the run is read)."""
    from bertfit.inference.jax_classifier import JaxClassifier

    with pytest.raises(ConfigError, match="set KERAS_BACKEND=jax before Keras is imported"):
        JaxClassifier(tmp_path / "run")
