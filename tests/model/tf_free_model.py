"""The child process of `test_without_tensorflow.py`: run under `tests.without_tensorflow` with
`KERAS_BACKEND=jax`, it imports every module of `bertfit.model`, builds LoRA'd classifiers (BERT's
and ModernBERT's adapter targets; the single- and multi-label losses) from configs with random
weights, runs a forward pass and a `jax.grad` of the loss, and prints one JSON line of what it
saw (finite outputs, the trained weights with a nonzero gradient, the modules loaded). Every
family's forward pass and gradients are compared with TensorFlow's, TensorFlow-free too, in
`test_backends.py`."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys

import jax
import keras
import numpy as np

import bertfit.model
from bertfit.config import MULTI_LABEL, SINGLE_LABEL
from bertfit.model.inputs import GLOBAL_EXAMPLES, LABEL, WEIGHT
from bertfit.model.lora import enable_lora
from bertfit.model.losses import batch_loss, outputs
from tests.model.test_backends import CONFIGS, _random_weights, build, windows

TARGETS = {
    SINGLE_LABEL: np.array([2, 0], "int32"),
    MULTI_LABEL: np.array([[1, 0, 1], [0, 1, 0]], "float32"),
}


def family_report(family: str, seed: int, kind: str) -> dict:
    """A LoRA'd chunked classifier of `family`: its outputs and its `kind` loss's gradients."""
    model = build(family)
    _random_weights(model, seed)
    enable_lora(model, rank=2, alpha=4, targets=("auto",), seed=seed)
    inputs = windows(CONFIGS[family])
    trainable = [v.value for v in model.trainable_variables]
    frozen = [v.value for v in model.non_trainable_variables]
    batch = {LABEL: TARGETS[kind], WEIGHT: np.ones(2, "float32"), GLOBAL_EXAMPLES: np.float32(2)}

    def loss(weights):
        logits, _ = model.stateless_call(weights, frozen, inputs, training=True)
        return batch_loss(kind, batch, logits)

    value, gradients = jax.value_and_grad(loss)(trainable)
    logits, _ = model.stateless_call(trainable, frozen, inputs, training=False)
    return {
        "task": kind,
        "loss": float(value),
        "finite": bool(np.isfinite(np.asarray(outputs(kind, logits))).all()),
        "trained": [v.path for v in model.trainable_variables],
        # LoRA's B starts at 0, so A's gradient is 0 at the first step: every other is not
        "nonzero_gradients": [
            v.path
            for v, g in zip(model.trainable_variables, gradients, strict=True)
            if np.abs(np.asarray(g)).max() > 0
        ],
    }


def main() -> None:
    assert keras.backend.backend() == "jax"
    modules = [m.name for m in pkgutil.iter_modules(bertfit.model.__path__)]
    tensorflow_only = {"tf_kernels", "tf_remat", "replica_jit", "tracking"}
    for name in sorted(set(modules) - tensorflow_only):
        importlib.import_module(f"bertfit.model.{name}")
    picked = {"bert": SINGLE_LABEL, "modernbert": MULTI_LABEL}  # q/v adapters; fused qkv
    report = {
        family: family_report(family, seed, kind)
        for seed, (family, kind) in enumerate(picked.items())
    }
    imported = {name.split(".")[0] for name, module in sys.modules.items() if module}
    loaded = sorted(imported & {"tensorflow", "tensorflow_text", "torch"})
    print(json.dumps({"families": report, "loaded": loaded, "modules": modules}))


if __name__ == "__main__":
    main()
