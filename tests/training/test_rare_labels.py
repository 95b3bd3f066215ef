"""Issue 36: a multi-label head starts at the training labels' log-odds (`--head-bias prior`),
the decision threshold is tuned on `--eval` by default, and a collapse warning says what to rerun
with."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data.tasks import Task
from bertfit.errors import ConfigError
from bertfit.model.classifier import prior_log_odds
from bertfit.runs.calibration import Calibration, label_thresholds
from bertfit.training.collapse import collapse_warning
from bertfit.training.run import train
from bertfit.training.setup import head_bias, prepare
from bertfit.training.xla import XlaChoice
from tests.conftest import BUCKETS
from tests.tiny import tagged_rows, write_jsonl


def test_prior_log_odds_is_each_labels_training_log_odds_clipped():
    targets = np.zeros((1000, 3), np.float32)
    targets[:50, 0] = 1  # 5%
    targets[:500, 1] = 1  # 50%
    got = prior_log_odds(targets)
    assert got[0] == pytest.approx(np.log(0.05 / 0.95))
    assert got[1] == pytest.approx(0.0)
    assert got[2] == pytest.approx(np.log(1e-3 / (1 - 1e-3)))  # never seen: clipped, finite


def test_the_defaults_are_a_prior_head_bias_and_a_tuned_threshold():
    config = RunConfig()
    assert config.model.head_bias == "prior" and config.train.tune_threshold is True


def _config(tmp_path, model, rows) -> RunConfig:
    return RunConfig(
        output_dir=str(tmp_path / "run"),
        model=ModelConfig(name=str(model), max_seq_length=16, dropout=0.0),
        data=DataConfig(train=str(write_jsonl(tmp_path / "train.jsonl", rows)), buckets=BUCKETS),
        train=TrainConfig(batch_size=8, epochs=1, seed=0, strategy="default"),
    )


def _head_bias(config: RunConfig) -> tuple[np.ndarray, np.ndarray]:
    strategy = tf.distribute.get_strategy()
    setup = prepare(config, strategy, XlaChoice.for_run(None, strategy))
    return setup.trainer.model.head.bias.numpy(), setup.train.labels


def test_a_multi_label_head_starts_at_the_training_priors(trainable_hf_dir, tmp_path):
    bias, labels = _head_bias(_config(tmp_path, trainable_hf_dir, tagged_rows(80, 1)))
    assert labels.shape == (80, 3) and bias.any()
    np.testing.assert_allclose(bias, prior_log_odds(labels), rtol=1e-6)


def test_head_bias_zero_single_label_and_streamed_sets_start_at_zero():
    multi, single = Task("multi-label", ("a", "b")), Task("single-label", ("a", "b"))
    rows = SimpleNamespace(labels=np.array([[1, 0], [0, 0], [0, 0], [0, 1]], np.float32))
    assert head_bias(RunConfig(), multi, rows) == pytest.approx([np.log(1 / 3)] * 2)
    zero = RunConfig(model=ModelConfig(head_bias="zero"))
    assert head_bias(zero, multi, rows) is None
    assert head_bias(RunConfig(), single, SimpleNamespace(labels=np.array([0, 1]))) is None
    assert head_bias(RunConfig(), multi, SimpleNamespace()) is None  # streamed: no labels


def test_head_bias_is_validated():
    with pytest.raises(ConfigError, match="--head-bias"):
        RunConfig(model=ModelConfig(head_bias="mean")).validate()


@pytest.mark.slow
def test_a_multi_label_run_with_eval_tunes_and_saves_its_threshold(trainable_hf_dir, tmp_path):
    # One rare label (1 row in 8) and one short epoch: the probabilities stay near the prior,
    # so no row reaches 0.5 and the label's F1-best threshold is well below it.
    rows = [
        (f"the film was {'plot' if i % 8 == 0 else 'fine'}", ["plot"] * (i % 8 == 0))
        for i in range(48)
    ]
    config = _config(tmp_path, trainable_hf_dir, rows)
    config.data.eval = str(write_jsonl(tmp_path / "dev.jsonl", rows[:24]))
    run = Path(train(config, quiet=True).run_dir)
    final = json.loads((run / "metrics.json").read_text())["final"]
    outputs = np.load(run / "eval_outputs.npz")
    tuned = label_thresholds(outputs["targets"], outputs["outputs"])
    assert final["thresholds"] == {"plot": tuned[0]} and tuned[0] < 0.5
    best = np.load(run / "best_eval_outputs.npz")  # one epoch: the best is the last
    np.testing.assert_array_equal(best["outputs"], outputs["outputs"])
    calibration = Calibration.load(run / "calibration.json")
    assert Task.load(run / "labels.json").thresholds == calibration.thresholds
    assert calibration.thresholds[0] < 0.5


def test_the_collapse_warning_gives_the_flags_to_rerun_with():
    task = Task("single-label", ("fresh", "rotten", "acting"))
    targets = np.array([0] * 6 + [1] * 3 + [2])
    collapsed = np.tile([0.8, 0.15, 0.05], (10, 1))  # everything 'fresh'
    plain = collapse_warning(task, targets, collapsed, TrainConfig())
    assert "'fresh' takes 10 of the 10 predictions (100%)" in plain
    assert "Rerun with --class-weights balanced" in plain
    weighted = collapse_warning(
        task, targets, collapsed, TrainConfig(epochs=3, class_weights="balanced")
    )
    assert "--epochs 6 --learning-rate 0.0001" in weighted
    spread = np.eye(3)[[0, 0, 0, 0, 0, 0, 1, 1, 1, 2]]
    assert collapse_warning(task, targets, spread, TrainConfig()) is None


def test_a_collapse_with_one_row_elsewhere_says_its_counts_not_100_percent():
    """499 of 500 rows on one class: the warning said "predicts 2 of the 2 classes ... takes
    100% of the predictions", which contradicts itself."""
    task = Task("single-label", ("0", "1"))
    targets = np.array([0] * 239 + [1] * 261)
    outputs = np.tile([0.3, 0.7], (500, 1))
    outputs[0] = [0.6, 0.4]
    warning = collapse_warning(task, targets, outputs, TrainConfig(epochs=1))
    assert warning.startswith(
        "the model's predictions collapse onto one class: '1' takes 499 of the 500 predictions "
        "(99.8%) but is 261 of the 500 gold labels (52%)"
    )
    assert "100%" not in warning and "--pooling" not in warning


def test_a_collapse_of_a_run_pooled_with_an_untrained_pooler_advises_mean_pooling():
    task = Task("single-label", ("0", "1"))
    targets = np.array([0] * 239 + [1] * 261)
    why = "the checkpoint's 1_Pooling/config.json declares mean_tokens pooling"
    warning = collapse_warning(
        task, targets, np.tile([0.3, 0.7], (500, 1)), TrainConfig(epochs=1), None, why
    )
    assert (
        f"It pooled with --pooling cls, but {why}: rerun with --pooling mean first, and if it "
        "still collapses, rerun with --epochs 2 --learning-rate 0.0001."
    ) in warning
    assert "under-trained" not in warning


def test_a_collapse_on_near_balanced_labels_is_called_under_training_not_imbalance():
    """A short run on a 58/42 split that predicts one class has nothing to re-weigh: it has
    not learned yet. The advice is to train longer and faster; with a rare class in the
    training labels (which the run passes) it stays the class weights."""
    task = Task("single-label", ("pos", "neg"))
    evaluation = np.array([0] * 29 + [1] * 21)  # 58% / 42%
    one_class = np.tile([0.6, 0.4], (50, 1))
    short = TrainConfig(epochs=1, learning_rate=2e-5)
    warning = collapse_warning(task, evaluation, one_class, short, np.array([0] * 58 + [1] * 42))
    assert "near-balanced (the rarest, 'neg', is 42% of them)" in warning
    assert "under-trained" in warning and "Rerun with --epochs 2 --learning-rate 4e-05" in warning
    assert "--class-weights" not in warning and "majority class" not in warning
    assert "--max-steps 200 " in collapse_warning(
        task, evaluation, one_class, TrainConfig(max_steps=100)
    )

    rare_in_training = np.array([0] * 90 + [1] * 10)
    skewed = collapse_warning(task, evaluation, one_class, short, rare_in_training)
    assert "collapsed onto the majority class ('neg' is 10% of the training labels" in skewed
    assert "Rerun with --class-weights balanced" in skewed
