"""The child process of `test_remat.py`'s JAX test: with `KERAS_BACKEND=jax` (TensorFlow blocked),
each family named on the command line builds a classifier with dropout that takes two jitted
gradient steps through `stateless_call` with and without `--remat`; one JSON line says how far
apart they are and how many `jax.checkpoint`s each step holds."""

from __future__ import annotations

import dataclasses
import json
import sys

import jax
import keras
import numpy as np

from bertfit.model.classifier import BertClassifier
from bertfit.model.encoder import BertEncoder
from tests.model.test_backends import CONFIGS, _random_weights, flat, windows


def steps(family: str, remat: bool, count: int = 2) -> dict:
    """`count` jitted steps' losses, gradients and seed states, and the step's checkpoints."""
    keras.utils.set_random_seed(0)  # the same dropout seeds with and without remat
    config = dataclasses.replace(
        CONFIGS[family], hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2
    )
    encoder = BertEncoder(config)
    encoder.remat = remat
    model = BertClassifier(encoder, 3, pooling="cls", dropout=0.0, seed=0)
    model.built = True
    _random_weights(model, seed=1)
    inputs = flat(windows(config))

    def loss(trainable, non_trainable):
        logits, non_trainable = model.stateless_call(
            trainable, non_trainable, inputs, training=True
        )
        return keras.ops.sum(keras.ops.square(logits)), non_trainable

    gradient = jax.value_and_grad(loss, has_aux=True)
    trainable = [v.value for v in model.trainable_variables]
    state = [v.value for v in model.non_trainable_variables]
    jaxpr = str(jax.make_jaxpr(gradient)(trainable, state))
    step = jax.jit(gradient)
    losses, gradients = [], []
    for _ in range(count):  # the second step: the next dropout masks
        (value, state), grads = step(trainable, state)
        losses.append(float(value))
        gradients.append([np.asarray(g) for g in grads])
    return {
        "losses": losses,
        "gradients": gradients,
        "states": [np.asarray(s) for s in state],
        "checkpoints": jaxpr.count("checkpoint[") + jaxpr.count("remat2["),
        "layers": config.num_hidden_layers,
    }


def compare(family: str) -> dict:
    plain, remat = steps(family, remat=False), steps(family, remat=True)
    gradient_error = max(
        float(np.max(np.abs(r - p)) / max(1.0, float(np.max(np.abs(p)))))
        for ps, rs in zip(plain["gradients"], remat["gradients"], strict=True)
        for p, r in zip(ps, rs, strict=True)
    )
    return {
        "losses": [plain["losses"], remat["losses"]],
        "gradient_error": gradient_error,
        "gradients": len(plain["gradients"][0]),
        "same_states": all(
            np.array_equal(p, r) for p, r in zip(plain["states"], remat["states"], strict=True)
        ),
        "states": len(plain["states"]),
        "checkpoints": [plain["checkpoints"], remat["checkpoints"]],
        "layers": plain["layers"],
    }


if __name__ == "__main__":
    assert keras.backend.backend() == "jax"
    print(json.dumps({family: compare(family) for family in sys.argv[1:]}))
