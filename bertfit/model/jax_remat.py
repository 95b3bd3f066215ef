"""`--remat` on Keras' JAX backend: `jax.checkpoint` around one encoder layer, the granularity
of TensorFlow's `tf.recompute_grad` (`model/tf_remat.py`; `model/remat.py` says what remat is).

Keras on JAX differentiates a model through `stateless_call`: the weights and the dropout seed
states are values in a `keras.StatelessScope`, and a dropout's draw records the advanced seed
state there. Inside `jax.checkpoint` that record would be a value of the checkpoint's own trace,
which must not escape it. So the layer's seed states enter the checkpointed function as
arguments and leave it as results, and are recorded in the scope outside it. The recomputation
replays the function's traced computation from the same arguments, so it draws the same dropout
masks without any winding back; the weights, read from the scope, are closed over, and their
gradients flow as if they were arguments. Imported only on JAX, through `model/backend.py`.

Memory: on a CPU it saves none. XLA:CPU (jaxlib 0.10) gives the step the same peak with or
without it: MiniLM-L6's shape at batch 16 x seq 512, XLA's plan 6.00 GiB against 6.11 and the
process's peak RSS 7.65 GiB against 7.47; a plain-JAX stack of 8 checkpointed layers shows the
same (1632 MiB of temporaries against 1408), so it is XLA:CPU's schedule, not this wiring. GPUs
schedule for memory: on an H200 (`python -m bench.jax_step --remat`, BERT-base, bf16, batch 32 x
seq 512) XLA's plan falls from 11.2 to 3.2 GiB, at 0.78x the steps/s.
"""

from __future__ import annotations

import jax
from keras.src.backend.common.stateless_scope import get_stateless_scope


def recompute_layer(layer, states, x, attention_bias, *, training, cls_only, context):
    """`layer(x, attention_bias, ...)` recomputed in the backward pass; `states` are the
    layer's seed-generator states (`remat.seed_states`). Outside a stateless scope (an eager
    call, which no JAX gradient sees) it is the plain call."""
    scope = get_stateless_scope()
    if scope is None:
        return layer(x, attention_bias, training=training, cls_only=cls_only, context=context)
    leaves, tree = jax.tree.flatten(context)
    arrays = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.Array)]
    before = [state.value for state in states]

    def forward(x, attention_bias, seeds, context_arrays):
        flat = list(leaves)
        for i, array in zip(arrays, context_arrays, strict=True):
            flat[i] = array
        for state, seed in zip(states, seeds, strict=True):
            scope.add_update((state, seed))
        outputs = layer(
            x,
            attention_bias,
            training=training,
            cls_only=cls_only,
            context=jax.tree.unflatten(tree, flat),
        )
        after = [scope.get_current_value(state) for state in states]
        for state, value in zip(states, before, strict=True):  # nothing of this trace stays
            scope.add_update((state, value))
        return outputs, after

    outputs, after = jax.checkpoint(forward)(x, attention_bias, before, [leaves[i] for i in arrays])
    for state, value in zip(states, after, strict=True):
        state.assign(value)
    return outputs
