"""A Keras model held by a `tf.Module` through `hold_keras_model` saves as a SavedModel that
TensorFlow's Session loader runs (the loader TF Serving uses), each weight stored once; held as a
plain attribute, Keras 3 writes weights that only `tf.saved_model.load` finds (issue 44)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from bertfit.model.tracking import hold_keras_model
from tests.export.loaders import run_in_session

X = np.arange(6, dtype=np.float32).reshape(2, 3)


def saved_dense(folder, hold: bool) -> keras.layers.Dense:
    """A `Dense` in a `tf.Module` with a `serving_default` signature, saved to `folder`."""
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    module = tf.Module()
    if hold:
        hold_keras_model(module, "layer", layer)
    else:
        module.layer = layer
    spec = tf.TensorSpec([None, 3], tf.float32, name="x")
    call = tf.function(lambda x: {"y": module.layer(x)}, input_signature=[spec])
    tf.saved_model.save(module, str(folder), signatures={"serving_default": call})
    return layer


def test_the_session_loader_runs_a_held_model_stored_once(tmp_path):
    layer = saved_dense(tmp_path, hold=True)
    got = run_in_session(tmp_path, {"serving_default": {"x": X}})["serving_default"]["y"]
    np.testing.assert_allclose(got, layer(X).numpy(), rtol=1e-6)
    stored = tf.train.list_variables(str(tmp_path / "variables" / "variables"))
    assert sorted(shape for _, shape in stored if shape) == [[2], [3, 2]]  # bias, kernel


def test_a_model_held_as_an_attribute_fails_the_session_loader(tmp_path):
    """Why `hold_keras_model` exists. If a Keras release fixes its export, this fails: then
    `hold_keras_model` can become a plain attribute again."""
    saved_dense(tmp_path, hold=False)
    with pytest.raises(tf.errors.FailedPreconditionError, match="Could not find variable"):
        run_in_session(tmp_path, {"serving_default": {"x": X}})
