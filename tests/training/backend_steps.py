"""50 training steps of a tiny run on this process's Keras backend, from given initial weights:
the same run's numbers on TensorFlow and on JAX (one or several devices) side by side.

    KERAS_BACKEND=jax python -m tests.training.backend_steps MODEL TRAIN INITIAL OUT [K [PREC]]

The first process to run (the test's own, on TensorFlow) writes the weights its trainer was
built with as a checkpoint in the folder INITIAL; every other restores them, so the steps start
from the same weights and take the same batches (the plan depends on the seed only). OUT (.npz)
gets the losses, the gradient norms, the trace counts and the weights after the last step. K:
micro-batches per step (--grad-accum, default 1); PREC: --precision (default fp32).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import keras
import numpy as np

from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.runs.checkpoint_files import latest_checkpoint, save_checkpoint
from bertfit.runs.weights import (
    checkpoint_variables,
    model_variables,
    restore_model,
    variable_values,
)
from bertfit.training.backends import backend_of
from bertfit.training.setup import prepare

STEPS = 50


def run_config(model: Path, train: Path, grad_accum: int = 1, precision: str = "fp32") -> RunConfig:
    """The tiny run: dropout off (dropout masks differ between backends), two buckets."""
    return RunConfig(
        model=ModelConfig(name=str(model), max_seq_length=16, dropout=0.0, precision=precision),
        data=DataConfig(train=str(train), buckets=[8, 16]),
        train=TrainConfig(
            batch_size=8,
            max_steps=STEPS,
            learning_rate=2e-3,
            seed=3,
            strategy="default",
            grad_accum=grad_accum,
            backend=keras.backend.backend(),
        ),
    )


def take_steps(config: RunConfig, initial: Path) -> dict[str, np.ndarray]:
    """The first `STEPS` steps of the run's first epoch (all of them in a shorter one), from
    the weights in `initial` (written there when it does not exist yet)."""
    strategy, xla = backend_of(config).placement(config)
    setup = prepare(config, strategy, xla)
    model = setup.trainer.model
    if latest_checkpoint(initial):
        restore_model(model, latest_checkpoint(initial))
    else:
        save_checkpoint(initial, 0, variable_values(checkpoint_variables(model)))
    batches = setup.batches(setup.train, shuffle=True, epoch=0, training=True)
    batches.plan = batches.plan[:STEPS]
    results = np.array([r for call in setup.trainer.run_plan(batches) for r in call])
    weights = {
        f"weight:{name}": np.asarray(keras.ops.convert_to_numpy(v.value))
        for name, v in model_variables(model).items()
    }
    return {
        "loss": results[:, 0],
        "grad_norm": results[:, 1],
        "trace_counts": np.array(json.dumps(setup.trainer.trace_counts())),
        **weights,
    }


def main() -> None:
    model, train, initial, out = map(Path, sys.argv[1:5])
    grad_accum = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    precision = sys.argv[6] if len(sys.argv) > 6 else "fp32"
    np.savez(out, **take_steps(run_config(model, train, grad_accum, precision), initial))


if __name__ == "__main__":
    main()
