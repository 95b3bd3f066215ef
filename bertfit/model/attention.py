"""Scaled dot-product attention, part of the family kit: every family's attention computes
softmax(q k^T * scale + bias) v here (`attend`), through Keras' fused
`keras.ops.dot_product_attention` or written out (matrix products and a float32 softmax), by
an explicit choice (`--attention`, `IMPLEMENTATIONS`).

The fused op takes the padding (or a packed batch's segment) mask as a boolean mask and a
family's additive bias (MPNet's per relative distance, DeBERTa's disentangled scores, a dense
sliding window) as its `bias`; under JAX, Keras hands it to `jax.nn.dot_product_attention`,
whose cuDNN flash attention it picks on recent NVIDIA GPUs in float16 or bfloat16, and to the
Splash kernel on TPUs where the mask is known when traced (a padding mask is not: it falls back
to the XLA path there). On TensorFlow, and on a CPU, it is the same XLA/einsum computation
written in Keras' own ops. Either way the logits and the softmax are float32 and the
probabilities multiply the values in the compute dtype, as the written-out path does.

The fused op has no dropout on the probabilities: while attention dropout is active (training
with `attention_probs_dropout_prob` > 0) the written-out path computes, whatever the choice.

`AUTO` picks per backend and device (`fused_by_default`): what measured faster on a CPU
(BENCHMARKS.md, "Fused attention"), and the fused op on JAX's GPUs and TPUs, where Keras
routes it to cuDNN or Splash (unmeasured here: no accelerator was lent).

Examples:
>>> q = k = v = ops.ones([1, 2, 3, 4])  # [batch, heads, seq, head_size]
>>> rows = attend(q, k, v, ops.zeros([1, 1, 1, 3]), implementation=FUSED)
>>> tuple(rows.shape)  # token rows [batch * seq, heads * head_size]
(3, 8)
"""

from __future__ import annotations

import math

import keras
from keras import ops

from bertfit.config import ATTENTIONS as IMPLEMENTATIONS
from bertfit.model.backend import TENSORFLOW
from bertfit.model.layers import matmul_transposed

AUTO, FUSED, EXPLICIT = IMPLEMENTATIONS


def fused_by_default() -> bool:
    """Whether `AUTO` takes the fused op on this process's backend and device: on JAX's GPUs
    and TPUs (cuDNN, Splash); on CPUs written out, measured faster there on both backends."""
    if TENSORFLOW or keras.backend.backend() != "jax":
        return False
    import jax

    return jax.devices()[0].platform != "cpu"


def uses_fused(implementation: str, dropout=None, training=False) -> bool:
    """Whether `attend` computes through the fused op: not while `dropout` drops
    probabilities (the fused op has none), else as `implementation` says.

    Examples:
    >>> uses_fused(FUSED), uses_fused(EXPLICIT)
    (True, False)
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"attention implementation {implementation!r} not in {IMPLEMENTATIONS}")
    if training and dropout is not None and dropout.rate > 0:
        return False
    if implementation == AUTO:
        return fused_by_default()
    return implementation == FUSED


def attend(
    q,
    k,
    v,
    padding_bias,
    *,
    bias=None,
    scale: float | None = None,
    dropout=None,
    training=False,
    implementation: str = AUTO,
):
    """softmax(q k^T * scale + padding_bias + bias) v as token rows.

    Args:
        q: the queries [batch, heads, queries, head_size].
        k, v: the keys and values [batch, kv_heads, keys, head_size]; kv_heads divides heads
            (grouped-query attention: each key/value head serves heads / kv_heads consecutive
            query heads).
        padding_bias: [batch, 1, 1 or queries, keys]: 0 where the query may attend to the key,
            -1e9 where not (padding, another example of a packed row).
        bias: a float32 bias added to the logits, broadcastable to [batch, heads, queries,
            keys], or None.
        scale: the logits' scale; default 1 / sqrt(head_size).
        dropout: the probabilities' dropout layer, or None.
        implementation: `AUTO`, `FUSED` or `EXPLICIT` (see `uses_fused`).

    Returns:
        [batch * queries, heads * head_size] in `v`'s dtype.
    """
    heads, head_size = q.shape[1], q.shape[-1]
    scale = 1.0 / math.sqrt(head_size) if scale is None else scale
    group = heads // k.shape[1]
    if uses_fused(implementation, dropout, training):
        if TENSORFLOW and group > 1:  # Keras' TensorFlow op repeats them too, but not one head
            k, v = _shared(k, v, group)
        attended = ops.dot_product_attention(
            *(ops.transpose(x, (0, 2, 1, 3)) for x in (q, k, v)),  # [batch, seq, heads, size]
            bias=bias,
            mask=padding_bias > -1.0,
            scale=scale,
        )
        return ops.reshape(attended, (-1, heads * head_size))
    # Batched matrix products on [batch, heads, seq, head_size]: TensorFlow's einsum
    # transposes the same way inside, yet a step took ~4% longer with it (2-core CPU).
    if group > 1:
        k, v = _shared(k, v, group)
    # The bias is 0 or -1e9, and the softmax runs in float32 whatever the compute dtype.
    logits = ops.cast(matmul_transposed(q, k), "float32") * scale
    logits += ops.cast(padding_bias, "float32")
    if bias is not None:
        logits += bias
    probs = ops.cast(ops.softmax(logits, axis=-1), v.dtype)
    if dropout is not None:
        probs = dropout(probs, training=training)
    attended = ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))
    return ops.reshape(attended, (-1, heads * head_size))


def _shared(k, v, group: int):
    """Keys and values [batch, kv_heads, keys, head_size] as one head per query head: each
    serves `group` consecutive query heads (transformers' `repeat_kv`)."""
    return ops.repeat(k, group, axis=1), ops.repeat(v, group, axis=1)
