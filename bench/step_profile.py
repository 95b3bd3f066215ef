"""Where one training step of MiniLM-L6 goes on this machine: forward, forward + backward,
embedding-gradient densification, global-norm clipping and the AdamW update, each timed alone
(graph mode and XLA), then the whole step as `bertfit train` runs it with XLA on, auto and off.

    python -m bench.step_profile [--batch 32] [--seq 64] [--repeats 10]

Real MiniLM-L6 weights, random token ids, one device. Writes bench/results/step_profile.json.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf

from bench.common import write_result
from bertfit.data.pipeline import GLOBAL_EXAMPLES, INDEX, LABEL, WEIGHT


def _timed(fn, repeats: int) -> float:
    """Median seconds of `repeats` calls after two warm-up calls (tracing/compiling)."""
    fn()
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, out)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


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
    from bertfit.training.losses import batch_loss
    from bertfit.training.optimizer import make_optimizer

    checkpoint = read_checkpoint(resolve("minilm-l6"))
    model = BertClassifier(build_encoder(checkpoint), 2, "cls", 0.1, seed=0)
    data = _batch(batch, seq)
    features = {k: data[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
    model(features)
    variables = model.trainable_variables
    optimizer = make_optimizer(TrainConfig(), 10_000)
    optimizer.build(variables)

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

    result = {}
    for name, fn in (
        ("forward", forward),
        ("forward_backward", gradients),
        ("densify_embedding_gradient", densify),
        ("clip_global_norm", clip),
        ("adamw_update", update),
    ):
        result[name] = {
            "graph_ms": 1000 * _timed(tf.function(fn), repeats),
            "xla_ms": 1000 * _timed(tf.function(fn, jit_compile=True), repeats)
            if name != "densify_embedding_gradient"
            else None,
        }
    return result


def _whole_step(batch: int, seq: int, repeats: int) -> dict:
    """The step as `Trainer` compiles it: XLA on (forward/backward and update compiled), auto
    (on this CPU: the update only) and off."""
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
        out[name] = 1000 * _timed(step, repeats)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    parts = _parts(args.batch, args.seq, args.repeats)
    whole = _whole_step(args.batch, args.seq, args.repeats)
    timings = ", ".join(
        f"{name} {v['graph_ms']:.0f}/{v['xla_ms'] or 0:.0f}" for name, v in parts.items()
    )
    rows = [
        f"| one train step, MiniLM-L6, batch {args.batch} x seq {args.seq}: {timings} ms "
        f"(graph/XLA) | whole step {whole['auto']:.0f} ms (default: XLA for the update), "
        f"{whole['xla']:.0f} ms (XLA on), {whole['graph']:.0f} ms (off) | - | - |"
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
