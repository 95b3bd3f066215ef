"""Rematerialisation (`--remat`): a layer's activations are recomputed in the backward pass
instead of being kept from the forward pass, so training keeps only each layer's input.

The one seam between the encoder and the backend's recomputation: `BertEncoder` calls
`call_rematerialised(layer, ...)` in place of `layer(...)`. On TensorFlow it is
`tf.recompute_grad`, which also works inside an XLA-compiled step (it makes the recomputation
depend on the incoming gradient, so XLA neither hoists it into the forward pass nor merges it
with the forward's copy).

Dropout: a layer's dropout masks come from Keras seed generators whose state advances at every
draw, so a plain recomputation would draw new masks and compute the gradient of another
function. The recomputation here first winds the layer's seed states back to where the forward
pass found them, and afterwards forward again to where the forward pass left them: the same
masks, the same gradients, and the same random stream for the next step as without remat.
"""

from __future__ import annotations

import keras
import tensorflow as tf


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
    leaves = tf.nest.flatten(context)
    tensors = [i for i, leaf in enumerate(leaves) if tf.is_tensor(leaf)]
    states = seed_states(layer)
    before = [tf.identity(state.value) for state in states]
    calls = []

    def forward(x, attention_bias, *context_tensors):
        flat = list(leaves)
        for i, tensor in zip(tensors, context_tensors, strict=True):
            flat[i] = tensor
        kwargs = {
            "training": training,
            "cls_only": cls_only,
            "context": tf.nest.pack_sequence_as(context, flat),
        }
        if not calls:  # the forward pass
            calls.append(True)
            return layer(x, attention_bias, **kwargs)
        # the recomputation: replay the forward pass's dropout masks
        after = [tf.identity(state.value) for state in states]
        for state, value in zip(states, before, strict=True):
            state.assign(value)
        outputs = layer(x, attention_bias, **kwargs)
        with tf.control_dependencies([outputs]):
            for state, value in zip(states, after, strict=True):
                state.assign(value)
            return tf.identity(outputs)

    return tf.recompute_grad(forward)(x, attention_bias, *(leaves[i] for i in tensors))
