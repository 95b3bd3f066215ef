"""TensorFlow's kernels for `bertfit.model.layers`: layer normalisation, the exact and the tanh
GELU and inverted dropout, each with its gradient written out in closed form
(`tf.custom_gradient`), and leaner graphs than Keras' ops (`dynamic_shape`, `matmul_transposed`,
`take`).
`layers` calls them on the TensorFlow backend only; see its docstring for what they save there.
Every other backend runs the same formulas written in `keras.ops`, which these must equal.
"""

from __future__ import annotations

import math

import tensorflow as tf


def layer_norm(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float) -> tf.Tensor:
    """(x - mean) / sqrt(variance + epsilon) * gamma + beta over the last axis of `x`.

    Examples:
    >>> y = layer_norm(tf.constant([[1.0, 3.0]]), tf.ones([2]), tf.zeros([2]), 0.0)
    >>> y.numpy().tolist()
    [[-1.0, 1.0]]
    """
    outer_axes = list(range(x.shape.rank - 1))  # gamma's and beta's gradients sum over these

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        centered = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        inverse_std = tf.math.rsqrt(
            tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon
        )
        normalized = centered * inverse_std

        def gradient(upstream):
            d_normalized = upstream * gamma
            d_x = inverse_std * (
                d_normalized
                - tf.reduce_mean(d_normalized, axis=-1, keepdims=True)
                - normalized * tf.reduce_mean(d_normalized * normalized, axis=-1, keepdims=True)
            )
            d_gamma = tf.reduce_sum(upstream * normalized, axis=outer_axes)
            d_beta = tf.reduce_sum(upstream, axis=outer_axes)
            return d_x, d_gamma, d_beta

        return normalized * gamma + beta, gradient

    return normalize(x, gamma, beta)


def gelu(x: tf.Tensor) -> tf.Tensor:
    """x * Phi(x), Phi the standard normal CDF; its gradient Phi(x) + x * phi(x).

    Examples:
    >>> round(float(gelu(tf.constant(1.0))), 4)
    0.8413
    """

    @tf.custom_gradient
    def apply(x):
        cdf = 0.5 * (1.0 + tf.math.erf(x * (1 / math.sqrt(2))))

        def gradient(upstream):
            pdf = tf.exp(-0.5 * tf.square(x)) * (1 / math.sqrt(2 * math.pi))
            return upstream * (cdf + x * pdf)

        return x * cdf, gradient

    return apply(x)


def gelu_tanh(x: tf.Tensor) -> tf.Tensor:
    """GELU's tanh approximation, x * (1 + tanh(u)) / 2 with u = sqrt(2 / pi) * (x + 0.044715
    x^3) (Google's BERT, ALBERT, Hugging Face's "gelu_new"); its gradient written out.

    Examples:
    >>> round(float(gelu_tanh(tf.constant(1.0))), 4)
    0.8412
    """
    c = math.sqrt(2 / math.pi)

    @tf.custom_gradient
    def apply(x):
        t = tf.tanh(c * (x + 0.044715 * x * x * x))
        half_x = 0.5 * x

        def gradient(upstream):
            du = c * (1.0 + 3 * 0.044715 * x * x)
            return upstream * (0.5 * (1.0 + t) + half_x * (1.0 - t * t) * du)

        return half_x * (1.0 + t), gradient

    return apply(x)


def masked(x: tf.Tensor, keep: tf.Tensor, scale: float) -> tf.Tensor:
    """`x * scale` where `keep`, 0 elsewhere (inverted dropout with a given mask).

    Examples:
    >>> masked(tf.constant([1.0, 2.0]), tf.constant([True, False]), 2.0).numpy().tolist()
    [2.0, 0.0]
    """
    scale = tf.constant(scale, x.dtype)
    zero = tf.constant(0, x.dtype)

    @tf.custom_gradient
    def apply(x):
        return tf.where(keep, x * scale, zero), lambda upstream: tf.where(
            keep, upstream * scale, zero
        )

    return apply(x)


def dynamic_shape(x: tf.Tensor) -> tf.Tensor:
    """`tf.shape(x)`: one graph node, however many sizes are unknown."""
    return tf.shape(x)


def take(x: tf.Tensor, indices: tf.Tensor, axis: int) -> tf.Tensor:
    """`tf.gather` of in-range `indices` along `axis`, with no fix for negative ones."""
    return tf.gather(x, indices, axis=axis)


def matmul_transposed(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """`tf.matmul(a, b, transpose_b=True)`: the transpose inside the product."""
    return tf.matmul(a, b, transpose_b=True)
