"""The encoder and the classifier in the Keras idioms a TF Hub user writes: functional models,
Sequential-style stacks, subclassed models, int64 inputs, `.keras` files, `model.export`, and
`compile(jit_compile=True)` + `fit` under MirroredStrategy (in subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import bertfit
from tests.tiny import tiny_encoder, tiny_inputs

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("input_word_ids", "input_mask", "input_type_ids")


def _functional(encoder, dtype="int32"):
    inputs = {name: keras.Input((None,), dtype=dtype, name=name) for name in NAMES}
    pooled = encoder(inputs)["pooled_output"]
    return keras.Model(inputs, keras.layers.Dense(2)(pooled))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_encoder_in_a_functional_model_takes_int32_or_int64_keras_tensors(dtype):
    encoder = tiny_encoder()
    model = _functional(encoder, dtype)
    inputs = tiny_inputs()
    fed = {k: tf.cast(v, dtype) for k, v in inputs.items()}
    expected = model.layers[-1](encoder(inputs)["pooled_output"])
    np.testing.assert_allclose(model(fed).numpy(), expected.numpy(), atol=1e-6)


def test_subclassed_and_sequential_style_models_wrap_the_encoder():
    encoder = tiny_encoder()

    class Tagger(keras.Model):
        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.head = keras.layers.Dense(3)

        def call(self, inputs):
            return self.head(self.encoder(inputs)["sequence_output"])

    inputs = tiny_inputs()
    assert Tagger()(inputs).shape == (*inputs["input_word_ids"].shape, 3)
    # Sequential-style: a stack of layers, the classifier's output feeding a Dense
    stack = keras.Sequential([bertfit.BertClassifier(encoder, 4), keras.layers.Softmax()])
    probabilities = stack(inputs).numpy()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_classifier_round_trips_through_a_keras_file(tmp_path):
    classifier = bertfit.BertClassifier(tiny_encoder(), 3, pooling="mean", dropout=0.0)
    inputs = tiny_inputs()
    before = classifier(inputs).numpy()
    classifier.save(tmp_path / "clf.keras")
    loaded = keras.models.load_model(tmp_path / "clf.keras")
    assert isinstance(loaded, bertfit.BertClassifier) and loaded.pooling == "mean"
    np.testing.assert_allclose(loaded(inputs).numpy(), before, atol=1e-6)
    functional = _functional(tiny_encoder())
    functional.save(tmp_path / "functional.keras")
    again = keras.models.load_model(tmp_path / "functional.keras")
    np.testing.assert_allclose(again(inputs).numpy(), functional(inputs).numpy(), atol=1e-6)


def test_classifier_exports_a_serving_savedmodel_with_int32_ids(tmp_path):
    classifier = bertfit.BertClassifier(tiny_encoder(), 2, dropout=0.0)
    inputs = tiny_inputs()
    expected = classifier(inputs).numpy()
    classifier.export(str(tmp_path / "export"), verbose=False)
    served = tf.saved_model.load(str(tmp_path / "export"))
    np.testing.assert_allclose(served.serve(inputs).numpy(), expected, atol=1e-5)


@pytest.mark.distributed
def test_functional_fit_with_jit_under_mirrored_equals_one_device(one_layer_hf_dir, tmp_path):
    """tests/distributed/keras_fit.py: compile(jit_compile=True), fit, evaluate and predict on
    a plain tf.data pipeline of raw strings, once on one CPU and then over two replicas, in one
    process of its own (its CPUs are split before TensorFlow starts)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.distributed.keras_fit", one_layer_hf_dir, tmp_path, "1", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = {n: json.loads((tmp_path / f"result-{n}.json").read_text()) for n in (1, 2)}
    assert results[2]["replicas"] == 2
    np.testing.assert_allclose(results[2]["loss"], results[1]["loss"], atol=1e-4)
    assert results[1]["loss"][-1] < results[1]["loss"][0]
    assert results[2]["evaluation"]["accuracy"] == results[1]["evaluation"]["accuracy"]
    np.testing.assert_allclose(results[2]["predictions"], results[1]["predictions"], atol=1e-4)
    one, two = (np.load(tmp_path / f"weights-{n}.npz") for n in (1, 2))
    for name in one.files:
        np.testing.assert_allclose(two[name], one[name], atol=1e-4)


def test_a_functional_replica_jit_model_leaves_bert_classifier_a_subclassed_model():
    """Keras rewrites the bases of a Model subclass built functionally; BertClassifier must not
    inherit that (it once broke every later BertClassifier in the process)."""
    inputs = keras.Input((4,))
    bertfit.ReplicaJitModel(inputs, keras.layers.Dense(2)(inputs))
    assert bertfit.BertClassifier(tiny_encoder(), 2)(tiny_inputs()).shape == (3, 2)
