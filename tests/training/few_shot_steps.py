"""`--few-shot`'s stage 1 on this process's Keras backend, dropout off: its record and the sum
of each encoder variable after it, as one JSON line, to hold the backends side by side.

    KERAS_BACKEND=jax python -m tests.training.few_shot_steps MODEL TRAIN
"""

from __future__ import annotations

import json
import sys
import types

import numpy as np

from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.progress import Console
from bertfit.training.backends import backend_of
from bertfit.training.few_shot import train_on_pairs
from bertfit.training.setup import prepare


def stage_1(model: str, train: str, backend: str) -> dict:
    """8 steps: 4 passes over `train`'s 32 rows in batches of 16, every pair of a batch; on
    a CPU TensorFlow encodes a batch in 3 parts of like length, JAX whole (one shape)."""
    config = RunConfig(
        model=ModelConfig(name=model, max_seq_length=16, dropout=0.0),
        data=DataConfig(train=train),
        train=TrainConfig(
            few_shot=True, few_shot_epochs=4, batch_size=16, learning_rate=5e-4, backend=backend
        ),
    )
    config.validate()
    backend = backend_of(config)
    setup = prepare(config, *backend.placement(config))
    no_stop = types.SimpleNamespace(signal=None)
    record = train_on_pairs(setup, setup.few_shot, backend, Console(quiet=True), no_stop)
    encoder = setup.trainer.model.encoder.trainable_variables
    sums = [float(np.abs(np.asarray(v.numpy(), np.float64)).sum()) for v in encoder]
    return {**record, "sums": sums}


if __name__ == "__main__":
    print(json.dumps(stage_1(sys.argv[1], sys.argv[2], "jax")))
