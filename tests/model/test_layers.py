import keras
import numpy as np
import pytest
import tensorflow as tf

from bertfit.model.layers import Dropout, LayerNorm, gelu

UNKNOWN_ROWS = tf.TensorSpec([None, 16], tf.float32)  # sizes known only at run time


def _values_and_gradients(layer, x, **call):
    """The layer's output and the gradients of a weighted sum of it with respect to its input
    and its weights."""
    weights = tf.random.stateless_normal(x.shape, seed=[1, 2])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, **call)
        loss = tf.reduce_sum(y * weights)
    return y, tape.gradient(loss, [x, *layer.trainable_variables])


def _gradient_graph(layer, **call):
    """The gradient graph of `layer` on inputs of unknown batch size."""

    @tf.function(autograph=False)
    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, **call)
        return tape.gradient(y, x)

    return gradient.get_concrete_function(UNKNOWN_ROWS).graph


@pytest.mark.parametrize("shape", [(6, 16), (2, 3, 16)])
def test_layer_norm_matches_keras_values_and_gradients(shape):
    x = tf.random.stateless_normal(shape, seed=[3, 4]) * 3.0 + 1.0
    ours, keras_norm = LayerNorm(epsilon=1e-12), keras.layers.LayerNormalization(epsilon=1e-12)
    for layer in (ours, keras_norm):
        layer.build(shape)
        layer.set_weights([np.linspace(0.5, 1.5, 16), np.linspace(-1, 1, 16)])
    y, gradients = _values_and_gradients(ours, x)
    expected_y, expected_gradients = _values_and_gradients(keras_norm, x)
    np.testing.assert_allclose(y, expected_y, atol=1e-5)
    for got, expected in zip(gradients, expected_gradients, strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_layer_norm_computes_in_float32_under_mixed_precision():
    layer = LayerNorm(dtype="mixed_bfloat16")
    y = layer(tf.random.stateless_normal([4, 16], seed=[5, 6]))
    assert y.dtype == tf.bfloat16
    assert layer.gamma.dtype == "float32"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dropout_draws_keras_masks_and_gradients_from_the_same_seed(dtype):
    x = tf.cast(tf.random.stateless_normal([8, 16], seed=[7, 8]) + 2.0, dtype)
    y, (gradient,) = _values_and_gradients(Dropout(0.3, seed=42), x, training=True)
    expected_y, (expected_gradient,) = _values_and_gradients(
        keras.layers.Dropout(0.3, seed=42), x, training=True
    )
    np.testing.assert_array_equal(y, expected_y)
    np.testing.assert_array_equal(gradient, expected_gradient)
    assert 0 < np.mean(y.numpy() == 0) < 1  # something was dropped, something kept


def test_dropout_is_the_identity_when_not_training():
    x = tf.ones([2, 16])
    assert Dropout(0.5)(x, training=False) is x


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gelu_matches_keras_exact_gelu_values_and_gradients(dtype):
    x = tf.cast(tf.linspace(-8.0, 8.0, 161), dtype)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours, expected = gelu(x), keras.activations.gelu(x, approximate=False)
    assert ours.dtype == expected.dtype == x.dtype
    tolerance = 1e-6 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(
        tf.cast(ours, tf.float32), tf.cast(expected, tf.float32), atol=tolerance, rtol=tolerance
    )
    np.testing.assert_allclose(
        tf.cast(tape.gradient(ours, x), tf.float32),
        tf.cast(tape.gradient(expected, x), tf.float32),
        atol=tolerance,
        rtol=tolerance,
    )


def test_gradients_carry_no_shape_arithmetic_for_unknown_sizes():
    # Keras' layer norm differentiates into 110 nodes here (ours 42), its dropout into 46
    # (ours 37, most of them drawing the seed); Keras' carry Shape/BroadcastGradientArgs/Sum/
    # Reshape for the unknown batch size.
    norm = LayerNorm()
    norm.build((None, 16))
    for graph in (_gradient_graph(norm), _gradient_graph(Dropout(0.1), training=True)):
        types = [op.type for op in graph.get_operations()]
        assert "BroadcastGradientArgs" not in types
        assert len(types) < 45
