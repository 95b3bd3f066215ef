"""Where one training step of MiniLM-L6 goes on this machine: forward, forward + backward,
embedding-gradient densification, global-norm clipping and the AdamW update (Keras' and the
fused kernel's), each timed alone (graph mode and XLA; steady median, and the first call's
tracing and compiling), then the whole step as `bertfit train` runs it with XLA on, auto and
off.

    python -m bench.step_profile [--batch 32] [--seq 64] [--repeats 10]

Real MiniLM-L6 weights, random token ids, one device. Writes bench/results/step_profile.json.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf

from bench.common import write_result
from bertfit.model.inputs import GLOBAL_EXAMPLES, INDEX, LABEL, WEIGHT
from bertfit.tf_startup import start_tensorflow


def _timed(fn, repeats: int) -> tuple[float, float]:
    """Seconds of the first call (tracing, compiling, running), and the median of `repeats`
    calls after a second warm-up call."""
    times = []
    for _ in range(repeats + 2):
        start = time.perf_counter()
        out = fn()
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, out)
        times.append(time.perf_counter() - start)
    return times[0], float(np.median(times[2:]))


def _batch(batch: int, seq: int) -> dict:
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, (batch, seq)).astype("int32")
    ids[:, 0] = 101
    return {
        "input_word_ids": tf.constant(ids),
        "input_mask": tf.ones((batch, seq), tf.int32),
        "input_type_ids": tf.zeros((batch, seq), tf.int32),
        LABEL: tf.constant(rng.integers(0, 2, batch).astype("int32")),
        WEIGHT: tf.ones((batch,), tf.float32),
        GLOBAL_EXAMPLES: tf.constant(float(batch)),
    }


def _parts(batch: int, seq: int, repeats: int) -> dict:
    from bertfit.checkpoints.load import build_encoder, read_checkpoint
    from bertfit.checkpoints.registry import resolve
    from bertfit.config import TrainConfig
    from bertfit.model.classifier import BertClassifier
    from bertfit.model.losses import batch_loss
    from bertfit.training.fused_adamw import FusedAdamW
    from bertfit.training.optimizer import make_optimizer

    checkpoint = read_checkpoint(resolve("minilm-l6"))
    model = BertClassifier(build_encoder(checkpoint), 2, "cls", 0.1, seed=0)
    data = _batch(batch, seq)
    features = {k: data[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
    model(features)
    variables = model.trainable_variables
    optimizer = make_optimizer(TrainConfig(), 10_000)
    optimizer.build(variables)
    fused = FusedAdamW(optimizer, variables)

    def forward():
        return model(features, training=True)

    def gradients():
        with tf.GradientTape() as tape:
            loss = batch_loss("single-label", data, model(features, training=True))
        return tape.gradient(loss, variables)

    sparse = tf.function(gradients)()
    dense = [tf.convert_to_tensor(g) for g in sparse]

    def densify():
        return [tf.convert_to_tensor(g) for g in sparse]

    def clip():
        return tf.clip_by_global_norm(dense, 1.0)

    def update():
        optimizer.apply(dense, variables)
        return optimizer.iterations

    def fused_update():
        fused.apply(dense)
        return optimizer.iterations

    result = {}
    for name, fn in (
        ("forward", forward),
        ("forward_backward", gradients),
        ("densify_embedding_gradient", densify),
        ("clip_global_norm", clip),
        ("adamw_update", update),
        ("fused_adamw_update", fused_update),
    ):
        result[name] = {}
        for mode, jit in (("graph", False), ("xla", True)):
            if jit and name == "densify_embedding_gradient":
                continue
            first, steady = _timed(tf.function(fn, jit_compile=jit), repeats)
            result[name] |= {f"{mode}_ms": 1000 * steady, f"{mode}_first_call_s": first}
    return result


def _whole_step(batch: int, seq: int, repeats: int) -> dict:
    """The step as `Trainer` compiles it: XLA on (forward/backward and update compiled), auto
    (on this CPU: none) and off; each with its first call's seconds."""
    from bertfit.checkpoints.load import build_encoder, read_checkpoint
    from bertfit.checkpoints.registry import resolve
    from bertfit.config import TrainConfig
    from bertfit.model.classifier import BertClassifier
    from bertfit.training.loop import Trainer

    checkpoint = read_checkpoint(resolve("minilm-l6"))
    data = _batch(batch, seq)
    data[INDEX] = tf.range(batch)
    out = {}
    for name, jit in (("xla", True), ("auto", None), ("graph", False)):
        trainer = Trainer(
            lambda: BertClassifier(build_encoder(checkpoint), 2, "cls", 0.1, seed=0),
            tf.distribute.get_strategy(),
            TrainConfig(jit_compile=jit),
            10_000,
        )
        step = tf.function(lambda trainer=trainer: trainer._apply(data))
        first, steady = _timed(step, repeats)
        out[name] = {"ms": 1000 * steady, "first_call_s": first, "xla": trainer.xla.describe()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    start_tensorflow()  # the CLI's Grappler setting; TensorFlow is loaded already
    parts = _parts(args.batch, args.seq, args.repeats)
    whole = _whole_step(args.batch, args.seq, args.repeats)
    timings = ", ".join(
        f"{name} {v['graph_ms']:.0f}/{v.get('xla_ms', 0):.0f}" for name, v in parts.items()
    )
    updates = ", ".join(
        f"{name} {parts[name]['graph_first_call_s']:.1f}/{parts[name]['xla_first_call_s']:.1f} s"
        for name in ("adamw_update", "fused_adamw_update")
    )
    steps = ", ".join(
        f"{name} {w['ms']:.0f} ms (first call {w['first_call_s']:.1f} s; {w['xla']})"
        for name, w in whole.items()
    )
    rows = [
        f"| one train step, MiniLM-L6, batch {args.batch} x seq {args.seq}: {timings} ms "
        f"(graph/XLA); first call {updates} (graph/XLA) | whole step: {steps} | - | - |"
    ]
    write_result(
        "step_profile",
        {
            "settings": vars(args),
            "parts_ms": parts,
            "whole_step_ms": whole,
            "threads": {
                "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
            },
            "table_rows": rows,
        },
    )


if __name__ == "__main__":
    main()
