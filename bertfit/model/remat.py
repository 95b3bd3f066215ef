"""Rematerialisation (`--remat`): a layer's activations are recomputed in the backward pass
instead of being kept from the forward pass, so training keeps only each layer's input.

The one seam between the encoder and the backend's recomputation: `BertEncoder` calls
`call_rematerialised(layer, ...)` in place of `layer(...)`. On TensorFlow it is
`tf.recompute_grad` (`model/tf_remat.py`), on JAX `jax.checkpoint` (`model/jax_remat.py`), each
given by `model/backend.py`.

Dropout: a layer's dropout masks come from Keras seed generators whose state advances at every
draw, so a plain recomputation would draw new masks and compute the gradient of another
function. On TensorFlow the recomputation first winds the layer's seed states back to where the
forward pass found them, and afterwards forward again to where the forward pass left them; on
JAX the seed states are the checkpointed function's arguments, so its replay draws the same
masks. Either way: the same gradients, and the same random stream for the next step as without
remat.
"""

from __future__ import annotations

import keras

from bertfit.errors import ConfigError
from bertfit.model.backend import recompute_layer


def seed_states(layer: keras.layers.Layer) -> list[keras.Variable]:
    """The state variables of every seed generator in `layer` (its dropouts')."""
    states = []
    for sublayer in layer._flatten_layers(include_self=True):
        for generator in getattr(sublayer, "_seed_generators", ()):
            if all(generator.state is not s for s in states):
                states.append(generator.state)
    return states


def call_rematerialised(layer, x, attention_bias, *, training, cls_only, context):
    """`layer(x, attention_bias, training=, cls_only=, context=)` (the layer contract in
    `model/blocks.py`) with its activations recomputed in the backward pass. `context`'s
    tensors are passed as inputs, so their gradients (DeBERTa's relative table) still flow."""
    if recompute_layer is None:
        raise ConfigError(
            f"--remat recomputes layers on Keras' TensorFlow and JAX backends; this process runs "
            f"Keras on {keras.backend.backend()}: set KERAS_BACKEND to tensorflow or jax."
        )
    return recompute_layer(
        layer,
        seed_states(layer),
        x,
        attention_bias,
        training=training,
        cls_only=cls_only,
        context=context,
    )
