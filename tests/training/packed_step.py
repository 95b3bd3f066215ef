"""The loss and the gradients of a run's first packed batch (`--packing`) and of the same
examples unpacked, on this process's Keras backend, through the run's own trainer:

    KERAS_BACKEND=jax python -m tests.training.packed_step MODEL TRAIN [train ARGS...]

prints, for each pooling, the largest differences as JSON (`compare`); given `bertfit train`'s
arguments after the two, it runs that too, in the same process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import keras
import numpy as np

from bertfit.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from bertfit.data.pipeline import Batch, BucketedInput
from bertfit.model.inputs import INDEX
from bertfit.training.backends import backend_of
from bertfit.training.setup import prepare

LENGTH = 32


def run_config(model: Path, train: Path, pooling: str = "cls") -> RunConfig:
    """A tiny packed run in float32, dropout off (each example computes as if alone only
    where no random mask differs)."""
    return RunConfig(
        model=ModelConfig(name=str(model), max_seq_length=LENGTH, dropout=0.0, pooling=pooling),
        data=DataConfig(train=str(train), buckets=[LENGTH], packing=True),
        train=TrainConfig(
            batch_size=16, epochs=1, seed=5, strategy="default", backend=keras.backend.backend()
        ),
    )


def _loss_and_gradients(trainer, batch: dict) -> tuple[float, list[np.ndarray]]:
    """The batch's loss and the trained variables' gradients, as the run's step takes them."""
    if keras.backend.backend() == "jax":
        gradients, loss = trainer.gradients({k: v for k, v in batch.items() if k != INDEX})
        return loss, gradients
    gradients, loss = trainer.replica_step(batch)
    return float(loss), [
        keras.ops.convert_to_numpy(keras.ops.convert_to_tensor(g)) for g in gradients
    ]


def compare(model: Path, train: Path, pooling: str = "cls") -> dict:
    """The first packed training batch against its examples in one unpacked batch: the
    largest loss and gradient differences, the examples, and the largest gradient."""
    config = run_config(model, train, pooling)
    strategy, xla = backend_of(config).placement(config)
    setup = prepare(config, strategy, xla)
    packed = setup.batches(setup.train, shuffle=True, training=True)
    _, together = next(iter(packed))
    examples = np.asarray(together[INDEX]).reshape(-1)
    examples = examples[examples >= 0]
    unpacked = BucketedInput(
        setup.train.encoded,
        setup.train.labels,
        [Batch(LENGTH, examples)],
        strategy,
        special_ids=setup.tokenizer.special_ids,
    )
    _, alone = next(iter(unpacked))
    results = [
        _loss_and_gradients(setup.trainer, {k: np.asarray(v) for k, v in batch.items()})
        for batch in (together, alone)
    ]
    (loss_packed, packed_grads), (loss_alone, alone_grads) = results
    differences = [
        float(np.abs(p - a).max()) for p, a in zip(packed_grads, alone_grads, strict=True)
    ]
    return {
        "examples": int(len(examples)),
        "rows": int(np.asarray(together[INDEX]).shape[0]),
        "loss": loss_alone,
        "loss_difference": abs(loss_packed - loss_alone),
        "gradient_difference": max(differences),
        "largest_gradient": max(float(np.abs(g).max()) for g in alone_grads),
        "gradients": len(differences),
    }


def main() -> None:
    """`MODEL TRAIN [train ARGS...]`: with arguments after the two, also runs `bertfit train
    ARGS` in this process (one JAX process for both checks); the comparison is printed last."""
    model, train = map(Path, sys.argv[1:3])
    compared = {pooling: compare(model, train, pooling) for pooling in ("cls", "mean")}
    if sys.argv[3:]:
        from bertfit.cli import main as cli

        assert cli(sys.argv[3:]) == 0
    print(json.dumps(compared))


if __name__ == "__main__":
    main()
