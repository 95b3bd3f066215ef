"""A TF Hub user's program with bertfit's encoder: a functional Keras model, raw strings through
the tokenizer in a plain `tf.data` pipeline, `compile(jit_compile=True)` + `fit` + `evaluate`
+ `predict`, under a strategy. Writes the final weights and history to OUT as .npz/.json.

Usage: python -m tests.distributed.keras_fit MODEL_DIR OUT REPLICAS [REPLICAS ...]
(REPLICAS 1: the default strategy on one CPU; N > 1: MirroredStrategy over N logical CPUs.)
Several counts train one after the other in this process, each its own model from the same seed:
list the one-device run first, so that a failed collective can only fail the run it is in.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
REPLICA_COUNTS = [int(n) for n in sys.argv[3:]]
if max(REPLICA_COUNTS) > 1:
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * max(REPLICA_COUNTS)
    )

import keras  # noqa: E402

import bertfit  # noqa: E402
from tests.tiny import sentiment_rows  # noqa: E402

SEQ = 16


def dataset(tokenizer, rows, batch: int) -> tf.data.Dataset:
    texts = tf.constant([t for t, _ in rows])
    labels = tf.constant([1 if label == "pos" else 0 for _, label in rows], tf.int32)
    return (
        tf.data.Dataset.from_tensor_slices((texts, labels))
        .batch(batch, drop_remainder=True)
        .map(lambda t, y: (tokenizer(t, max_seq_length=SEQ), y))
    )


def build(model_dir: str) -> keras.Model:
    encoder, _ = bertfit.load_encoder(model_dir)
    names = ("input_word_ids", "input_mask", "input_type_ids")
    inputs = {name: keras.Input((SEQ,), dtype="int32", name=name) for name in names}
    pooled = encoder(inputs)["pooled_output"]
    logits = keras.layers.Dense(2, kernel_initializer=keras.initializers.GlorotUniform(0))(pooled)
    return bertfit.ReplicaJitModel(inputs, logits)


def main(model_dir: str, out: Path, replicas: int) -> None:
    keras.utils.set_random_seed(0)
    _, tokenizer = bertfit.load_encoder(model_dir)
    strategy = (
        tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
        if replicas > 1
        else tf.distribute.get_strategy()
    )
    train = dataset(tokenizer, sentiment_rows(64, seed=3), 16)
    held_out = dataset(tokenizer, sentiment_rows(32, seed=4), 16)
    with strategy.scope():
        model = build(model_dir)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit_compile=True,
        )
    history = model.fit(train, epochs=3, verbose=0)
    evaluation = model.evaluate(held_out, verbose=0, return_dict=True)
    predictions = model.predict(held_out, verbose=0)
    np.savez(out / f"weights-{replicas}.npz", *[w.numpy() for w in model.weights])
    (out / f"result-{replicas}.json").write_text(
        json.dumps(
            {
                "loss": [float(v) for v in history.history["loss"]],
                "evaluation": {k: float(v) for k, v in evaluation.items()},
                "predictions": predictions.tolist(),
                "replicas": strategy.num_replicas_in_sync,
            }
        )
    )


if __name__ == "__main__":
    for count in REPLICA_COUNTS:
        main(sys.argv[1], Path(sys.argv[2]), count)
