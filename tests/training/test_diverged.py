"""A loss that stops being a number stops the run: a message naming the step, the likely cause
and the fix, metrics.json saying "diverged", and a non-zero exit from the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.training.loop import Trainer
from bertfit.training.run import TrainingDiverged, train
from tests.tiny import sentiment_rows, write_csv


@pytest.fixture
def nan_on_the_second_step(monkeypatch):
    original = Trainer.run_plan

    def run_plan(self, data, ends=()):
        seen = 0
        for results in original(self, data, ends):
            out = []
            for loss, norm in results:
                seen += 1
                out.append((float("nan") if seen == 2 else loss, norm))
            yield out

    monkeypatch.setattr(Trainer, "run_plan", run_plan)


def test_a_nan_loss_stops_the_run_and_says_where(
    tmp_path, trainable_hf_dir, nan_on_the_second_step
):
    config = RunConfig(
        output_dir=str(tmp_path / "run"),
        model=ModelConfig(name=str(trainable_hf_dir), max_seq_length=16, dropout=0.0),
        data=DataConfig(
            train=str(write_csv(tmp_path / "train.csv", sentiment_rows(32))), buckets=[16]
        ),
        train=TrainConfig(batch_size=8, epochs=2, seed=0, strategy="default", jit_compile=False),
    )
    with pytest.raises(TrainingDiverged, match=r"loss became nan at epoch 1, step 2 \(global"):
        train(config, quiet=True)
    run = Path(config.output_dir)
    assert json.loads((run / "metrics.json").read_text())["status"] == "diverged"
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    assert not (run / ".lock").exists()
