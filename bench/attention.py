"""One BERT-base layer's training step (forward and the gradients of its output's sum with
respect to its weights and input), its attention through Keras' fused `dot_product_attention`
against the written-out path (`bertfit.model.attention`), at 128 and 512 tokens, on this
process's Keras backend (`KERAS_BACKEND`).

    python -m bench.attention                    # both backends, each in a process of its own
    KERAS_BACKEND=jax python -m bench.attention --here

The layer is BERT-base's (hidden 768, 12 heads, feed-forward 3072), random weights, float32,
batch 1, attention dropout 0 (the fused op has none), an eighth of the tokens padding. On
TensorFlow a graph traced for the shape (what a CPU training step runs: no XLA); on JAX a
`jax.jit` of the step. Time: the median of `--repeats` calls after a warm-up call. Writes
bench/results/attention.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

RESULT_KEY = "ATTENTION-RESULT "
LENGTHS = (128, 512)


def _layer_and_inputs(length: int):
    import numpy as np
    from keras import ops

    from bertfit.model.blocks import TransformerLayer
    from bertfit.model.config import BertConfig

    config = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    layer = TransformerLayer(config)
    layer.build()
    rng = np.random.default_rng(0)
    rows = ops.convert_to_tensor(rng.normal(size=(length, config.hidden_size)), "float32")
    mask = np.zeros((1, 1, 1, length), np.float32)
    mask[..., -length // 8 :] = -1e9
    return layer, rows, ops.convert_to_tensor(mask)


def _step_on_tensorflow(layer, rows, bias):
    import tensorflow as tf

    def train(rows):
        with tf.GradientTape() as tape:
            tape.watch(rows)
            total = tf.reduce_sum(layer(rows, bias, training=True))
        return tape.gradient(total, [rows, *layer.trainable_variables])

    step = tf.function(train, autograph=False)
    return lambda: [t.numpy() for t in step(rows)]


def _step_on_jax(layer, rows, bias):
    import jax

    trainable = [v.value for v in layer.trainable_variables]
    frozen = [v.value for v in layer.non_trainable_variables]

    def total(trainable, rows):
        output, _ = layer.stateless_call(trainable, frozen, rows, bias, training=True)
        return output.sum()

    step = jax.jit(jax.grad(total, argnums=(0, 1)))
    return lambda: jax.block_until_ready(step(trainable, rows))


def measure(length: int, implementation: str, repeats: int) -> dict:
    import keras

    from bench.common import call_times

    layer, rows, bias = _layer_and_inputs(length)
    layer.attention.attention_implementation = implementation
    backend = keras.backend.backend()
    step = (_step_on_jax if backend == "jax" else _step_on_tensorflow)(layer, rows, bias)
    times = call_times(step, repeats)
    return {
        "backend": backend,
        "length": length,
        "implementation": implementation,
        "median_seconds": statistics.median(times),
        "seconds": times,
    }


def measure_here(repeats: int) -> list[dict]:
    return [
        measure(length, implementation, repeats)
        for length in LENGTHS
        for implementation in ("explicit", "fused", "explicit", "fused")  # A B A B
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--here", action="store_true", help="this process's backend only")
    args = parser.parse_args()
    if args.here:
        print(RESULT_KEY + json.dumps(measure_here(args.repeats)))
        return
    from bench.common import write_result

    root = Path(__file__).resolve().parent.parent
    rows, load = [], os.getloadavg()
    for backend in ("tensorflow", "jax"):
        env = {**os.environ, "PYTHONPATH": str(root), "KERAS_BACKEND": backend}
        command = [sys.executable, "-m", "bench.attention", "--here",
                   "--repeats", str(args.repeats)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, cwd=root, env=env)
        lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_KEY)]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"{backend} failed ({done.returncode}): {done.stderr[-2000:]}")
        rows += json.loads(lines[-1].removeprefix(RESULT_KEY))
    write_result(
        "attention",
        {"load_average_before": load, "load_average_after": os.getloadavg(), "rows": rows},
    )


if __name__ == "__main__":
    main()
