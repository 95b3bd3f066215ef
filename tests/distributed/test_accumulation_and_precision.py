"""Gradient accumulation, steps per execution and bf16, end to end on a tiny BERT.

These run in this process (one device, no collectives); the distributed ones run in
subprocesses."""

import dataclasses

import numpy as np
import pytest

from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data import training_data
from bertfit.training.run import train
from tests.conftest import BUCKETS
from tests.distributed import cluster
from tests.tiny import sentiment_rows, write_csv


@pytest.fixture(scope="module")
def base(tmp_path_factory, trainable_hf_dir):
    path = tmp_path_factory.mktemp("accum")
    return RunConfig(
        output_dir=str(path / "unused"),
        model=ModelConfig(name=str(trainable_hf_dir), max_seq_length=16, dropout=0.0),
        data=DataConfig(
            train=str(write_csv(path / "train.csv", sentiment_rows(96, seed=3))), buckets=BUCKETS
        ),
        train=TrainConfig(batch_size=8, epochs=2, learning_rate=1e-3, seed=0, strategy="default"),
    )


def _train(config: RunConfig, output, **train_settings):
    config = dataclasses.replace(
        config, output_dir=str(output), train=dataclasses.replace(config.train, **train_settings)
    )
    return train(config, quiet=True)


def test_grad_accum_4_of_batch_8_equals_batch_32(base, tmp_path):
    _train(base, tmp_path / "accum", batch_size=8, grad_accum=4)
    _train(base, tmp_path / "big", batch_size=32)
    np.testing.assert_allclose(
        cluster.step_losses(tmp_path / "accum"), cluster.step_losses(tmp_path / "big"), rtol=1e-5
    )
    assert len(cluster.step_losses(tmp_path / "big")) == 2 * 4  # 2 epochs; 96 rows in 2 buckets
    cluster.assert_same_weights(tmp_path / "accum", tmp_path / "big", atol=1e-5)


def test_steps_per_execution_8_equals_1(base, tmp_path, monkeypatch):
    result = _train(base, tmp_path / "spe8", steps_per_execution=8)
    # The plan groups steps in runs of 8 of one bucket; run the same plan one step per call.
    plan = training_data.plan_batches
    by_eights = lambda *a, **k: plan(*a, **{**k, "run_length": 8})  # noqa: E731
    monkeypatch.setattr(training_data, "plan_batches", by_eights)
    _train(base, tmp_path / "spe1", steps_per_execution=1)
    losses = cluster.step_losses(tmp_path / "spe8")
    assert len(losses) == 2 * 13  # every step's loss is still recorded
    np.testing.assert_allclose(losses, cluster.step_losses(tmp_path / "spe1"), rtol=1e-6)
    cluster.assert_same_weights(tmp_path / "spe8", tmp_path / "spe1", atol=1e-6)
    # without XLA one trace serves both buckets, whatever the run length
    assert result.trace_counts["train_step"] == 1


def test_bf16_trains_to_the_same_accuracy(trained_run, tmp_path):
    config, fp32 = trained_run
    bf16 = _train(
        dataclasses.replace(config, model=dataclasses.replace(config.model, precision="bf16")),
        tmp_path / "bf16",
    )
    assert fp32.final["accuracy"] >= 0.9
    assert bf16.final["accuracy"] == pytest.approx(fp32.final["accuracy"], abs=0.03)


@pytest.mark.slow
def test_minilm_bf16_forward_stays_close_to_fp32(minilm_dir):
    from bertfit.checkpoints.load import load_encoder

    texts = [
        "a gripping, beautifully acted film",
        "dull and far too long",
        "the plot twists keep coming, and none of them land",
    ]
    fp32, tokenizer = load_encoder(minilm_dir)
    bf16, _ = load_encoder(minilm_dir, dtype="mixed_bfloat16")
    inputs = tokenizer(texts, max_seq_length=32)
    assert all(v.dtype == "float32" for v in bf16.weights)  # master weights stay fp32
    a, b = (np.asarray(e(inputs)["sequence_output"], np.float32) for e in (fp32, bf16))
    mask = np.asarray(inputs["input_mask"], bool)
    drift = np.abs(a - b)[mask].max() / np.abs(a[mask]).max()
    assert drift <= 2e-2, f"bf16 drifts {drift:.3g} (relative to the largest activation)"
