"""A JAX child (`tests/jax_process.run_in_jax`) for test_jax_step.py: three train steps of a
small classifier compiled with `compiler_options` (oneDNN's products on an x86 CPU) and with
XLA's defaults, from the same weights and batch. Prints JSON: whether the compiled step calls
oneDNN, and the largest differences of the losses and of the weights after the steps."""

from __future__ import annotations

import json
import os

import jax
import numpy as np

from bench.jax_step import Shape, classifier_step
from bertfit.jax_devices import ONEDNN_SWITCH, compiler_options

SHAPE = Shape("small", layers=2, hidden=64, heads=4, intermediate=128, vocab=200)
STEPS = 3


def trained(options: dict | None) -> tuple[str, list[float], list[np.ndarray]]:
    """The compiled step's HLO, the losses and the trained weights after STEPS steps."""
    step, batch = classifier_step(SHAPE, "fp32", batch=8, seq=32, total_steps=10)
    state, fixed = step._read_state(), step._read_fixed()
    compiled = jax.jit(step._step, compiler_options=options).lower(state, fixed, batch).compile()
    losses = []
    for _ in range(STEPS):
        state, result = compiled(state, fixed, batch)
        losses.append(float(result[0]))
    return compiled.as_text(), losses, [np.asarray(w) for w in state[0]]


def switched_off() -> dict | None:
    """`compiler_options` with `BERTFIT_JAX_ONEDNN=0`."""
    os.environ[ONEDNN_SWITCH] = "0"
    try:
        return compiler_options(jax.devices())
    finally:
        del os.environ[ONEDNN_SWITCH]


def main() -> None:
    onednn_text, onednn_losses, onednn_weights = trained(compiler_options(jax.devices()))
    plain_text, plain_losses, plain_weights = trained(None)
    print(
        json.dumps(
            {
                "options": compiler_options(jax.devices()),
                "onednn_calls": onednn_text.count("onednn"),
                "plain_onednn_calls": plain_text.count("onednn"),
                "loss_diff": float(np.max(np.abs(np.subtract(onednn_losses, plain_losses)))),
                "weight_diff": max(
                    float(np.max(np.abs(a - b)))
                    for a, b in zip(onednn_weights, plain_weights, strict=True)
                ),
                "losses": onednn_losses,
                "switched_off": switched_off(),
            }
        )
    )


if __name__ == "__main__":
    main()
