"""`--remat` on Keras' TensorFlow backend: `tf.recompute_grad` around one encoder layer
(`model/remat.py` says what remat is and why the dropout masks are replayed).

`tf.recompute_grad` also works inside an XLA-compiled step: it makes the recomputation depend on
the incoming gradient, so XLA neither hoists it into the forward pass nor merges it with the
forward's copy. Imported only on TensorFlow, through `model/backend.py`.
"""

from __future__ import annotations

import tensorflow as tf


def recompute_layer(layer, states, x, attention_bias, *, training, cls_only, context):
    """`layer(x, attention_bias, ...)` recomputed in the backward pass; `states` are the
    layer's seed-generator states (`remat.seed_states`), wound back for the recomputation."""
    leaves = tf.nest.flatten(context)
    tensors = [i for i, leaf in enumerate(leaves) if tf.is_tensor(leaf)]
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
