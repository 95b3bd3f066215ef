"""The main job end to end on a tiny random BERT: train, evaluate, predict, run directory."""

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bertfit.config import RunConfig
from bertfit.data.labelled import encode_labelled
from bertfit.data.pipeline import bucket_of
from bertfit.data.sources import read_examples
from bertfit.inference.outputs import calibrated_logits
from bertfit.inference.predictor import load_classifier
from bertfit.inference.run import evaluate, predict
from bertfit.runs.run_dir import RunDir
from bertfit.training.run import train
from bertfit.training.setup import load_checkpoint, make_trainer
from bertfit.training.xla import XlaChoice
from tests.conftest import BUCKETS
from tests.tiny import sentiment_rows, write_csv


def test_run_directory_holds_config_labels_encoder_checkpoints_and_metrics(trained_run):
    config, result = trained_run
    run = result.run_dir
    for name in (
        "config.yaml",
        "labels.json",
        "encoder/config.json",
        "encoder/tokenizer/vocab.txt",
        "metrics.json",
        "steps.jsonl",
        "train.log",
    ):
        assert Path(run, name).exists(), name
    last_step = RunDir(run).read_steps()[-1]["global_step"]
    (latest,) = Path(run, "checkpoints", "latest").iterdir()  # one file, named by its step
    assert latest.name == f"ckpt-{last_step}.safetensors"
    (best,) = Path(run, "checkpoints", "best").iterdir()
    assert re.fullmatch(r"ckpt-\d+\.safetensors", best.name)
    metrics = json.loads(open(f"{run}/metrics.json").read())
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3]
    for key in ("loss", "accuracy", "macro_f1", "num_examples", "examples_per_second"):
        assert key in metrics["final"]
    # the run decides: the checkpoint declares no pooling; no --few-shot, so raw features
    decided = dataclasses.replace(config.model, pooling="cls", normalize_features=False)
    assert RunConfig.load(f"{run}/config.yaml") == dataclasses.replace(config, model=decided)


def test_the_model_takes_over_the_checkpoints_weights(trained_run):
    # The run keeps its model; the checkpoint's arrays go (MiniLM's are 87 MiB).
    config = RunDir(trained_run[1].run_dir).load_config()  # the pooling decided
    checkpoint = load_checkpoint(config)
    (name,) = [n for n in checkpoint.tensors if n.endswith("word_embeddings.weight")]
    word_embeddings = checkpoint.tensors[name].copy()
    task = RunDir(config.output_dir).load_task()
    strategy = tf.distribute.get_strategy()
    xla = XlaChoice.for_run(None, strategy)
    trainer = make_trainer(checkpoint, task, config, strategy, total_steps=1, xla=xla)
    assert checkpoint.tensors == {}
    np.testing.assert_array_equal(
        trainer.model.encoder.embeddings.word_embeddings.embeddings.numpy(), word_embeddings
    )


def test_learns_a_separable_task(trained_run):
    _, result = trained_run
    assert result.final["accuracy"] >= 0.9
    assert result.epochs[-1].train_loss < result.epochs[0].train_loss


def test_the_time_split_accounts_for_the_run_once(trained_run):
    _, result = trained_run
    split = result.time
    parts = {k: v for k, v in split.items() if k not in ("other", "wall")}
    assert set(parts) == {"load", "tokenize", "build", "trace", "train", "eval", "save"}
    assert all(v >= 0 for v in split.values())
    assert parts["build"] > 0 and parts["save"] > 0  # 3 epochs: a latest and a best each
    # nothing counted twice: the named phases fit in the wall time, the rest is what is left
    assert sum(parts.values()) <= split["wall"] * 1.01
    assert split["other"] == pytest.approx(split["wall"] - sum(parts.values()), abs=1e-6)


def _buckets_used(config, run_dir) -> int:
    tokenizer = RunDir(run_dir).load_tokenizer()
    examples = read_examples(config.data.train)
    lengths = encode_labelled("", examples, config, tokenizer, None).encoded.packed_lengths
    return len(set(bucket_of(lengths, BUCKETS)))


def test_without_xla_one_trace_serves_every_bucket(trained_run):
    # on a CPU the default compiles the step with TensorFlow's kernels: batches are padded to
    # their longest row and share one shape [batch, None]
    config, result = trained_run
    assert _buckets_used(config, result.run_dir) == 2
    assert result.trace_counts == {"train_step": 1, "predict_step": 1}


@pytest.fixture(scope="module")
def xla_run(trained_run, tmp_path_factory):
    """`trained_run`'s data for one epoch, its step compiled with XLA (no evaluation)."""
    config, _ = trained_run
    xla = dataclasses.replace(
        config,
        output_dir=str(tmp_path_factory.mktemp("xla") / "run"),
        data=dataclasses.replace(config.data, eval=None),
        train=dataclasses.replace(config.train, epochs=1, jit_compile=True),
    )
    return xla, train(xla, quiet=True)


def test_with_xla_the_step_is_traced_once_per_bucket_used(xla_run):
    config, result = xla_run
    assert result.trace_counts["train_step"] == _buckets_used(config, result.run_dir) == 2


@pytest.mark.parametrize("gap, saves_each", [(60.0, 1), (0.0, 3)])
def test_short_epochs_without_evaluation_save_once_a_gap_and_at_the_end(
    trained_run, tmp_path, monkeypatch, gap, saves_each
):
    """An epoch's end saves `latest` and `best` when the last save is EPOCH_SAVE_GAP_SECONDS
    old (a small set's 30 epochs of two steps spent more time saving than training), and the
    run's last epoch always; an evaluation saves every epoch as before (`trained_run`)."""
    import bertfit.training.checkpointing as checkpointing
    import bertfit.training.run as run_module

    config, _ = trained_run
    saves, save = [], checkpointing.save_checkpoint

    def counted(directory, step, *args, **kwargs):
        saves.append((Path(directory).name, step))
        return save(directory, step, *args, **kwargs)

    monkeypatch.setattr(checkpointing, "save_checkpoint", counted)
    monkeypatch.setattr(run_module, "EPOCH_SAVE_GAP_SECONDS", gap)
    run = dataclasses.replace(
        config,
        output_dir=str(tmp_path / "run"),
        data=dataclasses.replace(config.data, eval=None),
        train=dataclasses.replace(config.train, epochs=3),
    )
    result = train(run, quiet=True)
    assert len(result.epochs) == 3
    steps_file = Path(result.run_dir) / "steps.jsonl"
    last_step = json.loads(steps_file.read_text().splitlines()[-1])["global_step"]
    for name in ("latest", "best"):
        steps = [step for saved, step in saves if saved == name]
        assert len(steps) == saves_each and steps[-1] == last_step, (name, steps)


@pytest.mark.slow
def test_remat_trains_as_without_it_compiled_once_per_bucket(xla_run, tmp_path):
    """`--remat` under XLA: the same losses as the plain compiled step (dropout masks
    replayed in the recomputation), and still one compilation per bucket."""
    config, plain = xla_run
    run = dataclasses.replace(
        config,
        output_dir=str(tmp_path / "remat"),
        train=dataclasses.replace(config.train, remat=True),
    )
    result = train(run, quiet=True)
    assert result.trace_counts["train_step"] == _buckets_used(run, result.run_dir) == 2
    losses = [epoch.train_loss for epoch in result.epochs]
    assert losses == pytest.approx([epoch.train_loss for epoch in plain.epochs], rel=1e-5)


def _unbatched_probabilities(run_dir, rows):
    """Each row alone through the model, its logits divided by the run's temperatures (the
    calibration every output of a run carries)."""
    classifier = load_classifier(run_dir)
    module, model = classifier.module, classifier.module.model
    out = []
    for text, _ in rows:
        inputs = module.tokenizer([text], max_seq_length=16)
        logits = calibrated_logits(classifier.task, model(inputs, training=False)).numpy()[0]
        out.append(np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum())
    return np.array(out)


def test_evaluation_counts_every_row_and_equals_an_unbatched_pass(trained_run):
    config, result = trained_run
    rows = sentiment_rows(37, seed=1)  # 37 rows, batch 8: the last batch is padded
    metrics = evaluate(result.run_dir, config.data.eval, quiet=True)
    assert metrics["num_examples"] == 37
    probabilities = _unbatched_probabilities(result.run_dir, rows)
    labels = np.array([r[1] == "pos" for r in rows], int)
    assert metrics["accuracy"] == pytest.approx(np.mean(probabilities.argmax(1) == labels))


def test_predict_keeps_row_order_and_count(trained_run, tmp_path):
    _, result = trained_run
    rows = sentiment_rows(29, seed=5)
    unlabelled = write_csv(tmp_path / "new.csv", [(t,) for t, _ in rows], header=("text",))
    predictions = predict(result.run_dir, str(unlabelled), quiet=True)
    assert len(predictions) == 29
    expected = _unbatched_probabilities(result.run_dir, rows)
    got = np.array([[p["probabilities"]["neg"], p["probabilities"]["pos"]] for p in predictions])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert [p["label"] for p in predictions] == [["neg", "pos"][i] for i in expected.argmax(1)]


def test_the_predictor_traces_once_whatever_the_batch_or_the_lengths(trained_run):
    _, result = trained_run
    classifier = load_classifier(result.run_dir, batch_size=8)
    rows = sentiment_rows(50, seed=8)
    for n in (1, 3, 8, 13, 50):
        texts = [t * (1 + i % 3) for i, (t, _) in enumerate(rows[:n])]
        assert classifier.predict_proba(texts).shape == (n, 2)
    assert classifier.module.classify_text.experimental_get_tracing_count() == 1
