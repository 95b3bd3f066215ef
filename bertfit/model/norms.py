"""RMSNorm (Zhang and Sennrich, 2019), part of the family kit: the norm of Llama-style layers
(EuroBERT), x / sqrt(mean(x²) + epsilon) * gamma over the last axis, with no centring and no
bias. Computed in float32 whatever the compute dtype, as the kit's `layer_norm` is; its one
weight is named `gamma`, so `blocks.norm_variables` names it as a LayerNorm's.
"""

from __future__ import annotations

import keras
from keras import ops

from bertfit.model.config import BertConfig


class RMSNorm(keras.layers.Layer):
    """x / sqrt(mean(x²) + epsilon) * gamma over the last axis, in float32.

    Examples:
    >>> norm = RMSNorm(epsilon=0.0)
    >>> norm.build((None, 2)); [w.name for w in norm.weights], norm.beta
    (['gamma'], None)
    >>> normed = ops.convert_to_numpy(norm(ops.convert_to_tensor([[3.0, 4.0]])))
    >>> [round(float(value), 4) for value in normed[0]]  # (3, 4) / sqrt(12.5)
    [0.8485, 1.1314]
    """

    beta = None  # no bias: what `blocks.norm_variables` looks for

    def __init__(self, epsilon: float = 1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.gamma = self.add_weight(
            name="gamma", shape=(input_shape[-1],), initializer="ones", dtype=self.variable_dtype
        )
        self.built = True

    def call(self, x):
        x = ops.cast(x, "float32")
        normed = x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon)
        return ops.cast(normed * ops.cast(self.gamma, "float32"), self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


def rms_norm(config: BertConfig, name: str, dtype) -> RMSNorm:
    """An `RMSNorm` with the config's epsilon (`layer_norm_eps`)."""
    return RMSNorm(epsilon=config.layer_norm_eps, name=name, dtype=dtype)
