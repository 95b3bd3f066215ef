"""Keras' LayerNormalization and Dropout, and the exact GELU, with their gradients written out in
closed form.

TensorFlow differentiates Keras' versions op by op, and when the batch and sequence sizes are
known only at run time (one training graph for every length bucket) the gradient of each
broadcasting op carries shape arithmetic (`Shape`, `BroadcastGradientArgs`, `Sum`, `Reshape`):
a layer normalisation and its gradient are 110 graph nodes, 42 written out; a dropout 46 and
37 (most of them drawing the seed). For MiniLM's training step that is a third of the gradient
graph (3,156 -> 2,092 nodes), so every first step, export and check traces, optimises and
schedules less. The numbers are Keras': the same random masks, the same normalisation to
float32 rounding.

GELU's tanh approximation (`gelu_tanh`) has its gradient written out too: Keras' version is
differentiated op by op (an ALBERT training step at MiniLM's size 0.89x torch's with it, 1.2x
with this). The exact GELU is computed in the erf form Hugging Face uses,
x * (1 + erf(x / sqrt(2))) / 2; Keras' `gelu` computes x * erfc(-x / sqrt(2)) / 2, the same
function, whose Erfc kernel takes three times as long as Erf on a CPU (an inference step ~3%
faster with erf).

These kernels are backend-specific (`tf_kernels`, which the model's one seam, `model/backend.py`,
gives only when Keras runs on TensorFlow): what they save is TensorFlow graph nodes and shape
arithmetic. On JAX (or any other backend) the same formulas are written in `keras.ops` and the
backend differentiates them; no JAX kernel has been measured to pay for itself yet, and one
would go behind the same seam.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from bertfit.model.backend import TENSORFLOW, tf_kernels


def layer_norm(x, gamma, beta, epsilon: float):
    """(x - mean) / sqrt(variance + epsilon) * gamma + beta over the last axis of `x`.

    Examples:
    >>> y = layer_norm(ops.convert_to_tensor([[1.0, 3.0]]), ops.ones([2]), ops.zeros([2]), 0.0)
    >>> ops.convert_to_numpy(y).tolist()
    [[-1.0, 1.0]]
    """
    if TENSORFLOW:
        return tf_kernels.layer_norm(x, gamma, beta, epsilon)
    centered = x - ops.mean(x, axis=-1, keepdims=True)
    inverse_std = ops.rsqrt(ops.mean(ops.square(centered), axis=-1, keepdims=True) + epsilon)
    return centered * inverse_std * gamma + beta


def gelu(x):
    """x * Phi(x), Phi the standard normal CDF, in the erf form; its gradient Phi(x) + x * phi(x).

    Examples:
    >>> round(float(gelu(ops.convert_to_tensor(1.0))), 4)
    0.8413
    """
    if TENSORFLOW:
        return tf_kernels.gelu(x)
    return x * (0.5 * (1.0 + ops.erf(x * (1 / math.sqrt(2)))))


def gelu_tanh(x):
    """GELU's tanh approximation, x * (1 + tanh(u)) / 2 with u = sqrt(2 / pi) * (x + 0.044715
    x^3) (Google's BERT, ALBERT, Hugging Face's "gelu_new").

    Examples:
    >>> round(float(gelu_tanh(ops.convert_to_tensor(1.0))), 4)
    0.8412
    """
    if TENSORFLOW:
        return tf_kernels.gelu_tanh(x)
    t = ops.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x))
    return 0.5 * x * (1.0 + t)


def masked(x, keep, scale: float):
    """`x * scale` where `keep`, 0 elsewhere (inverted dropout with a given mask).

    Examples:
    >>> x = ops.convert_to_tensor([1.0, 2.0])
    >>> ops.convert_to_numpy(masked(x, ops.convert_to_tensor([True, False]), 2.0)).tolist()
    [2.0, 0.0]
    """
    if TENSORFLOW:
        return tf_kernels.masked(x, keep, scale)
    return ops.where(keep, x * ops.cast(scale, x.dtype), ops.zeros_like(x))


def dynamic_shape(x):
    """`x`'s shape where sizes may be known only at run time: on TensorFlow its `Shape` op (one
    graph node, sliced where used; Keras' `ops.shape` slices and packs every unknown size, ~200
    nodes more in MiniLM's training graph), elsewhere `ops.shape` (JAX's shapes are static)."""
    if TENSORFLOW:
        return tf_kernels.dynamic_shape(x)
    return ops.shape(x)


def matmul_transposed(a, b):
    """`a @ b^T` over the last two axes: on TensorFlow one `BatchMatMulV2` with `adj_y`
    (a separate transpose measured a MiniLM-shaped forward ~1.25x slower, 2-core CPU)."""
    if TENSORFLOW:
        return tf_kernels.matmul_transposed(a, b)
    return ops.matmul(a, ops.swapaxes(b, -1, -2))


def take(x, indices, axis: int):
    """`ops.take(x, indices, axis)` for indices known to be in range: on TensorFlow a bare
    `Gather` (Keras' adds a where-negative fix to every call, which XLA keeps: 48 more HLO
    instructions in DeBERTa-v3's training step at MiniLM's size)."""
    if TENSORFLOW:
        return tf_kernels.take(x, indices, axis)
    return ops.take(x, indices, axis=axis)


class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization(axis=-1)` (the same weights, names and float32
    computation under mixed precision) computed by `layer_norm`."""

    def call(self, inputs):
        # gamma and beta enter `layer_norm` as tensors: a custom gradient may not read variables.
        x = ops.cast(inputs, "float32")
        gamma = ops.cast(self.gamma, "float32")
        beta = ops.zeros_like(gamma) if self.beta is None else ops.cast(self.beta, "float32")
        return ops.cast(layer_norm(x, gamma, beta, self.epsilon), self.compute_dtype)


class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` drawing the same masks from the same seeds (Keras' dropout keeps
    an element where a stateless uniform draw is >= the rate), applied by `masked`."""

    def call(self, inputs, training=False):
        if not training or self.rate == 0 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        draw = keras.random.uniform(
            dynamic_shape(inputs), dtype=inputs.dtype, seed=self.seed_generator
        )
        keep = draw >= ops.cast(self.rate, inputs.dtype)
        return masked(inputs, keep, 1 / (1 - self.rate))
