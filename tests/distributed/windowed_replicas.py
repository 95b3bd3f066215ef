"""Trains windowed documents on one device, on 2 mirrored CPU replicas, and on 2 replicas
accumulating 2 micro-batches a step (the same global batch each), and prints each replica
run's step losses and its weights' largest difference from one device's, and the predictions
of one device and of 2 replicas, as JSON (predicting takes no micro-batches: the accumulating
run's would be the same code again). Run as a script: the logical devices must exist before
TensorFlow starts. A one-layer encoder, and chunk counts 1 and 2 only: each bucket traces a
step per run (~10 s on 2 cores over replicas). The run over 2 replicas without micro-batches
takes its training steps eagerly, untraced: where a document's windows go is the input's
doing, and that step traced is test_mirrored.py's."""

from __future__ import annotations

import dataclasses
import json
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
from tests.tiny import TINY_CONFIG, WORDS, tiny_encoder, write_vocab  # noqa: E402

RUNS = {"one": 1, "two": 1, "two-accumulating": 2}  # run: micro-batches a step
EAGER = {"two"}
PREDICT = {"one", "two"}  # predicting takes no micro-batches: "two-accumulating"'s is "two"'s
ONE_LAYER = dataclasses.replace(TINY_CONFIG, num_hidden_layers=1)  # windows: the input's doing


def main() -> None:
    tokenizer = BertTokenizer(write_vocab(Path(tempfile.mkdtemp())))
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 20))) for _ in range(21)]
    labels = np.asarray([("good" in t.split()) for t in texts], np.int32)
    spec = WindowSpec(max_seq_length=12, stride=2, max_chunks=2)
    documents = encode_documents(tokenizer, texts, spec)
    plan = plan_documents(documents, 4, shuffle=True, seed=1)
    special = tokenizer.special_ids
    # One MirroredStrategy for both replica runs: a second one's collectives would reuse
    # the first's instance keys for other shapes.
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    results = {}
    for name, grad_accum in RUNS.items():
        strategy = tf.distribute.get_strategy() if name == "one" else mirrored
        config = TrainConfig(
            batch_size=4 // grad_accum, grad_accum=grad_accum, learning_rate=1e-3,
            jit_compile=False,
        )  # fmt: skip

        def build():
            classifier = BertClassifier(tiny_encoder(ONE_LAYER), 2, "mean", dropout=0.0, seed=0)
            return ChunkedClassifier(classifier, "attention")

        trainer = Trainer(build, strategy, config, 10, frozen=("pooler",))
        training = WindowedInput(
            documents, labels, plan, strategy, special_ids=special, micro_batches=grad_accum
        )
        tf.config.run_functions_eagerly(name in EAGER)
        losses = [loss for step in trainer.run_plan(training) for loss, _ in step]
        tf.config.run_functions_eagerly(False)  # all_gather, which predicting needs, is traced
        results[name] = {
            "losses": losses,
            "weights": [v.numpy() for v in trainer.model.trainable_variables],
        }
        if name in PREDICT:
            predicting = WindowedInput(documents, None, plan, strategy, special_ids=special)
            results[name]["probabilities"] = trainer.predict(predicting, len(texts)).tolist()
    one = results.pop("one")
    replicas = {
        name: {
            "losses": run["losses"],
            "weight_difference": max(
                float(np.abs(a - b).max())
                for a, b in zip(one["weights"], run["weights"], strict=True)
            ),
            **({"probabilities": run["probabilities"]} if name in PREDICT else {}),
        }
        for name, run in results.items()
    }
    print(
        json.dumps(
            {
                "one": {"losses": one["losses"], "probabilities": one["probabilities"]},
                "replicas": replicas,
                "buckets": sorted({b.seq_length for b in plan}),
            }
        )
    )


if __name__ == "__main__":
    main()
