"""Trains and predicts windowed documents on one device and on 2 mirrored CPU replicas (the
same global batch), and prints both runs' step losses, weights' largest difference and
predictions as JSON. Run as a script: the logical devices must exist before TensorFlow starts."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

from bertfit.config import TrainConfig  # noqa: E402
from bertfit.data.windowed import WindowedInput, encode_documents, plan_documents  # noqa: E402
from bertfit.model.chunked import ChunkedClassifier  # noqa: E402
from bertfit.model.classifier import BertClassifier  # noqa: E402
from bertfit.text import BertTokenizer  # noqa: E402
from bertfit.text.windows import WindowSpec  # noqa: E402
from bertfit.training.loop import Trainer  # noqa: E402
from tests.tiny import WORDS, tiny_encoder, write_vocab  # noqa: E402


def main(grad_accum: int) -> None:
    tokenizer = BertTokenizer(write_vocab(Path(tempfile.mkdtemp())))
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 40))) for _ in range(21)]
    labels = np.asarray([("good" in t.split()) for t in texts], np.int32)
    spec = WindowSpec(max_seq_length=12, stride=2, max_chunks=4)
    documents = encode_documents(tokenizer, texts, spec)
    results = {}
    for name, strategy in (
        ("one", tf.distribute.get_strategy()),
        ("two", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])),
    ):
        config = TrainConfig(
            batch_size=4 // grad_accum, grad_accum=grad_accum, learning_rate=1e-3,
            jit_compile=False,
        )  # fmt: skip

        def build():
            classifier = BertClassifier(tiny_encoder(), 2, "mean", dropout=0.0, seed=0)
            return ChunkedClassifier(classifier, "attention")

        trainer = Trainer(build, strategy, config, 10, frozen=("pooler",))
        plan = plan_documents(documents, 4, shuffle=True, seed=1)
        special = tokenizer.special_ids
        training = WindowedInput(
            documents, labels, plan, strategy, special_ids=special, micro_batches=grad_accum
        )
        losses = [loss for step in trainer.run_plan(training) for loss, _ in step]
        predicting = WindowedInput(documents, None, plan, strategy, special_ids=special)
        results[name] = {
            "losses": losses,
            "weights": [v.numpy() for v in trainer.model.trainable_variables],
            "probabilities": trainer.predict(predicting, len(texts)).tolist(),
            "buckets": sorted({b.seq_length for b in plan}),
        }
    one, two = results["one"], results["two"]
    difference = max(
        float(np.abs(a - b).max()) for a, b in zip(one["weights"], two["weights"], strict=True)
    )
    print(
        json.dumps(
            {
                "losses": [one["losses"], two["losses"]],
                "weight_difference": difference,
                "probabilities": [one["probabilities"], two["probabilities"]],
                "buckets": one["buckets"],
            }
        )
    )


if __name__ == "__main__":
    main(int(sys.argv[1]))
