"""The main job end to end on a tiny random BERT: train, evaluate, predict, run directory."""

import json

import numpy as np
import pytest

from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data.pipeline import bucket_of
from bertfit.train.run import encode_labelled, evaluate, load_run, predict, train
from bertfit.data.sources import read_examples
from tests.tiny import sentiment_rows, write_csv

BUCKETS = [8, 16]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, trainable_hf_dir):
    path = tmp_path_factory.mktemp("run")
    config = RunConfig(
        output_dir=str(path / "run"),
        model=ModelConfig(name=str(trainable_hf_dir), max_seq_length=16, dropout=0.0),
        data=DataConfig(train=str(write_csv(path / "train.csv", sentiment_rows(192, seed=0))),
                        eval=str(write_csv(path / "eval.csv", sentiment_rows(37, seed=1))),
                        buckets=BUCKETS),
        train=TrainConfig(batch_size=8, epochs=3, learning_rate=5e-3, seed=0, strategy="default"),
    )
    return config, train(config, quiet=True)


def test_run_directory_holds_config_labels_encoder_checkpoints_and_metrics(trained):
    config, result = trained
    run = result["run_dir"]
    for name in ("config.yaml", "labels.json", "encoder/config.json", "encoder/vocab.txt",
                 "encoder/tokenizer.json", "metrics.json", "steps.jsonl", "train.log",
                 "checkpoints/latest/checkpoint", "checkpoints/best/checkpoint"):
        assert (config.output_dir and __import__("pathlib").Path(run, name).exists()), name
    metrics = json.loads(open(f"{run}/metrics.json").read())
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3]
    for key in ("loss", "accuracy", "macro_f1", "num_examples", "examples_per_second"):
        assert key in metrics["final"]
    assert RunConfig.load(f"{run}/config.yaml") == config


def test_learns_a_separable_task(trained):
    _, result = trained
    assert result["final"]["accuracy"] >= 0.9
    assert result["epochs"][-1]["train_loss"] < result["epochs"][0]["train_loss"]


def test_train_step_is_traced_once_per_bucket_used(trained):
    config, result = trained
    tokenizer = load_run(result["run_dir"]).tokenizer
    examples = read_examples(config.data.train)
    lengths = encode_labelled("", examples, config, tokenizer, None).encoded.packed_lengths
    used = len(set(bucket_of(lengths, BUCKETS)))
    assert used == 2
    assert result["trace_counts"]["train_step"] == used


def _unbatched_probabilities(run_dir, rows):
    run = load_run(run_dir)
    model = run.trainer.model
    out = []
    for text, _ in rows:
        inputs = run.tokenizer([text], max_seq_length=16)
        logits = model(inputs, training=False).numpy()[0]
        out.append(np.exp(logits) / np.exp(logits).sum())
    return np.array(out)


def test_evaluation_counts_every_row_and_equals_an_unbatched_pass(trained):
    config, result = trained
    rows = sentiment_rows(37, seed=1)  # 37 rows, batch 8: the last batch is padded
    metrics = evaluate(result["run_dir"], config.data.eval, quiet=True)
    assert metrics["num_examples"] == 37
    probabilities = _unbatched_probabilities(result["run_dir"], rows)
    labels = np.array([r[1] == "pos" for r in rows], int)
    assert metrics["accuracy"] == pytest.approx(np.mean(probabilities.argmax(1) == labels))


def test_predict_keeps_row_order_and_count(trained, tmp_path):
    _, result = trained
    rows = sentiment_rows(29, seed=5)
    unlabelled = write_csv(tmp_path / "new.csv", [(t,) for t, _ in rows], header=("text",))
    predictions = predict(result["run_dir"], str(unlabelled), quiet=True)
    assert len(predictions) == 29
    expected = _unbatched_probabilities(result["run_dir"], rows)
    got = np.array([[p["probabilities"]["neg"], p["probabilities"]["pos"]] for p in predictions])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert [p["label"] for p in predictions] == [["neg", "pos"][i] for i in expected.argmax(1)]
